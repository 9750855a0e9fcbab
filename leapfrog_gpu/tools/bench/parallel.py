"""``leapfrog-bench`` under ``mpiexec -n P``: what summing the gradients across ranks costs a step, and how
much of it the backward pass hides (``mlp`` comes here under mpiexec with more than one process).

    mpiexec -n 2 leapfrog-bench --backend numpy --sizes 1024 --layers 16 --batch 64 --k 2 --blas-threads 1 \\
        --bucket-mb 0,1,4,25 --json dp.json

For every network ``[N] * L``, batch B per rank, schedule and bucket size, every rank times in turn
(``timing.measure_interleaved``) ``step``, the data-parallel SGD step on its share B of a batch of B·P;
``local``, the same step without the sums; ``sums``, the sums alone. Then rank 0 alone times ``one``: one
process stepping on the whole batch. From these: ``exposed = step - local``, ``hidden = 1 - exposed / sums``
(noise can push it past 0 % or 100 %: the table says ``none`` or ``all``) and ``speedup = one / step``;
``local`` and ``sums`` are the slowest rank's medians, ``step`` rank 0's. The columns: docs/performance.md.
"""

import itertools

import numpy as np

from ...mlp import autotune
from ...parallel import comm as parallel
from ...backends import get_backend, timing
from ...mlp.network import MLP
from .runner import ratio, spread


def run(args, comm, specs, eta):
    """Every record of the grid (a list of dicts, complete on rank 0). ``specs`` lists the schedules to
    measure as ``(name, k, schedule)``; ``eta`` is the learning rate of the timed steps."""
    buckets = args.bucket_mb if args.bucket_mb is not None else [parallel.DEFAULT_BUCKET_BYTES / 2**20]
    comms = {mb: parallel.world("leapfrog-bench", bucket_bytes=round(mb * 2**20)) for mb in buckets}
    records = []
    for threads in args.blas_threads or [1]:
        with autotune.blas_limit(threads):
            for n, layers, batch in itertools.product(args.sizes, args.layers, args.batch):
                records += _measure_case(args, comm, comms, [n] * layers, batch, threads, specs, eta)
    return records


def _measure_case(args, comm, comms, sizes, batch, threads, specs, eta):
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
                found.append({"schedule": name, "k": k, "bucket_mb": mb, "step_ms": timing.summary(step),
                              "local_ms": timing.summary(local), "sums_ms": timing.summary(sums)})
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
    itemsize = np.dtype(args.dtype).itemsize
    nbytes = sum(sizes[i] * (sizes[i - 1] + 1) for i in range(1, len(sizes))) * itemsize
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


COLUMNS = ("N", "L", "B", "P", "dtype", "schedule", "k", "bucket MB", "blas", "step ms [p20-p80]", "local ms",
           "sums ms", "sums GB/s", "exposed ms", "hidden", "one process ms (B*P)", "speed-up vs one process")
TITLE = "speed-up vs one process: one process's step on B*P samples over the data-parallel step (> 1: faster)"
"""The line above the table: which way its speed-ups point."""


def table(records):
    """``TITLE``, then one row per record, as fixed-width text."""
    rows = [COLUMNS]
    for r in records:
        rows.append((r["N"], r["L"], r["B"], r["P"], r["dtype"], r["schedule"], r["k"], f"{r['bucket_mb']:g}",
                     r["blas_threads"], spread(r["step_ms"]), f"{r['local_slowest_ms']:.3f}",
                     f"{r['sums_slowest_ms']:.3f}", f"{r['sums_gbps']:.2f}", f"{r['exposed_ms']:.3f}",
                     _hidden(r["hidden"]), spread(r["one_ms"]), ratio(r["speedup"])))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(0, TITLE)
    lines.append("B per rank; step: the data-parallel step (rank 0); local: the same step without the sums; sums: "
                 "the sums alone (slowest rank); exposed = step - local; hidden = 1 - exposed / sums (none: the step "
                 "waited as long as the sums took, or longer; all: not at all)")
    return "\n".join(lines)


def _hidden(share):
    """The share of the sums hidden, within 0..100 %: noise alone takes it outside."""
    return "none" if share <= 0 else "all" if share >= 1 else f"{100 * share:.0f}%"
