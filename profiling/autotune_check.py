"""Is the configuration ``autotune.tune`` picks as fast as the best sequential one? Per network, its check.

    python profiling/autotune_check.py --backend numpy --sizes 256,1024 --layers 8,16 --batch 1,64 --k 1,2,4

For every network ``[N] * L`` and batch size B: ``autotune.tune`` calibrates the SGD step among
``Sequential()`` and ``Leapfrog(k)`` for each ``--k`` at each BLAS setting (``--blas-threads``, by default
one thread and all cores; none on a GPU) and picks one; then its step and the sequential step at every BLAS
setting are timed in one alternation (``runner.interleaved``, a block per setting). One line per network
says what it chose, its step's speed-up over the best sequential step, and whether it is within noise of it
(its p20 at most the best sequential step's p80) or SLOWER. ``--json`` keeps a record per network.
"""

import sys

from leapfrog_gpu.backends import get_backend, host_blas, timing
from leapfrog_gpu.core.schedules import Sequential
from leapfrog_gpu.mlp import autotune
from leapfrog_gpu.mlp.network import MLP
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import measure, runner
from leapfrog_gpu.tools.cli import blas_thread_counts, integers, refuse_blas_threads_on_cupy, refusing_too_large
from grid_options import grid_parser, networks, parse, write

PROG = "python profiling/autotune_check.py"


def parser():
    p = grid_parser(PROG, __doc__)
    p.add_argument("--k", type=integers(1, "worker stream count"), default=autotune.KS, metavar="K[,K...]",
                   help=f"the worker streams it tries (default {','.join(map(str, autotune.KS))})")
    p.add_argument("--blas-threads", type=blas_thread_counts, default=None, metavar="N[,N...]",
                   help=f"numpy backend: the BLAS settings it tries (default 1 and all cores, {host_blas.all_threads()} "
                        "here)")
    p.add_argument("--fused", action="store_true", help="every step fuses the SGD update into (7)")
    return p


def check(args, sizes, batch):
    """The record of the network ``sizes`` at ``batch``: what ``autotune.tune`` chose, its step and the best
    sequential step (``step_ms``, ``best_sequential_ms``: ``timing.summary``), the speed-up and the verdict."""
    settings = autotune.blas_settings(args.backend, args.blas_threads)
    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = measure.host_batch(sizes, batch, args.dtype)
        tuning = autotune.tune(net, batch, ks=args.k, blas_threads=None if args.backend == "cupy" else settings,
                               fused=args.fused)
        sequential = Sequential(fused=args.fused)
        calls = {("sequential", threads): lambda: net.sgd_step(x, y, measure.ETA, sequential) for threads in settings}
        calls["auto", tuning.blas_threads] = lambda: net.sgd_step(x, y, measure.ETA, tuning.schedule)
        timed = runner.interleaved(backend, calls, args.repeats, args.warmup,
                                   {row: (row[1], lambda t=row[1]: autotune.blas_limit(t)) for row in calls})
    steps = {row: timing.summary(result["ms"]) for row, result in timed.items()}
    auto = steps.pop(("auto", tuning.blas_threads))
    (_, best_threads), best = min(steps.items(), key=lambda item: item[1]["median"])
    return {"N": sizes[0], "L": len(sizes), "B": batch, "dtype": args.dtype, "backend": args.backend,
            "schedule": tuning.schedule.name, "k": tuning.schedule.k, "fused": args.fused,
            "blas_threads": tuning.blas_threads, "step_ms": auto, "best_sequential_blas_threads": best_threads,
            "best_sequential_ms": best, "speedup": best["median"] / auto["median"],
            "auto_within_noise": auto["p20"] <= best["p80"]}


def line(r):
    """What ``leapfrog-bench --k auto`` said of its choice."""
    verdict = "within noise of" if r["auto_within_noise"] else "SLOWER than"
    return (f"auto chose {r['schedule']} k={r['k']} blas={r['blas_threads']} at N={r['N']} L={r['L']} B={r['B']}: "
            f"step {r['speedup']:.2f}x as fast as the best sequential, {verdict} it")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = parse(p, argv)
    refuse_blas_threads_on_cupy(p, args)
    records = []
    with refusing_too_large(p):
        for sizes, batch in networks(args):
            records.append(check(args, sizes, batch))
            print(line(records[-1]), flush=True)
            write(args, runner.command_line(PROG, argv), "records", records)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, PROG))
