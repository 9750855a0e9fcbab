"""What summing the gradients across ranks costs a data-parallel MLP step, and how much of it the backward
pass hides: run under ``mpiexec -n P`` (P > 1); every rank measures, rank 0 reports.

    mpiexec -n 2 python profiling/parallel_bench.py --backend numpy --sizes 1024 --layers 16 --batch 64 --k 2 \\
        --blas-threads 1 --bucket-mb 0,1,4,25 --json dp.json

For every network ``[N] * L``, batch B per rank, schedule and bucket size, every rank times in turn
(``timing.measure_interleaved``) ``step``, the data-parallel SGD step on its share B of a batch of B·P;
``local``, the same step without the sums; ``sums``, the sums alone. Then rank 0 alone times ``one``: one
process stepping on the whole batch. From these: ``exposed = step - local``, ``hidden = 1 - exposed / sums``
(noise can push it past 0 % or 100 %: the table says ``none`` or ``all``) and ``speedup = one / step``;
``local`` and ``sums`` are the slowest rank's medians, ``step`` rank 0's. ``--fused`` fuses every schedule's
update (data-parallel, it follows each bucket's sum). The columns: docs/performance.md; several runs' files
as its Markdown table: ``profiling/parallel_table.py``.
"""

import sys

import numpy as np

from leapfrog_gpu.backends import get_backend, timing
from leapfrog_gpu.mlp import autotune
from leapfrog_gpu.mlp.network import MLP
from leapfrog_gpu.parallel import comm as parallel
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import measure, mlp as bench_mlp
from leapfrog_gpu.tools.bench.runner import command_line, ratio, spread
from leapfrog_gpu.tools.cli import integers, reals
from grid_options import grid_parser, networks, parse, write
from leapfrog_gpu.tools.schedules import make_schedule, names_type, schedule_names

PROG = "python profiling/parallel_bench.py"
COLUMNS = ("N", "L", "B", "P", "dtype", "schedule", "k", "bucket MB", "blas", "step ms [p20-p80]", "local ms",
           "sums ms", "sums GB/s", "exposed ms", "hidden", "one process ms (B*P)", "speed-up vs one process")
TITLE = "speed-up vs one process: one process's step on B*P samples over the data-parallel step (> 1: faster)"
"""The line above the table: which way its speed-ups point."""


def parser():
    p = grid_parser(PROG, __doc__, "; cupy: a GPU per rank", "batch sizes B per rank",
                    json_help="write the records to FILE (rank 0)")
    p.add_argument("--schedule", type=names_type("mlp"), default=bench_mlp.DEFAULT_SCHEDULES,
                   metavar="NAME[,NAME...]", help=f"schedules by name, from {', '.join(schedule_names('mlp'))}; "
                                                  "sequential is always measured (default sequential,leapfrog)")
    p.add_argument("--k", type=integers(1, "worker stream count"), default=[1, 2, 4], metavar="K[,K...]",
                   help="worker streams (default 1,2,4)")
    p.add_argument("--fused", action="store_true", help="every schedule fuses the SGD update")
    p.add_argument("--blas-threads", type=integers(1, "BLAS thread count"), default=[1], metavar="N[,N...]",
                   help="BLAS threads per host stream, each count measured (default 1)")
    p.add_argument("--bucket-mb", type=reals(0, "bucket size"), default=[parallel.DEFAULT_BUCKET_BYTES / 2**20],
                   metavar="MB[,MB...]", help="bucket sizes in MB to measure (default 0: one sum per layer)")
    return p


def main(argv=None):
    """Measure on every rank, print the table and write ``--json`` on rank 0; the exit status (2: a bad
    option, or one process)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = parse(p, argv)
    comm = parallel.world(PROG)
    if comm.size == 1:
        p.error("run it under mpiexec -n P with P > 1: it measures what the sums across ranks cost")
    comm.use_own_device(args.backend)
    specs = [(name, k, make_schedule("mlp", name, k, fused=args.fused)) for name, k in measure.configurations(args)]
    records = run(args, comm, specs, measure.ETA)
    if comm.rank == 0:
        print(table(records))
        write(args, command_line(f"mpiexec -n {comm.size} {PROG}", argv), "records", records)
    return 0


def run(args, comm, specs, eta):
    """Every record of the grid (a list of dicts, complete on rank 0). ``specs`` lists the schedules to
    measure as ``(name, k, schedule)``; ``eta`` is the learning rate of the timed steps."""
    comms = {mb: parallel.world(PROG, bucket_bytes=round(mb * 2**20)) for mb in args.bucket_mb}
    records = []
    for threads in args.blas_threads:
        with autotune.blas_limit(threads):
            for sizes, batch in networks(args):
                records += measure_case(args, comm, comms, sizes, batch, threads, specs, eta)
    return records


def measure_case(args, comm, comms, sizes, batch, threads, specs, eta):
    """The records of the network ``sizes`` at ``batch`` per rank, one per schedule and bucket size."""
    rng = np.random.default_rng(0)
    total = batch * comm.size
    x = rng.random((sizes[0], total)).astype(args.dtype)
    y = rng.random((sizes[-1], total)).astype(args.dtype)
    share = comm.share(total)
    x_share, y_share = x[:, share], y[:, share]
    kind = dict(activation=args.activation, dtype=args.dtype)
    found = []
    with get_backend(args.backend) as backend, MLP(sizes, backend=backend, **kind) as alone:
        nets = {mb: MLP(sizes, backend=backend, comm=c, **kind) for mb, c in comms.items()}
        for name, k, schedule in specs:
            for mb, net in nets.items():
                net.sgd_step(x, y, eta, schedule)  # the plan, and its sums, exist from here on
                reducer = net.plan(x_share.shape[1]).reducer
                step, local, sums = timing.measure_interleaved(backend, [
                    lambda: net.sgd_step(x, y, eta, schedule),
                    lambda: alone.sgd_step(x_share, y_share, eta, schedule),
                    reducer.sum_all,
                ], args.repeats, args.warmup)
                found.append({"schedule": name, "k": k, "fused": args.fused, "bucket_mb": mb,
                              "step_ms": timing.summary(step), "local_ms": timing.summary(local),
                              "sums_ms": timing.summary(sums)})
        one = {}
        comm.barrier()
        if comm.rank == 0:  # one process on the whole batch; the other ranks sleep in the barrier
            for name, k, schedule in specs:
                one[name, k] = timing.summary(timing.measure(
                    backend, lambda: alone.sgd_step(x, y, eta, schedule), args.repeats, args.warmup))
        comm.barrier()
        for net in nets.values():
            net.close()
    slowest = comm.allgather([(r["local_ms"]["median"], r["sums_ms"]["median"]) for r in found])
    nbytes = sum(sizes[i] * (sizes[i - 1] + 1) for i in range(1, len(sizes))) * np.dtype(args.dtype).itemsize
    records = []
    for i, r in enumerate(found):
        local = max(rank[i][0] for rank in slowest)
        sums = max(rank[i][1] for rank in slowest)
        step = r["step_ms"]["median"]
        one_ms = one.get((r["schedule"], r["k"]))
        records.append({
            "backend": args.backend, "dtype": args.dtype, "N": sizes[0], "L": len(sizes), "B": batch, "P": comm.size,
            "blas_threads": threads, "repeats": args.repeats, **r, "local_slowest_ms": local, "sums_slowest_ms": sums,
            "bytes_summed": nbytes, "sums_gbps": nbytes / (sums * 1e6), "exposed_ms": step - local,
            "hidden": 1 - (step - local) / sums, "one_ms": one_ms,
            "speedup": None if one_ms is None else one_ms["median"] / step})
    return records


def table(records):
    """``TITLE``, then one row per record, as fixed-width text."""
    rows = [COLUMNS]
    for r in records:
        name = r["schedule"] + ("+fused" if r.get("fused") else "")
        rows.append((r["N"], r["L"], r["B"], r["P"], r["dtype"], name, r["k"], f"{r['bucket_mb']:g}",
                     r["blas_threads"], spread(r["step_ms"]), f"{r['local_slowest_ms']:.3f}",
                     f"{r['sums_slowest_ms']:.3f}", f"{r['sums_gbps']:.2f}", f"{r['exposed_ms']:.3f}",
                     hidden(r["hidden"]), spread(r["one_ms"]), ratio(r["speedup"])))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(0, TITLE)
    lines.append("B per rank; step: the data-parallel step (rank 0); local: the same step without the sums; sums: "
                 "the sums alone (slowest rank); exposed = step - local; hidden = 1 - exposed / sums (none: the step "
                 "waited as long as the sums took, or longer; all: not at all)")
    return "\n".join(lines)


def hidden(share):
    """The share of the sums hidden, within 0..100 %: noise alone takes it outside."""
    return "none" if share <= 0 else "all" if share >= 1 else f"{100 * share:.0f}%"


if __name__ == "__main__":
    sys.exit(guarded(main, PROG))
