"""``leapfrog-bench --model rnn``: the recurrent network's backward pass and training step under each
schedule, against BPTT and PyTorch's ``nn.RNN``.

For every (N, tau, B), ``RNN([N] * L, output="every")``: its backward pass alone under each schedule (a row
NAME each, beside PyTorch's ``loss.backward()``) and its step by each ``--optimizer`` (``step NAME``, beside
PyTorch's, ``torch_step``, by torch.optim's ``foreach=True`` and ``fused=True``; with ``--forward-solver`` the
step parallel in time, ``step timescan+NAME``), each optimizer's rows in one alternation
(``runner.interleaved``). What the rows mean, and the tables measured: docs/rnn.md."""

import functools

import numpy as np

from ...backends import get_backend
from ...core.checks import MEMORY_LIMIT
from ...rnn.cells import GATED
from ...rnn.network import RNN
from ...rnn.scans import NaumovRNN, TimeScan
from ...rnn.schedules import BPTT, forward_flops, resolve
from ...rnn.torch_io import train_b_hn_alone
from ..cli import blas_threads, integer, integers, names as names_of, number, refuse_blas_threads_on_cupy
from ..schedules import SOLVERS, make_solver, schedule_names
from . import progress, runner, torch_anchor
from .runner import OPTIMIZERS, at_rate, ratio

PROG = "leapfrog-bench --model rnn"
RECORDS = "rows"
GRID = {"N": "sizes", "tau": "tau", "B": "batch"}
ABOUT = ("layers", "k", "max_gflop", "blas_threads")
BASELINE = schedule_names("rnn")[0]
TITLE = "speed-up vs bptt: BPTT's median time over the row's (a step: BPTT's step's), same network (> 1: faster)"
"""The line above the table: which way its speed-ups point."""
COLUMNS = (("N", 4), ("tau", 5), ("B", 3), ("schedule", -27), ("k", 2), ("median ms", 10), ("speed-up vs bptt", 16),
           ("rounds", 7), ("flops/bptt", 10))
"""The columns' titles and widths (< 0: left-aligned)."""
TITLES, WIDTHS = zip(*COLUMNS)
HEADER = runner.line(TITLES, WIDTHS, " ")
HEAD = (TITLE, HEADER, "-" * len(HEADER))
"""The lines above the rows: ``TITLE``, the columns' titles and a rule."""
PARTS = ("backward", "step")
"""What ``measure`` can time: the backward pass alone, the whole training step."""
ETA = 1e-9
"""The timed steps' learning rate: the network stays the one drawn (at 1e-3, a few hundred steps at tau = 4096,
whose cost sums over tau outputs, change what the forward solvers face)."""


def sequences(N, tau, B, dtype="float32", seed=0, inputs=None):
    """x (tau, ``inputs`` or N, B) standard normal and targets (tau, N, B) in (0.05, 0.95)."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((tau, inputs or N, B)), rng.uniform(0.05, 0.95, (tau, N, B))
    return x.astype(dtype), y.astype(dtype)


def measure(N, tau, B, L=4, k=2, repeats=5, dtype="float32", backend="numpy", max_gflop=3.0,
            memory_limit=MEMORY_LIMIT, torch=None, blas_threads=None, names=schedule_names("rnn"), solvers=(),
            parts=PARTS, cell="elman", inputs=None, torch_threads=(), warmup=1, optimizer="sgd",
            torch_updates=("foreach",)):
    """The rows of one (N, tau, B), for each of ``parts``: the backward pass under each schedule of ``names``
    (bptt first, always) and PyTorch's (``torch nn.RNN``, with ``torch`` true), then the step under each (``step
    NAME``), the steps parallel in time by ``solvers`` (``step timescan+NAME``) and PyTorch's, a row for each of
    ``torch_updates`` (torch.optim's ``foreach=True``: ``step torch nn.GRU``; ``fused=True``: ``step torch nn.GRU
    fused``) and each count of ``torch_threads`` (``... 2t``), every step by ``OPTIMIZERS[optimizer]`` at the rate
    ``ETA`` (its name a step row's ``optimizer``). Each a dict with ``median_s``, ``speedup`` (over BPTT's, or ``step
    bptt``'s), the counters of its forward pass (a step's) and its chain (``rounds``, ``flops``,
    ``sequential_flops``; Newton's ``iterations``), or ``refused``. ``inputs``: n_1 (default N)."""
    schedules = runner.schedules("rnn", names, k=k, memory_limit=memory_limit)
    solvers = {name: make_solver("rnn", name, memory_limit=memory_limit) for name in solvers}
    torch_row = f"torch nn.{ {'elman': 'RNN'}.get(cell, cell.upper())}"
    options = {"blas_threads": blas_threads} if backend == "numpy" and blas_threads else {}
    with get_backend(backend, **options) as device, RNN([inputs or N] + [N] * (L - 1), output="every", dtype=dtype,
                                                        backend=device, cell=cell) as net:
        x, y, rule = *sequences(N, tau, B, dtype, inputs=inputs), at_rate(optimizer, ETA)
        anchors = {update: torch_step(net, x, y, rule, update)  # built before a step moves the parameters
                   for update in torch_updates} if torch else {}
        net.backprop(x, y, BPTT())
        plan, rows = net.plan(tau, B), []  # (name, k, a call or why it is not timed)
        skipped = {name: _skipped(net, tau, B, s, max_gflop) for name, s in schedules.items()}
        if "backward" in parts:
            rows += [(name, s.k, skipped[name] or _backward(net, plan, s)) for name, s in schedules.items()]
            rows += [(torch_row, None, None)] * bool(anchors)  # timed on its own, below
        if "step" in parts:
            rows += [(f"step {name}", s.k, skipped[name] or _step(net, x, y, rule, s)) for name, s in schedules.items()]
            for name, solver in solvers.items():
                why = _over(solver.iteration_flops(net.sizes, tau, B, device.name, cell=cell), max_gflop,
                            "an iteration takes ")
                rows.append((f"step {TimeScan.name}+{name}", k,
                             why or _step(net, x, y, rule, TimeScan(k=k, memory_limit=memory_limit), solver)))
            rows += [(f"step {torch_row}" + " fused" * (update == "fused") + (f" {t}t" if t else ""), None,
                      functools.partial(anchor.step, t or blas_threads))
                     for update, anchor in anchors.items() for t in torch_threads or [None]]
        timed = runner.interleaved(device, {name: call for name, _, call in rows if call}, repeats, warmup)
        if anchors and "backward" in parts:
            timed[torch_row] = {"ms": next(iter(anchors.values())).backward_ms(repeats, blas_threads)}
    rows = [{"N": N, "tau": tau, "B": B, "L": L, "schedule": name, "k": streams, "repeats": repeats,
             "cell": cell, **({"inputs": inputs} if inputs else {}),
             **({"optimizer": optimizer} if name.startswith("step ") else {}),
             **({"median_s": float(np.median(timed[name].pop("ms"))) / 1e3} if "ms" in timed[name] else {}),
             **timed[name]} for name, streams, _ in rows]
    return runner.speedups(rows, group=lambda r: r["schedule"].startswith("step "),  # BPTT's pass, or its step
                           baseline=lambda r: r["schedule"].removeprefix("step ") == BASELINE,
                           median=lambda r: r.get("median_s"))


def torch_step(net, x, y, rule, update="foreach"):
    """PyTorch's step of ``net`` as its users write the network: one ``torch.nn.RNN``, ``GRU`` or ``LSTM`` of
    ``num_layers = L - 2`` (one call for the whole stack, as oneDNN and cuDNN run it) holding the parameters of
    ``net.to_torch()``'s layers, then its output layer; on ``x``, ``y``, by torch.optim's optimizer of ``rule``
    (one of ours) with ``update=True`` (``"foreach"`` or ``"fused"``); ``bias_hh`` held at zero (one bias a layer,
    as the network's) but a GRU's n rows, b_hn (``leapfrog_gpu.rnn.torch_io``), so that the step is
    ``train_step``'s."""
    import torch

    layers = net.to_torch()
    first, output = layers.layer2, getattr(layers, f"layer{net.L}")
    options = {"nonlinearity": first.nonlinearity} if net.cell == "elman" else {}
    recurrent = type(first)(net.sizes[0], net.sizes[1], num_layers=net.L - 2, dtype=first.weight_ih_l0.dtype,
                            device=first.weight_ih_l0.device, **options)
    for k in range(net.L - 2):
        for name, p in getattr(layers, f"layer{k + 2}").named_parameters():
            stacked = getattr(recurrent, name.replace("_l0", f"_l{k}"))
            with torch.no_grad():
                stacked.copy_(p)
            stacked.requires_grad_(p.requires_grad)  # bias_hh held at zero, as to_torch() holds it
        if net.cell == "gru":
            train_b_hn_alone(getattr(recurrent, f"bias_hh_l{k}"))

    class Stacked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.recurrent, self.output = recurrent, output

        def forward(self, x):
            return self.output(self.recurrent(x)[0])

    return torch_anchor.Step(Stacked(), x, y, rule, update)


def _skipped(net, tau, B, schedule, max_gflop):
    """Why ``schedule`` is not timed on ``net`` (None: it is): it refuses the cell, or its chain would do more
    than ``max_gflop`` GFLOP and more than BPTT's (the baseline's, never skipped)."""
    if net.cell != "elman" and schedule.name == NaumovRNN.name:
        return f"refused: NaumovRNN's operators are the Elman cell's, not {GATED[net.cell]}'s"
    counters = resolve(schedule).counters(net.sizes, tau, B, np.dtype(net.dtype).itemsize, net.backend.name,
                                          cell=net.cell)
    return _over(counters["flops"], max_gflop) if counters["flops"] > counters["sequential_flops"] else None


def _over(flops, max_gflop, what=""):
    """Why a row that does ``flops`` is skipped, if that is more than ``max_gflop`` GFLOP (None: it is not)."""
    return f"skipped: {what}{flops / 1e9:.1f} GFLOP over the budget of {max_gflop:g}" if flops > max_gflop * 1e9 \
        else None


def _backward(net, plan, schedule):
    """The backward pass alone of ``net`` under ``schedule``, after the forward pass ``plan`` holds: a call that
    returns its counters (a schedule that refuses the pass raises ``ValueError``: its memory check)."""
    def call():
        resolved = resolve(schedule, plan)
        resolved.check(net.sizes, plan.tau, plan.batch, net.dtype, cell=net.cell)
        return dict(plan.run(resolved))

    return call


def _step(net, x, y, rule, schedule, solver=None):
    """The step of ``net`` by the optimizer ``rule`` under ``schedule``, its forward pass by ``solver`` (None: step
    by step): a call that returns the counters of its forward pass and its chain together."""
    sequential = {"rounds": len(net.hidden) * x.shape[0], "flops": forward_flops(net.sizes, x.shape[0], x.shape[2],
                                                                                cell=net.cell)}

    def call():
        net.train_step(x, y, rule, schedule, **({} if solver is None else {"solver": solver}))
        net.synchronize()
        forward = sequential if solver is None else solver.stats
        return {"rounds": forward["rounds"] + net.stats["rounds"], "flops": forward["flops"] + net.stats["flops"],
                "sequential_flops": sequential["flops"] + net.stats["sequential_flops"],
                **({} if solver is None else {"iterations": solver.stats["iterations"]})}

    return call


def format_row(row):
    """One line of the table under its titles."""
    cells = [row["N"], row["tau"], row["B"], row["schedule"], "-" if row["k"] is None else row["k"]]
    if "median_s" not in row:
        return runner.line(cells + [row["refused"][:80]], WIDTHS, " ")
    flops = f"{row['flops'] / row['sequential_flops']:.2f}" if "flops" in row else ""
    newton = f"  {row['iterations']} Newton iterations" if "iterations" in row else ""
    return runner.line(cells + [f"{row['median_s'] * 1e3:.3f}", ratio(row["speedup"]), row.get("rounds", ""), flops],
                       WIDTHS, " ") + newton


def work(key):
    """A network's weight in the time left: its layers' work at every time step."""
    return key["tau"] * progress.layer_work(key["N"], key["B"])


def case(args, state, key):
    """One network's rows, PyTorch's among them unless ``torch_anchor.skipped``: its steps by each ``--optimizer``
    in turn, its backward passes (which no optimizer changes) with the first."""
    records = []
    for i, optimizer in enumerate(args.optimizer):
        parts = [part for part in args.time if part == "step" or not i]
        if parts:
            records += measure(*key.values(), L=args.layers, k=args.k, repeats=args.repeats, dtype=args.dtype,
                               backend=args.backend, max_gflop=args.max_gflop,
                               torch=torch_anchor.skipped(args.no_torch) is None, blas_threads=args.blas_threads,
                               names=args.schedule, solvers=args.forward_solver, parts=parts, cell=args.cell,
                               torch_threads=args.torch_threads, warmup=args.warmup, optimizer=optimizer,
                               torch_updates=torch_anchor.UPDATES[1:])
    return records


def rows(args, case):
    """One network's lines: a row per record, the steps by an optimizer other than plain SGD under a line that
    names it."""
    lines, named = [], "sgd"
    for row in case:
        if row.get("optimizer", named) != named:
            named = row["optimizer"]
            lines.append(f"steps by {named}: {at_rate(named, ETA)!r}")
        lines.append(format_row(row))
    return lines


def check(p, args):
    """Refuse what times nothing: an optimizer, a forward solver or PyTorch's threads with ``--time backward``
    alone, PyTorch's threads with ``--no-torch``, BLAS threads on the cupy backend (as the MLP's suite does); then
    ``--blas-threads`` by default 1."""
    if "step" not in args.time and (args.optimizer != ["sgd"] or args.forward_solver or args.torch_threads):
        given = "--optimizer" if args.optimizer != ["sgd"] else "--forward-solver" if args.forward_solver \
            else "--torch-threads"
        p.error(f"{given} applies to the steps, and --time backward times the backward pass alone: add step to --time")
    if args.no_torch and args.torch_threads:
        p.error("--torch-threads applies to PyTorch's steps, which --no-torch skips: leave one of them out")
    refuse_blas_threads_on_cupy(p, args)
    args.blas_threads = args.blas_threads or 1


def parser():
    """The command line of ``leapfrog-bench --model rnn``."""
    description = __doc__.split("\n\n")[0].replace("``", "")  # plain text, as --help shows it
    p = runner.parser(PROG, description, "rnn", sizes=[8, 32, 128], batch=[1, 8], repeats=15, warmup=1)
    p.add_argument("--layers", type=integer(3), default=4, metavar="L", help="depth L (default 4)")
    p.add_argument("--tau", type=integers(1, "sequence length"), default=[16, 64, 256, 1024], metavar="T[,T...]",
                   help="sequence lengths (default 16,64,256,1024)")
    solvers = [name for name in SOLVERS["rnn"] if name != "sequential"]  # BPTT's step is always timed
    p.add_argument("--forward-solver", type=names_of(solvers, "RNN forward solver"), default=[],
                   metavar="NAME[,NAME...]",
                   help=f"also time the step parallel in time: the forward pass by each solver named, from "
                        f"{', '.join(solvers)} (TimeNewton), the backward by timescan, against BPTT's step "
                        "(default none)")
    p.add_argument("--time", type=names_of(PARTS, "part"), default=list(PARTS), metavar="PART[,PART...]",
                   help="what to time: backward (the backward pass alone), step (the whole training step), or both "
                        "(default backward,step)")
    p.add_argument("--optimizer", type=names_of(OPTIMIZERS, "optimizer"), default=["sgd"], metavar="NAME[,NAME...]",
                   help=f"each step's, ours (train_step) and PyTorch's (torch.optim's, foreach=True and fused=True), "
                        f"from "
                        f"{', '.join(OPTIMIZERS)} at lr {ETA:g}: each measured in turn, its steps under a line that "
                        "names it but plain SGD's (default sgd)")
    p.add_argument("--k", type=integer(1), default=2, metavar="K", help="worker streams (default 2)")
    p.add_argument("--max-gflop", type=number(0, strict=True), default=3.0, metavar="G",
                   help="skip a schedule whose chain does more (and more than BPTT's), and a step parallel in time "
                        "whose one iteration does (default 3)")
    p.add_argument("--blas-threads", type=blas_threads, default=None, metavar="N",
                   help="numpy backend: BLAS threads, and PyTorch's intra-op threads (default 1)")
    p.add_argument("--cell", choices=("elman", "gru", "lstm"), default="elman", help="recurrent cell (default elman)")
    p.add_argument("--torch-threads", type=integers(1, "thread count"), default=[], metavar="T[,T...]",
                   help="PyTorch's step at each number of intra-op threads, a row each (default: --blas-threads)")
    return p
