"""Forward solvers and DAG backward schedules against the sequential order, on the CPU.

    python profiling/dag_bench.py                      # N 16,64,256  D 8,32,128  B 1,8: about 4 minutes
    python profiling/dag_bench.py --N 16 --D 8 --B 1   # one point

The network of every (N, D, B) is a residual DAG of depth D and width N: node i reads node i - 1, and
every third node is an ``Add`` of node i - 1 and node i - 3 (a skip connection), the rest ``Dense``
tanh layers (the last a sigmoid), float32 on the NumPy backend (host streams). Backward rows time
``backprop`` under each schedule (the forward node by node, then the schedule); forward rows time
``feedforward`` by each solver. Every row is timed ``--repeats`` times, the schedules interleaved
within a repeat so that load falls on all alike, after one warm-up; the table gives the median, its
ratio to the sequential row of its kind in the same run, and the solver's rounds, flops and memory.
``DagDoubling`` and ``ForwardNewton`` hold a block per reachable pair of nodes (about D^2/2 of them,
N^2 B each): where that exceeds ``--memory-limit`` they refuse before allocating, and deeper than
``--max-block-depth`` (their block products grow as D^3) they are skipped; the row says which.
Writes ``results/dag_bench_cpu_<UTC date>.json``.
"""

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from leapfrog_gpu import DagDoubling, DagJacobi, Dense, ForwardJacobi, ForwardNewton, GraphNet, Leapfrog, LevelSets
from leapfrog_gpu import Sequential
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.layers import Add

HERE = Path(__file__).resolve().parent


def residual_dag(N, D, backend):
    """Depth D, width N: nodes 1..D, node i = Add(i - 1, i - 3) when i % 3 == 0 (i < D), else Dense."""
    nodes = []
    for i in range(1, D + 1):
        name, previous = str(i), str(i - 1) if i > 1 else "x"
        if i % 3 == 0 and i < D:
            nodes.append((name, Add(), [previous, str(i - 3) if i > 3 else "x"]))
        else:
            nodes.append((name, Dense(N, "sigmoid" if i == D else "tanh"), previous))
    return GraphNet(N, nodes, dtype="float32", seed=0, backend=backend)


def runs(memory_limit):
    """(kind, name, make) for every row: a fresh solver or schedule per call."""
    return [
        ("backward", "sequential", lambda: Sequential()),
        ("backward", "leapfrog k=2", lambda: Leapfrog(2)),
        ("backward", "level-sets", lambda: LevelSets(k=2)),
        ("backward", "dag-jacobi", lambda: DagJacobi(k=2)),
        ("backward", "dag-doubling", lambda: DagDoubling(k=2, memory_limit=memory_limit)),
        ("forward", "sequential", lambda: None),
        ("forward", "forward-jacobi", lambda: ForwardJacobi()),
        ("forward", "forward-newton", lambda: ForwardNewton(memory_limit=memory_limit)),
    ]


def one(net, kind, make, x, y):
    """Run one row once; return (seconds, the solver's or schedule's stats)."""
    made = make()
    start = time.perf_counter()
    if kind == "backward":
        net.backprop(x, y, made)
        stats = net.stats["backward"]
    else:
        net.feedforward(x, solver=made)
        stats = made.stats if made is not None else {}
    return time.perf_counter() - start, stats


def point(N, D, B, args, backend):
    net = residual_dag(N, D, backend)
    rng = np.random.default_rng(0)
    x, y = rng.random((N, B)), rng.random((N, B))
    rows, times = {}, {}
    for kind, name, make in runs(args.memory_limit):
        row = {"kind": kind, "schedule": name, "N": N, "D": net.depth, "B": B, "dtype": net.dtype}
        made = make()
        needed = made.memory_needed(net, B) if hasattr(made, "memory_needed") else 0
        if needed > args.memory_limit:
            row["refused"] = f"needs {needed} bytes > memory_limit {args.memory_limit}"
        elif needed and D > args.max_block_depth:
            row["refused"] = f"skipped: D > --max-block-depth {args.max_block_depth} (block products grow as D^3)"
        if "refused" in row:
            row["stats"] = {"memory_bytes": needed}
        else:
            one(net, kind, make, x, y)  # warm-up
            times[kind, name] = []
        rows[kind, name] = row
    for _ in range(args.repeats):
        for (kind, name, make) in runs(args.memory_limit):
            if (kind, name) in times:
                seconds, stats = one(net, kind, make, x, y)
                times[kind, name].append(seconds)
                rows[kind, name]["stats"] = {key: value for key, value in stats.items()
                                             if isinstance(value, (int, float)) and not isinstance(value, bool)}
    for key, samples in times.items():
        rows[key]["median_s"] = statistics.median(samples)
    for (kind, name), row in rows.items():
        base = rows[kind, "sequential"].get("median_s")
        if "median_s" in row and base:
            row["ratio"] = row["median_s"] / base
    net.close()
    return list(rows.values())


def show(row):
    stats = row.get("stats", {})
    rounds = stats.get("rounds", stats.get("sequential_rounds", ""))
    work = stats.get("flops", stats.get("sequential_flops"))
    base = stats.get("sequential_flops")
    if "refused" in row:
        timing = f"{'skipped' if row['refused'].startswith('skipped') else 'refused':>10} {'':>7}"
    else:
        timing = f"{1e3 * row['median_s']:10.3f} {row['ratio']:7.2f}"
    flops = f"{work / base:9.1f}" if work and base else f"{'':>9}"
    memory = stats.get("memory_bytes", 0) / 2**20
    print(f"{row['N']:>4} {row['D']:>4} {row['B']:>2}  {row['kind']:<8} {row['schedule']:<15}{timing} {rounds!s:>7}"
          f" {flops} {memory:9.2f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", default="16,64,256", help="widths, comma-separated")
    parser.add_argument("--D", default="8,32,128", help="depths, comma-separated")
    parser.add_argument("--B", default="1,8", help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-limit", type=int, default=2**26, help="bytes the block solvers may hold")
    parser.add_argument("--max-block-depth", type=int, default=32,
                        help="the deepest D at which the block solvers run (their products grow as D^3)")
    parser.add_argument("--out", default=None, help="the JSON file (default results/dag_bench_cpu_<date>.json)")
    args = parser.parse_args(argv)
    grid = [[int(v) for v in text.split(",")] for text in (args.N, args.D, args.B)]
    print(f"{'N':>4} {'D':>4} {'B':>2}  {'kind':<8} {'schedule':<15}{'median ms':>10} {'vs seq':>7} {'rounds':>7}"
          f" {'flops/seq':>9} {'mem MiB':>9}")
    rows, started = [], time.perf_counter()
    with NumpyBackend(mode="threads", blas_threads=1) as backend:
        for N in grid[0]:
            for D in grid[1]:
                for B in grid[2]:
                    for row in point(N, D, B, args, backend):
                        show(row)
                        rows.append(row)
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    out = Path(args.out) if args.out else HERE / "results" / f"dag_bench_cpu_{date}.json"
    meta = {"date": date, "python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
            "repeats": args.repeats, "memory_limit": args.memory_limit, "seconds": time.perf_counter() - started}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out} ({meta['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
