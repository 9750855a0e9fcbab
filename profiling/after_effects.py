"""What a step's time owes to what ran just before it: one training step by an optimizer at N, L, B (ours on the
NumPy backend, or PyTorch's), timed right after each of a set of steps in turn, so that a drift of the
machine's load reaches all of them alike.

    python profiling/after_effects.py --size 1024 --layers 16 --batch 64 --json after.json

The steps, each timed after each: ours leapfrog+fused k = 1 as a graph, sequential+fused, leapfrog+fused
k = 2 and sequential+one-pass as a graph, with the backend's BLAS on ``--threads`` threads, and PyTorch's step
by ``torch.optim``'s fused update at as many threads (``torch``: the bench's anchor, when ``torch`` imports).
``--timed`` picks the one timed (default ours leapfrog+fused k = 1 as a graph); its median, p20 and p80 over
``--rounds`` rounds, per step before it (itself among them, as a training loop runs it). Why ``leapfrog-bench``
times each repeat right after an untimed one of its own (docs/performance.md).
"""

import sys
import time

import numpy as np

from leapfrog_gpu import MLP, Leapfrog, Sequential, get_backend
from leapfrog_gpu.backends import timing
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import measure, runner, torch_anchor
from leapfrog_gpu.tools.cli import Parser, blas_threads, integer, output_refusal, path, refusing_too_large

OURS = {"leapfrog+fused k=1 graph": (Leapfrog(1, fused=True), True),
        "sequential+fused": (Sequential(fused=True), False),
        "leapfrog+fused k=2": (Leapfrog(2, fused=True), False),
        "sequential+one-pass graph": (Sequential(one_pass=True), True)}


def main(argv=None):
    p = Parser(prog="python profiling/after_effects.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=integer(1), default=1024, help="N, every layer's width (default 1024)")
    p.add_argument("--layers", type=integer(2), default=16, help="L, the layers (default 16)")
    p.add_argument("--batch", type=integer(1), default=64, help="B (default 64)")
    p.add_argument("--optimizer", choices=list(measure.OPTIMIZERS), default="adam", help="(default adam)")
    p.add_argument("--threads", type=blas_threads, default=2, help="BLAS threads, and PyTorch's (default 2)")
    p.add_argument("--timed", choices=[*(f"ours {name}" for name in OURS), "torch"],
                   default="ours leapfrog+fused k=1 graph",
                   help="the step timed: one of ours, or PyTorch's (default %(default)s)")
    p.add_argument("--rounds", type=integer(1), default=25,
                   help="rounds of every step before it (default 25)")
    p.add_argument("--json", type=path, metavar="FILE", help="write the medians to FILE")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.json and (why := output_refusal("--json", args.json)):
        p.error(why)
    sizes = [args.size] * args.layers
    optimizer = measure.OPTIMIZERS[args.optimizer]
    with refusing_too_large(p), get_backend("numpy", blas_threads=args.threads) as backend, \
            MLP(sizes, dtype="float32", backend=backend) as net:
        x, y = measure.host_batch(sizes, args.batch, "float32")

        def step(schedule, graph):
            return lambda: (net.train_step(x, y, optimizer, schedule, graph=graph), net.synchronize())

        before = {f"ours {name}": step(*how) for name, how in OURS.items()}
        skipped = torch_anchor.skipped(False)
        if skipped is None:
            anchor = torch_anchor.Step(net.to_torch(), x, y, optimizer, "fused")
            before["torch"] = lambda: anchor.step(args.threads)
        elif args.timed == "torch":
            p.error(f"--timed torch needs torch: {skipped}")
        timed = before[args.timed]
        for fn in before.values():
            fn()
        ms = {name: [] for name in before}
        for _ in range(args.rounds):
            for name, fn in before.items():
                fn()
                start = time.perf_counter()
                timed()
                ms[name].append((time.perf_counter() - start) * 1e3)
    stats = {name: timing.summary(np.array(times)) for name, times in ms.items()}
    if skipped:
        print(skipped)
    print(f"{args.timed} (torch-{args.optimizer}-fused)" if args.timed == "torch" else args.timed, end="")
    print(f", N={args.size} L={args.layers} B={args.batch} {args.optimizer}, BLAS {args.threads}: "
          f"ms right after each step, median [p20-p80] of {args.rounds}")
    for name, s in stats.items():
        print(f"  after {name:<32} {s['median']:7.2f} [{s['p20']:.2f}-{s['p80']:.2f}]")
    if args.json:
        record = {**runner.header(runner.command_line("python profiling/after_effects.py", argv), "numpy"),
                  "timed": args.timed, "N": args.size, "L": args.layers, "B": args.batch,
                  "optimizer": args.optimizer, "threads": args.threads, "rounds": args.rounds, "ms_after": stats}
        runner.write_json(args.json, record)


if __name__ == "__main__":
    sys.exit(guarded(main, "python profiling/after_effects.py"))
