"""A DagNet's backward schedules and forward solvers against its sequential order: the DAG's benchmark.

    python profiling/dag_bench.py --repeats 7                # N 16,64,256  D 8,32,128  B 1,8: about a minute
    python profiling/dag_bench.py --sizes 16 --depths 8 --batch 1 --time backward

For every DAG shape (``--kind``), width N, depth D and batch size B, ``measure`` times, in one alternation
(``runner.interleaved``), the backward pass of the ``network`` under each schedule of ``--schedule`` and the
forward pass node by node (the forward's ``sequential`` row, its baseline), by ``ForwardJacobi()`` and by
``ForwardNewton()`` (``--time``), each row beside its speed-up over the sequential order of its pass and the
rounds, sweeps or iterations, flops and memory its solver reports; the block solvers are held to
``--memory-limit`` and ``--max-block-depth``. A suite of ``leapfrog-bench``'s runner
(leapfrog_gpu/tools/bench/runner.py), on the NumPy backend unless ``--backend`` says otherwise; the records go
to ``results/dag_bench_cpu_<UTC date>.json`` (``-2``, ``-3`` ... before ``.json`` where a run of the day wrote
it) unless ``--json`` says otherwise. What the rows mean: docs/dag.md.
"""

import datetime
import functools
import sys
from pathlib import Path

import numpy as np

from leapfrog_gpu.backends import get_backend, timing
from leapfrog_gpu.dag.forward import ForwardJacobi, ForwardNewton, forward_counters
from leapfrog_gpu.dag.layers import Add, Concat, Dense
from leapfrog_gpu.dag.network import INPUT, DagNet
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import progress, runner
from leapfrog_gpu.tools.bench.runner import NOISY, noisy, ratio, spread
from leapfrog_gpu.tools.cli import integer, integers, names
from leapfrog_gpu.tools.schedules import schedule_names

HERE = Path(__file__).resolve().parent
PROG = "python profiling/dag_bench.py"
RECORDS = "records"
GRID = {"kind": "kind", "N": "sizes", "D": "depths", "B": "batch"}
ABOUT = ("memory_limit_mib", "max_block_depth", "warmup")
BASELINE = schedule_names("dag")[0]
KINDS = {"residual": Add, "dense": Concat}
"""The DAG shapes, by the layer that joins node i - 3 into node i (``network``)."""
PASSES = ("backward", "forward")
"""What ``measure`` can time: the backward schedules, the forward solvers."""
TITLE = "speed-up vs seq: the sequential order's median over the row's, same pass and network (> 1: faster)"
"""The line above the table: which way its speed-ups point."""
COLUMNS = (("pass", -8), ("schedule", -14), ("median [p20-p80] ms", -23), ("speed-up vs seq", 15), ("rounds", 6),
           ("iters", 5), ("flops/seq", 9), ("mem MiB", 8))
"""The columns' titles and widths (< 0: left-aligned), each row indented by two spaces under its network."""
TITLES, WIDTHS = zip(*COLUMNS)
HEADER = "  " + runner.line(TITLES, WIDTHS, " ")
HEAD = (TITLE, HEADER)
LEGEND = ("speed-up vs seq: the sequential order's median over the row's; > 1: faster\n"
          f"! noisy: p80 - p20 over {NOISY:.0%} of the median; rounds: dependent steps; iters: sweeps or iterations\n"
          "flops/seq: flops over the sequential order's; mem MiB: what the solver holds")
"""The lines under the table, then ``FORWARD`` where forward rows were timed."""
FORWARD = "forward: its speed-up over the forward pass node by node (its sequential row)"


def network(kind, N, D, dtype="float32", backend="numpy", seed=0):
    """The ``DagNet`` of shape ``kind``, width N, nodes "1".."D" each reading the one before: ``residual``, every
    third node but the last an ``Add`` of nodes i - 1 and i - 3 (a skip connection); ``dense``, a ``Concat`` of
    them instead (DenseNet-like, 2N wide); the other nodes ``Dense`` tanh layers, the last a sigmoid."""
    nodes = []
    for i in range(1, D + 1):
        previous = str(i - 1) if i > 1 else INPUT
        if i % 3 == 0 and i < D:
            nodes.append((str(i), KINDS[kind](), [previous, str(i - 3) if i > 3 else INPUT]))
        else:
            nodes.append((str(i), Dense(N, "sigmoid" if i == D else "tanh"), [previous]))
    return DagNet(N, nodes, dtype=dtype, seed=seed, backend=backend)


def measure(kind, N, D, B, backend, k=2, repeats=7, warmup=1, memory_limit=2**26, max_block_depth=32,
            dtype="float32", names=schedule_names("dag"), passes=PASSES):
    """The records of one network on ``backend`` (a backend object), for each of ``passes``: a dict per backward
    schedule of ``names`` (the sequential order first, always), and per forward solver (``forward_rows``):
    ``ms`` (median, p20, p80), ``speedup`` and ``stats`` (its numbers), or ``refused`` and the memory the solver
    would need (``memory_limit`` in bytes)."""
    rng = np.random.default_rng(0)
    x, y = rng.random((N, B)).astype(dtype), rng.uniform(0.05, 0.95, (N, B)).astype(dtype)
    calls, needed = {}, {}
    with network(kind, N, D, dtype, backend) as net:
        def backward(schedule):  # one backward pass: its counters
            net.backprop(x, y, schedule)
            return dict(net.stats["backward"])

        rows = []
        if "backward" in passes:
            rows += [("backward", name, schedule, functools.partial(backward, schedule))
                     for name, schedule in runner.schedules("dag", names, k=k, memory_limit=memory_limit).items()]
        if "forward" in passes:
            rows += forward_rows(net, x, memory_limit)
        for pass_, name, made, call in rows:
            needed[pass_, name] = memory = made.memory_needed(net, B) if hasattr(made, "memory_needed") else 0
            calls[pass_, name] = call
            if memory > memory_limit:
                calls[pass_, name] = f"needs {memory / 2**20:.1f} MiB > --memory-limit {memory_limit / 2**20:g} MiB"
            elif memory and D > max_block_depth:
                calls[pass_, name] = f"skipped: D > --max-block-depth {max_block_depth} (work grows as D^3)"
        timed = runner.interleaved(backend, calls, repeats, warmup)
        shared = {"kind": kind, "N": N, "D": net.depth, "B": B, "k": k, "dtype": dtype, "backend": backend.name}
    records = []
    for (pass_, name), result in timed.items():
        record = {**shared, "pass": pass_, "schedule": name, "repeats": repeats}
        if "refused" in result:
            record.update(refused=result["refused"], stats={"memory_bytes": needed[pass_, name]})
        else:
            record["ms"] = timing.summary(result.pop("ms"))
            record["stats"] = {key: value for key, value in result.items()
                               if isinstance(value, (int, float)) and not isinstance(value, bool)}
        records.append(record)
    return with_speedups(records)


def forward_rows(net, x, memory_limit):
    """The forward passes of ``net`` on ``x``, each ``(pass, name, solver, call)``, ``call()`` a pass that returns
    its counters: node by node, by ``ForwardJacobi()`` and by ``ForwardNewton(memory_limit=...)``."""
    counters = forward_counters(net, x.shape[1])
    node_by_node = {"rounds": counters["sequential_rounds"], "flops": counters["sequential_flops"],
                    "bytes": counters["sequential_bytes"], "memory_bytes": 0, **counters}

    def sequential():
        net.feedforward(x)
        return dict(node_by_node)

    def solved(solver):
        def call():
            net.feedforward(x, solver=solver)
            return dict(solver.stats)

        return call

    jacobi, newton = ForwardJacobi(), ForwardNewton(memory_limit=memory_limit)
    return [("forward", "sequential", None, sequential), ("forward", "forward-jacobi", jacobi, solved(jacobi)),
            ("forward", "forward-newton", newton, solved(newton))]


def with_speedups(records):
    """``records``, each timed one given ``speedup`` over the sequential record of the same pass on the same
    network (kind, N, D, B, k, dtype, backend)."""
    return runner.speedups(records, group=lambda r: tuple(r[key] for key in (*GRID, "k", "dtype", "backend", "pass")),
                           baseline=lambda r: r["schedule"] == BASELINE,
                           median=lambda r: r["ms"]["median"] if "ms" in r else None)


def heading(case):
    """The line above a network's rows."""
    r = case[0]
    return [f"{r['kind']} DAG, N={r['N']} D={r['D']} B={r['B']}, {r['dtype']}, {r['backend']}, k={r['k']}"]


def format_row(record):
    """One row under ``HEADER``: within 100 columns whatever its numbers (a refusal across the timed ones)."""
    stats = record.get("stats", {})
    memory = _short(stats.get("memory_bytes", 0) / 2**20, 2)
    if "refused" in record:
        return "  " + runner.line((record["pass"], record["schedule"], record["refused"][:62], memory),
                                  (-8, -14, -62, 8), " ")
    flops = _short(stats["flops"] / stats["sequential_flops"], 1) if stats.get("sequential_flops") else "-"
    return "  " + runner.line((record["pass"], record["schedule"], spread(record["ms"]) + "!" * noisy(record["ms"]),
                               ratio(record.get("speedup")), _short(stats.get("rounds", ""), 0),
                               _short(stats.get("sweeps", stats.get("iterations", "")), 0), flops, memory), WIDTHS, " ")


def _short(value, digits):
    """A number with ``digits`` decimals, or to 3 significant digits from 10^4 up ("" as it is)."""
    if value == "":
        return value
    return f"{value:.{digits}f}" if value < 1e4 else f"{value:.3g}"


def work(key):
    """A network's weight in the time left: D (D + 8) layers' (its Jacobi solvers sweep D times)."""
    return key["D"] * (key["D"] + 8) * progress.layer_work(key["N"], key["B"])


def start(args):
    """One backend for every network (``--blas-threads`` on numpy)."""
    options = {"mode": "threads", "blas_threads": args.blas_threads} if args.backend == "numpy" else {}
    return get_backend(args.backend, **options)


def case(args, backend, key):
    return measure(**key, backend=backend, k=args.k, repeats=args.repeats, warmup=args.warmup,
                   memory_limit=int(args.memory_limit_mib * 2**20), max_block_depth=args.max_block_depth,
                   dtype=args.dtype, names=args.schedule, passes=args.time)


def foot(args, backend, records, about):
    print(LEGEND)
    if "forward" in args.time:
        print(FORWARD)


def parser():
    """The command line of ``python profiling/dag_bench.py``."""
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    p = runner.parser(PROG, __doc__.split("\n\n")[0], "dag", sizes=[16, 64, 256], batch=[1, 8], repeats=7, warmup=1,
                      torch=False, backend="numpy", json=str(HERE / "results" / f"dag_bench_cpu_{date}.json"))
    p.add_argument("--kind", type=names(KINDS, "kind"), default=["residual"], metavar="KIND[,KIND...]",
                   help=f"DAG shapes, from {', '.join(KINDS)} (default residual)")
    p.add_argument("--depths", type=integers(1, "depth"), default=[8, 32, 128], metavar="D[,D...]",
                   help="depths D: nodes on the longest path (default 8,32,128)")
    p.add_argument("--time", type=names(PASSES, "pass"), default=list(PASSES), metavar="PASS[,PASS...]",
                   help="what to time: backward (the backward schedules), forward (the pass node by node and by "
                        "the forward solvers), or both (default backward,forward)")
    p.add_argument("--k", type=integer(1), default=2, metavar="K",
                   help="worker streams of the backward schedules (default 2)")
    p.add_argument("--memory-limit", type=integer(1), default=64, metavar="MIB",
                   dest="memory_limit_mib", help="MiB the block solvers (dag-jacobi, dag-doubling, forward-newton) "
                                                 "may hold (default 64)")
    p.add_argument("--max-block-depth", type=integer(1), default=32, metavar="D",
                   help="the deepest D at which the block solvers run (default 32)")
    p.add_argument("--blas-threads", type=integer(1), default=1, metavar="N",
                   help="numpy backend: BLAS threads (default 1)")
    return p


def main(argv=None):
    """The benchmark on NumPy with its records under results/ unless the options say otherwise; its exit status."""
    return runner.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(guarded(main, PROG))
