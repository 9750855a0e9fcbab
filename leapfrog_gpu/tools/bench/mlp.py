"""leapfrog-bench: the training step and the backward pass under each schedule, against the model.

For every network ``[N] * L`` and batch size B: the SGD step and the backward pass under each schedule,
the forward pass and the per-layer costs f1, f2, f3, timed in turn (``measure``), beside the model's
prediction of a pass's saving, in a table that marks noisy timings (``report``). Anchors measured in the
same run: the best sequential configuration (on the CPU, the fastest BLAS setting), PyTorch when ``torch``
imports (``torch_anchor``), and the memory-traffic floor (``traffic``). ``--graph`` adds each step in graph
mode, ``--plot`` the speed-ups against k (``plot``). What each column means: docs/performance.md.

    leapfrog-bench --backend numpy --sizes 1024 --layers 16 --batch 1,64 --k 1,2,4 --json r.json
    leapfrog-bench --backend cupy --sizes 1024 --layers 32 --batch 32 --k 1,2,4 --graph

This module is the MLP's suite of ``runner``: its options, its grid and what its networks share.
"""

import contextlib
import os
import textwrap

from ...backends import get_backend
from ...core.functions import ACTIVATIONS
from ...core.schedules import Leapfrog, Sequential
from ...mlp import autotune
from ...parallel import comm as parallel
from ..cli import integers, names, pip_install, png_refusal
from . import measure, progress, runner
from .report import table_foot, table_head, table_rows

PROG = "leapfrog-bench"
RECORDS = "records"
GRID = {"N": "sizes", "L": "layers", "B": "batch"}
DEFAULT_SCHEDULES = [Sequential.name, Leapfrog.name]
DURATION = ("The defaults measure 8 networks, from [256] * 8 at B = 1 to [1024] * 16 at B = 64: several minutes "
            "on a 2-core CPU. The time left is printed once the first network is measured; for a quick look, "
            "--sizes 256 --layers 8 --batch 1 --repeats 5 takes seconds.")
"""What ``--help`` says of the time a run takes."""
MODEL_HELP = ("rnn: the recurrent network's backward pass under each of its schedules against BPTT and torch.nn.RNN; "
              "dag: a DagNet's backward schedules against its sequential order; each with options of its own "
              "(leapfrog-bench --model rnn --help, --model dag --help; default mlp)")


def parser():
    description = "\n\n".join([__doc__.split("\n\n")[0], textwrap.fill(DURATION, 79)])
    p = runner.parser(PROG, description, "mlp", sizes=[256, 1024], batch=[1, 64], repeats=20, warmup=2,
                      schedules=DEFAULT_SCHEDULES, model_help=MODEL_HELP)
    p.add_argument("--layers", type=integers(2, "layer count"), default=[8, 16], metavar="L[,L...]",
                   help="layers L, the input layer included, each network [N] * L (default 8,16)")
    p.add_argument("--k", type=integers(1, "worker stream count"), default=[1, 2, 4], metavar="K[,K...]",
                   help="worker streams (default 1,2,4)")
    p.add_argument("--blas-threads", type=integers(1, "BLAS thread count"), default=None, metavar="N[,N...]",
                   help="numpy backend: BLAS threads per host stream, for its matrix products; each count given is "
                        f"measured (default 1 and all cores, {os.cpu_count()} here)")
    p.add_argument("--fused", action="store_true",
                   help="every schedule fuses the SGD update into (7) (the step; the backward pass alone is unfused)")
    p.add_argument("--optimizer", type=names(measure.OPTIMIZERS, "optimizer"), default=["sgd"],
                   metavar="NAME[,NAME...]",
                   help=f"each step's, ours (train_step) and PyTorch's (torch.optim's, foreach=True and fused=True), "
                        f"from {', '.join(measure.OPTIMIZERS)}: each measured in turn, its rows under a heading of "
                        "their own (default sgd)")
    p.add_argument("--one-pass", action="store_true",
                   help="also time each sequential and leapfrog step with the one-pass backward (one_pass=True)")
    p.add_argument("--graph", action="store_true",
                   help="also time each step as a graph (sgd_step(graph=True)), and PyTorch's as a CUDA graph on a GPU")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS), default="sigmoid",
                   help="every layer's, and the PyTorch anchor's (default sigmoid)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="plot the speed-up of a pass against k, measured and predicted, with the run's backend, "
                        "machine and date, and say where it was written (needs matplotlib)")
    return p


def check(p, args):
    """The options that do not go together, and mpiexec, whose data-parallel study is a script's."""
    if args.backend == "cupy" and args.blas_threads is not None:
        p.error("--blas-threads applies to the numpy backend only")
    refusal = args.plot is not None and png_refusal("--plot", args.plot)
    if refusal:
        p.error(refusal)
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error(f"--plot needs matplotlib: {pip_install('plot')}")
    if args.one_pass and args.optimizer != ["sgd"]:
        p.error("--one-pass fuses the plain SGD update: give it --optimizer sgd only (--fused fuses the others)")
    if parallel.world(PROG).size > 1:
        p.error("under mpiexec, what the sums across ranks cost is measured by mpiexec -n P python "
                "profiling/parallel_bench.py (docs/data-parallel.md)")


def work(key):
    """The work of a network, by which the time left weighs it: its layers'."""
    return (key["L"] - 1) * progress.layer_work(key["N"], key["B"])


@contextlib.contextmanager
def start(args):
    """What the networks share: the BLAS settings and the copy bandwidth at each (measured before the first
    network, so that its time is its own)."""
    settings = autotune.blas_settings(args.backend, args.blas_threads)
    with get_backend(args.backend) as backend:
        bandwidth = {threads: measure.copy_bandwidth(backend, threads) for threads in settings}
    yield {"settings": settings, "bandwidth": bandwidth}


def case(args, state, key):
    """One network's records for each ``--optimizer`` (``measure.measure_network``, ``measure.derive``)."""
    return [r for name in args.optimizer for r in measure.derive(measure.measure_network(
        args, [key["N"]] * key["L"], key["B"], state["settings"], state["bandwidth"], name))]


def head(args):
    return table_head(args)


def rows(args, case):
    return [line for name in args.optimizer for line in table_rows([r for r in case if r["optimizer"] == name], args)]


def foot(args, state, records, about):
    """The legend and the plot."""
    print(table_foot(args.graph))
    if args.plot:
        from .plot import plot

        plot(records, args.plot, about)
        print(f"plot: {args.plot} (the speed-up of a pass against k, measured and as the model predicts)")
