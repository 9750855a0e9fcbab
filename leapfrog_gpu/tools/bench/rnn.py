"""``leapfrog-bench --model rnn``: the recurrent network's backward pass and SGD step under each schedule,
against BPTT and PyTorch's ``nn.RNN``.

For every (N, tau, B), ``RNN([N] * L, output="every")`` is timed under each schedule of ``--schedule`` (by
the names of ``tools.schedules``: bptt, leapfrog, wavefront, timescan, naumov-rnn; bptt, the baseline,
always), in two parts (``--time``):

``step``      the whole SGD step (forward, backward, update), a row ``step NAME`` each, interleaved with
              PyTorch's step (``step torch nn.RNN``) and, with ``--forward-solver``, the step parallel in
              time (``step timescan+NAME``: the forward pass by that solver, ``TimeNewton``, the backward
              by ``TimeScan``); speed-ups over ``step bptt``.
``backward``  the backward pass alone (the chain and the weight gradients, ``time_backward``), a row
              NAME each, and PyTorch's ``loss.backward()``; speed-ups over ``bptt``.

Each row gives the median of ``--repeats`` interleaved repeats (``runner.interleaved``: each row once in turn,
after a warm-up each, timed from enqueue to ``synchronize()``), the speed-up (BPTT's median in the same run
over the row's: > 1 is faster), the dependent rounds (a step's: its forward's plus its backward's) and the
flops of each chain against BPTT's. A schedule whose predicted chain work exceeds ``max_gflop`` and BPTT's is
skipped (BPTT and Leapfrog(k), which run BPTT's chain, never are), as is a step parallel in time whose one
iteration would (``TimeNewton.iteration_flops``); one whose buffers exceed ``memory_limit`` is refused by its
own check; all show as rows. PyTorch's network is the same one (tanh, L-2 layers of ``nn.RNN``, bias_hh held
at zero, a ``Linear`` output at every step, the same parameters and batch; on the GPU cuDNN's), stepped by
``torch.optim.SGD(foreach=True)``. ``--cell gru|lstm``: those cells beside ``nn.GRU``/``nn.LSTM`` (NaumovRNN refuses
them); ``--torch-threads``: PyTorch's step at each number of threads; ``--deer``: DEER's demo problem (``DEER``).
"""

import contextlib
import statistics
import sys

import numpy as np

from ...backends import get_backend, to_host
from ...core.checks import MEMORY_LIMIT
from ...rnn.network import RNN
from ...rnn.scans import TimeScan
from ...rnn.schedules import BPTT, forward_flops, resolve
from ..cli import integer, integers, names as names_of
from ..schedules import SOLVERS, make_schedule, make_solver, names_type, schedule_names
from . import progress, runner, torch_anchor
from .runner import ratio

PROG = "leapfrog-bench --model rnn"
RECORDS = "rows"
TITLE = "speed-up vs bptt: BPTT's median time over the row's (a step: BPTT's step's), same network (> 1: faster)"
"""The line above the table: which way its speed-ups point."""
HEADER = (f"{'N':>4} {'tau':>5} {'B':>3}  {'schedule':<26} {'k':>2} {'median ms':>10} {'speed-up vs bptt':>16} "
          f"{'rounds':>7} {'flops/bptt':>10}")
"""The columns' titles."""
TORCH = "torch nn.RNN"
"""The name of PyTorch's row."""
STEP = "step "
"""What a step's row name starts with: ``step bptt``, ``step timescan+newton``."""
PARTS = ("backward", "step")
"""What ``measure`` can time: the backward pass alone, the whole SGD step."""
ETA = 1e-9
"""The learning rate of the timed steps: small enough that the network they time stays the one they
started from (a step's cost sums over tau outputs: at 1e-3, a few hundred steps at tau = 4096 move the
weights far enough to change what the forward solvers face)."""


def table_head():
    """The lines above the rows: ``TITLE``, ``HEADER`` and a rule."""
    return [TITLE, HEADER, "-" * len(HEADER)]


def schedules(k, memory_limit=MEMORY_LIMIT, names=schedule_names("rnn")):
    """The schedules measured, by name: ``names`` (of ``tools.schedules``), bptt first whether named or not."""
    chosen = dict.fromkeys(["bptt", *names])
    return {name: make_schedule("rnn", name, k=k, memory_limit=memory_limit) for name in chosen}


def sequences(N, tau, B, dtype="float32", seed=0, inputs=None):
    """x (tau, ``inputs`` or N, B) standard normal and targets (tau, N, B) in (0.05, 0.95)."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((tau, inputs or N, B)), rng.uniform(0.05, 0.95, (tau, N, B))
    return x.astype(dtype), y.astype(dtype)


class TorchRNN:
    """``net`` (an ``RNN``) written as ``torch.nn.RNN``, ``GRU`` or ``LSTM`` (its cell's, ``torch_name``) plus a
    ``Linear`` output layer, on the batch ``x``, ``y`` (as ``sequences`` gives them), on ``device``: its backward
    pass and its SGD step (``eta``, as ``RNN.sgd_step`` takes it), timed alike."""

    def __init__(self, torch, net, x, y, device="cpu", eta=ETA):
        L, N, dtype, gru = net.L, net.sizes[1], getattr(torch, net.dtype), net.cell == "gru"
        tanh = {"nonlinearity": "tanh"} if net.cell == "elman" else {}
        self.rnn = getattr(torch.nn, torch_name(net.cell)[9:])(net.sizes[0], N, num_layers=L - 2, dtype=dtype, **tanh)
        self.out = torch.nn.Linear(N, net.sizes[-1], dtype=dtype)
        weights, recurrent, biases = ([to_host(a) for a in arrays]
                                      for arrays in (net.weights, net.recurrent, net.biases))
        b_hn = net.parameters() if gru else None
        with torch.no_grad():
            for i in range(L - 2):
                getattr(self.rnn, f"weight_ih_l{i}").copy_(torch.from_numpy(weights[i]))
                getattr(self.rnn, f"weight_hh_l{i}").copy_(torch.from_numpy(recurrent[i]))
                getattr(self.rnn, f"bias_ih_l{i}").copy_(torch.from_numpy(biases[i]))
                getattr(self.rnn, f"bias_hh_l{i}").zero_()
                if gru:  # b_hn, inside r * (u_n h + b_hn)
                    b = to_host(b_hn[net.hidden[i]]["b_hn"])
                    getattr(self.rnn, f"bias_hh_l{i}")[2 * N:].copy_(torch.from_numpy(b))
            self.out.weight.copy_(torch.from_numpy(weights[-1]))
            self.out.bias.copy_(torch.from_numpy(biases[-1]))
        self.rnn, self.out, self.torch = self.rnn.to(device), self.out.to(device), torch
        self.x = torch.from_numpy(x.transpose(0, 2, 1).copy()).to(device)
        self.y = torch.from_numpy(y.transpose(0, 2, 1).copy()).to(device)
        self.synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.clock = torch_anchor.Clock(torch, device)
        self.parameters = [*self.rnn.parameters(), *self.out.parameters()]
        for i in range(L - 2) if not gru else ():  # held at zero: the RNN has one bias a layer (a GRU two)
            getattr(self.rnn, f"bias_hh_l{i}").requires_grad_(False)
        self.sgd = torch.optim.SGD([p for p in self.parameters if p.requires_grad], lr=eta / x.shape[2],
                                   foreach=True)

    def _loss(self):
        for parameter in self.parameters:
            parameter.grad = None
        states, _ = self.rnn(self.x)
        return 0.5 * ((self.torch.tanh(self.out(states)) - self.y) ** 2).sum()

    def backward_s(self, repeats):
        """Median seconds of ``loss.backward()`` alone, after a forward pass under autograd; one warm-up."""
        times = [self.clock.time(self._loss().backward) for _ in range(repeats + 1)]
        return statistics.median(times[1:]) / 1e3

    def step(self):
        """One SGD step, finished: forward, ``backward()``, ``SGD.step()``."""
        self._loss().backward()
        self.sgd.step()
        self.synchronize()


def torch_name(cell="elman"):
    """PyTorch's row for ``cell``: ``torch nn.RNN``, ``torch nn.GRU``, ``torch nn.LSTM``."""
    return f"torch nn.{ {'elman': 'RNN'}.get(cell, cell.upper())}"


def step_name(name):
    """The row of a step: ``step NAME`` for the schedule ``NAME`` (``sequential``: BPTT's), ``step
    timescan+NAME`` for the forward solver ``NAME`` of ``SOLVERS["rnn"]``."""
    if name == "sequential":
        name = "bptt"
    return f"{STEP}{name}" if name in schedule_names("rnn") or name.startswith("torch") else f"{STEP}timescan+{name}"


def time_backward(net, x, y, schedules, repeats=5):
    """Median seconds of the backward pass alone of ``net`` (an ``RNN``) on the batch under each of
    ``schedules`` (name -> schedule), after one forward pass, timed in turn (``runner.interleaved``). Returns,
    by name, ``{"median_s", **stats}``, or ``{"refused": why}`` for a schedule that refuses this pass (its
    memory check)."""
    net.backprop(x, y, BPTT())
    p = net.plan(x.shape[0], x.shape[2])

    def backward(schedule):
        schedule = resolve(schedule, p)
        schedule.check(net.sizes, p.tau, p.batch, net.dtype)
        return dict(p.run(schedule))

    calls = {name: lambda s=schedule: backward(s) for name, schedule in schedules.items()}
    return _seconds(runner.interleaved(net.backend, calls, repeats))


def _seconds(timed):
    """``runner.interleaved``'s rows with ``median_s`` in place of the times in ms."""
    return {row: {"median_s": float(np.median(r.pop("ms"))) / 1e3, **r} if "ms" in r else r
            for row, r in timed.items()}


def time_steps(net, x, y, schedules, solvers, k, memory_limit, repeats, anchor=None, torch_threads=()):
    """Median seconds of the SGD step under each of ``schedules`` (name -> schedule), of the step parallel
    in time with each of ``solvers`` (names) and of ``anchor``'s (a ``TorchRNN``), interleaved
    (``runner.interleaved``), by row name (``step_name``): ``{"median_s", "rounds", "flops", "sequential_flops"}``
    (of the forward pass and the backward chain; BPTT's flops; Newton's ``iterations``), ``{"median_s"}`` for
    PyTorch's (one row a number of ``torch_threads``, ``step torch nn.GRU 2t``, else one at its threads), or
    ``{"refused": why}``."""
    steps = {step_name(name): (schedule, None) for name, schedule in schedules.items()}
    for name in dict.fromkeys(solvers):
        steps[step_name(name)] = (TimeScan(k=k, memory_limit=memory_limit), make_solver("rnn", name,
                                                                                      memory_limit=memory_limit))

    sequential = {"rounds": len(net.hidden) * x.shape[0], "flops": forward_flops(net.sizes, x.shape[0], x.shape[2])}

    def step(schedule, solver):
        net.sgd_step(x, y, ETA, schedule, **({} if solver is None else {"solver": solver}))
        net.synchronize()
        forward = sequential if solver is None else solver.stats
        return {"rounds": forward["rounds"] + net.stats["rounds"], "flops": forward["flops"] + net.stats["flops"],
                "sequential_flops": sequential["flops"] + net.stats["sequential_flops"],
                **({} if solver is None else {"iterations": solver.stats["iterations"]})}

    def torch_step(threads):
        with torch_anchor.num_threads(threads):
            anchor.step()

    calls = {row: lambda pair=pair: step(*pair) for row, pair in steps.items()}
    for threads in (torch_threads or [None]) if anchor is not None else ():
        calls[step_name(torch_name(net.cell)) + (f" {threads}t" if threads else "")] = lambda t=threads: torch_step(t)
    return _seconds(runner.interleaved(net.backend, calls, repeats))


def measure(N, tau, B, L=4, k=2, repeats=5, dtype="float32", backend="numpy", max_gflop=3.0,
            memory_limit=MEMORY_LIMIT, torch=None, blas_threads=None, names=schedule_names("rnn"), solvers=(),
            parts=PARTS, cell="elman", inputs=None, torch_threads=()):
    """The rows of one (N, tau, B), for each of ``parts`` (``PARTS``): the backward pass under each schedule
    of ``names`` (``schedules``) and PyTorch's (``torch_name``, when ``torch``, the module, is given), then the
    step under each (``time_steps``: ``step NAME``, with ``solvers`` the steps parallel in time too); each a
    dict with ``median_s``, ``speedup`` (BPTT's median over it, ``step bptt``'s for a step) and the
    schedule's ``stats``, or ``refused``. ``cell``: the recurrent layers' (a schedule that refuses it shows so);
    ``inputs``: n_1 (default N); ``torch_threads``: PyTorch's step at each number of threads (``time_steps``)."""
    sizes, chosen, timed_solvers, skipped = [inputs or N] + [N] * (L - 1), {}, [], {}
    itemsize = np.dtype(dtype).itemsize
    measured = schedules(k, memory_limit, names)

    def over(flops, what):
        if flops > max_gflop * 1e9:
            return f"skipped: {what}{flops / 1e9:.1f} GFLOP over the budget of {max_gflop:g}"
        return None

    options = {"blas_threads": blas_threads} if backend == "numpy" and blas_threads else {}
    results = {}
    with get_backend(backend, **options) as device, RNN(sizes, output="every", dtype=dtype, backend=device,
                                                        cell=cell) as net:
        for name, schedule in measured.items():  # BPTT's chain, the baseline's, is never over the budget
            counters = resolve(schedule).counters(sizes, tau, B, itemsize, device.name)
            why = over(counters["flops"], "") if counters["flops"] > counters["sequential_flops"] else None
            if cell != "elman" and name == "naumov-rnn":
                why = f"refused: NaumovRNN's operators are the Elman cell's, not a {cell}'s"
            if why:
                skipped[name] = skipped[step_name(name)] = why
            else:
                chosen[name] = schedule
        for name in dict.fromkeys(solvers):
            why = over(make_solver("rnn", name).iteration_flops(sizes, tau, B, device.name), "an iteration takes ")
            if why:
                skipped[step_name(name)] = why
            else:
                timed_solvers.append(name)
        x, y = sequences(N, tau, B, dtype, inputs=inputs)
        anchor = None
        if torch is not None:  # built before a step moves the parameters
            where = "cuda" if device.name == "cupy" and torch.cuda.is_available() else "cpu"
            anchor = TorchRNN(torch, net, x, y, where)
        if "backward" in parts:
            results.update(time_backward(net, x, y, chosen, repeats=repeats))
            if anchor is not None:
                results[torch_name(cell)] = {"median_s": anchor.backward_s(repeats)}
        if "step" in parts:
            results.update(time_steps(net, x, y, chosen, timed_solvers, k, memory_limit, repeats, anchor,
                                      torch_threads))
    results.update({name: {"refused": why} for name, why in skipped.items()})
    torch_rows = [f"{torch_name(cell)}{f' {t}t' if t else ''}" for t in torch_threads or [None]]
    order = {"backward": [*measured, torch_name(cell)],
             "step": [step_name(name) for name in [*measured, *dict.fromkeys(solvers), *torch_rows]]}
    rows = []
    for part in PARTS:
        base = results.get(order[part][0], {}).get("median_s")
        for name in order[part] if part in parts else ():
            if name not in results:
                continue
            streams = (k if name.startswith(f"{STEP}timescan") else
                       measured[name.removeprefix(STEP)].k if name.removeprefix(STEP) in measured else None)
            row = {"N": N, "tau": tau, "B": B, "L": L, "schedule": name, "k": streams, "repeats": repeats,
                   **({"cell": cell} if cell != "elman" else {}), **({"inputs": inputs} if inputs else {}),
                   **results[name]}
            if "median_s" in row:
                row["speedup"] = base / row["median_s"]
            rows.append(row)
    return rows


def format_row(row):
    """One line of the table under ``HEADER``."""
    k = "-" if row["k"] is None else row["k"]
    name = ("DEER " if row.get("problem") == "deer" else "") + row["schedule"]
    head = f"{row['N']:>4} {row['tau']:>5} {row['B']:>3}  {name:<26} {k:>2}"
    if "median_s" not in row:
        return f"{head} {row['refused'][:80]}"
    flops = f"{row['flops'] / row['sequential_flops']:10.2f}" if "flops" in row else f"{'':>10}"
    newton = f"  {row['iterations']} Newton iterations" if "iterations" in row else ""
    return (f"{head} {row['median_s'] * 1e3:>10.3f} {ratio(row['speedup']):>16} {row.get('rounds', ''):>7} "
            f"{flops}{newton}")


DEER = {"sizes": [8, 32], "tau": 10000, "B": 16, "inputs": 2, "L": 3}
"""DEER's demo problem (Lim et al., 2024): one GRU layer of N units on 2 inputs, 16 sequences of 10,000 steps."""


def grid(args):
    if args.deer:
        return [(N, DEER["tau"], DEER["B"]) for N in DEER["sizes"]]
    return [(N, tau, B) for N in args.sizes for tau in args.tau for B in args.batch]


def work(key):
    """A network's weight in the time left: its layers' work at every time step."""
    N, tau, B = key
    return tau * progress.layer_work(N, B)


def title(key):
    return "N={} tau={} B={}".format(*key)


def about(args):
    return {"layers": args.layers, "k": args.k, "max_gflop": args.max_gflop}


@contextlib.contextmanager
def start(args):
    """PyTorch, at ``--blas-threads`` intra-op threads, unless skipped: None then."""
    torch = None
    if torch_anchor.skipped(args.no_torch) is None:
        import torch

        torch.set_num_threads(args.blas_threads)
    yield torch


def case(args, torch, key):
    deer = {"L": DEER["L"], "inputs": DEER["inputs"], "cell": "gru", "names": ["bptt"], "parts": ("step",),
            "solvers": args.forward_solver or ["newton", "quasi-newton"]} if args.deer else {}
    rows = measure(*key, **{"L": args.layers, "k": args.k, "repeats": args.repeats, "dtype": args.dtype,
                            "backend": args.backend, "max_gflop": args.max_gflop, "torch": torch,
                            "blas_threads": args.blas_threads, "names": args.schedule, "solvers": args.forward_solver,
                            "parts": args.time, "cell": args.cell, "torch_threads": args.torch_threads, **deer})
    return [{**row, "problem": "deer"} for row in rows] if args.deer else rows


def head(args):
    return table_head()


def rows(args, case):
    return [format_row(row) for row in case]


def foot(args, torch, records, about):
    note = torch_anchor.skipped(args.no_torch)
    if note:
        print(note)


def parser():
    """The command line of ``leapfrog-bench --model rnn``."""
    p = runner.parser(PROG, __doc__.splitlines()[0], "rnn")
    p.add_argument("--sizes", type=integers(1, "size"), default=[8, 32, 128], metavar="N[,N...]",
                   help="widths N of RNN([N] * L) (default 8,32,128)")
    p.add_argument("--layers", type=integer(3, "--layers"), default=4, metavar="L", help="depth L (default 4)")
    p.add_argument("--tau", type=integers(1, "sequence length"), default=[16, 64, 256, 1024], metavar="T[,T...]",
                   help="sequence lengths (default 16,64,256,1024)")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[1, 8], metavar="B[,B...]",
                   help="batch sizes (default 1,8)")
    p.add_argument("--schedule", type=names_type("rnn"), default=list(schedule_names("rnn")),
                   metavar="NAME[,NAME...]", help=f"schedules by name, from {', '.join(schedule_names('rnn'))}; "
                                                  "bptt is always measured (default all)")
    solvers = [name for name in SOLVERS["rnn"] if name != "sequential"]  # BPTT's step is always timed
    p.add_argument("--forward-solver", type=names_of(solvers, "RNN forward solver"), default=[],
                   metavar="NAME[,NAME...]",
                   help=f"also time the SGD step parallel in time: the forward pass by each solver named, from "
                        f"{', '.join(solvers)} (TimeNewton), the backward by timescan, against BPTT's step "
                        "(default none)")
    p.add_argument("--time", type=names_of(PARTS, "part"), default=list(PARTS), metavar="PART[,PART...]",
                   help="what to time: backward (the backward pass alone), step (the whole SGD step), or both "
                        "(default backward,step)")
    p.add_argument("--k", type=integer(1, "--k"), default=2, metavar="K", help="worker streams (default 2)")
    p.add_argument("--repeats", type=integer(1, "--repeats"), default=15, metavar="N", help="(default 15)")
    p.add_argument("--max-gflop", type=float, default=3.0, metavar="G",
                   help="skip a schedule whose chain does more (and more than BPTT's), and a step parallel in time "
                        "whose one iteration does (default 3)")
    p.add_argument("--blas-threads", type=integer(1, "--blas-threads"), default=1, metavar="N",
                   help="numpy backend: BLAS threads, and PyTorch's intra-op threads (default 1)")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch's nn.RNN")
    p.add_argument("--cell", choices=("elman", "gru", "lstm"), default="elman", help="recurrent cell (default elman)")
    p.add_argument("--torch-threads", type=integers(1, "threads"), default=[], metavar="T[,T...]",
                   help="PyTorch's step at each number of intra-op threads, a row each (default: --blas-threads)")
    p.add_argument("--deer", action="store_true", help="DEER's demo problem instead of the grid: a GRU [2, N, N], "
                   "N = 8 and 32, B = 16, tau = 10,000; BPTT's step, the steps parallel in time (default "
                   "--forward-solver newton,quasi-newton: Newton's iterations) and PyTorch's")
    return p


def main(argv=None):
    """Run ``leapfrog-bench --model rnn``; return the exit status (0 done, 2 a bad option, 130 Ctrl-C)."""
    return runner.main(sys.modules[__name__], argv)
