"""PyTorch's MLP step through ``torch.compile`` beside its eager step and ours, on the same networks.

    python profiling/torch_compile.py --backend numpy --sizes 1024 --layers 16 --batch 1,64 --k 2 --fused

For every network ``[N] * L`` and batch size B, in one alternation (``runner.interleaved``): our SGD step
under ``sequential`` and ``leapfrog`` at each ``--k`` (fused with ``--fused``), PyTorch's eager step
(``torch-sgd-foreach``: ``torch.optim.SGD(foreach=True)``, as ``leapfrog-bench`` times it) and the same
step with its forward and backward compiled (``torch-compile``; its first steps compile, untimed), each
row beside its speed-up over ``torch-compile`` (> 1: faster). The networks, their batches and PyTorch's
steps are ``leapfrog-bench``'s (``leapfrog_gpu.tools.bench.torch_anchor``); ``--json`` keeps the rows.
"""

import sys

from leapfrog_gpu.backends import get_backend, timing
from leapfrog_gpu.mlp.network import MLP
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import measure, runner, torch_anchor
from leapfrog_gpu.tools.bench.runner import ratio, spread
from leapfrog_gpu.tools.cli import integers, refusing_too_large
from grid_options import grid_parser, networks, parse, write
from leapfrog_gpu.tools.schedules import make_schedule

PROG = "python profiling/torch_compile.py"
COMPILED = "torch-compile"


class CompiledStep(torch_anchor.Step):
    """PyTorch's step of ``module`` (an MLP's ``to_torch()``) on ``x``, ``y`` by ``torch.optim.SGD(foreach=True)``
    at ``measure.ETA``, its cost (forward and backward) compiled by ``torch.compile``, which compiles in the
    first ``warmup`` steps."""

    def __init__(self, module, x, y, warmup=3):
        super().__init__(module, x, y, measure.OPTIMIZERS["sgd"], "foreach")
        self.loss = self.torch.compile(self.loss)
        for _ in range(warmup):
            self.step()


def parser():
    p = grid_parser(PROG, __doc__, sizes=(1024,), layers=(16,), json_help="write the rows to FILE",
                    warmup_help="untimed runs first, after the compiling steps")
    p.add_argument("--k", type=integers(1, "worker stream count"), default=[2], metavar="K[,K...]",
                   help="worker streams (default 2)")
    p.add_argument("--fused", action="store_true", help="our steps fuse the SGD update into (7)")
    return p


def measure_network(args, sizes, batch):
    """The rows of the network ``sizes`` at ``batch``: ours, PyTorch's eager step and its compiled step."""
    import torch

    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = measure.host_batch(sizes, batch, args.dtype)
        calls = {}
        for name, k in [("sequential", 0)] + [("leapfrog", k) for k in args.k]:
            schedule = make_schedule("mlp", name, k, fused=args.fused)
            calls[name, k] = lambda s=schedule: net.sgd_step(x, y, measure.ETA, s)
        eager = torch_anchor.Step(net.to_torch(), x, y, measure.OPTIMIZERS["sgd"], "foreach")
        calls["torch-sgd-foreach", 0] = eager.step
        calls[COMPILED, 0] = CompiledStep(net.to_torch(), x, y).step
        timed = runner.interleaved(backend, calls, args.repeats, args.warmup)
    rows = [{"N": sizes[0], "L": len(sizes), "B": batch, "dtype": args.dtype, "backend": args.backend,
             "schedule": name, "k": k, "fused": args.fused and not name.startswith("torch"),
             "torch": torch.__version__, "step_ms": timing.summary(result["ms"])}
            for (name, k), result in timed.items()]
    compiled = next(r for r in rows if r["schedule"] == COMPILED)["step_ms"]["median"]
    return [{**r, "speedup": compiled / r["step_ms"]["median"]} for r in rows]


def line(r):
    name = r["schedule"] + ("+fused" if r["fused"] else "")
    return (f"{r['N']:>5} {r['L']:>3} {r['B']:>4}  {name:<18} {r['k']:>2}  {spread(r['step_ms']):>26}  "
            f"{ratio(r['speedup']):>10}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = parse(p, argv)
    note = torch_anchor.skipped(False)
    if note:
        p.error(note)
    print("speed-up vs torch-compile: its median over the row's (> 1: faster)")
    print(f"{'N':>5} {'L':>3} {'B':>4}  {'schedule':<18} {'k':>2}  {'step ms median [p20-p80]':>26}  {'speed-up':>10}")
    rows = []
    with refusing_too_large(p):
        for sizes, batch in networks(args):
            network = measure_network(args, sizes, batch)
            print(*map(line, network), sep="\n", flush=True)
            rows += network
            write(args, runner.command_line(PROG, argv), "rows", rows)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, PROG))
