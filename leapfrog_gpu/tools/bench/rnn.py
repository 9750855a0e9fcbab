"""``leapfrog-bench --model rnn``: the recurrent network's backward pass under each schedule, against BPTT
and PyTorch's ``nn.RNN``.

For every (N, tau, B), ``RNN([N] * L, output="every")`` runs its backward pass (the chain and the weight
gradients) under each schedule of ``--schedule`` (by the names of ``tools.schedules``: bptt, leapfrog,
wavefront, timescan, naumov-rnn; bptt, the baseline, always), interleaved, after a warm-up
(``RNN.time_backward``); a row gives the median, the speed-up over BPTT (BPTT's median in the same run over
the row's: > 1 is faster), the dependent rounds and the flops of each chain against BPTT's. A schedule
whose predicted chain work exceeds ``max_gflop`` is skipped, one whose buffers exceed ``memory_limit`` is
refused by its own check; both show as rows. PyTorch's ``nn.RNN`` (tanh, L-2 layers, bias_hh held at zero,
a Linear output at every step; on the GPU cuDNN's) is timed on the same batch and parameters:
``loss.backward()`` alone, after a forward pass under autograd.

``--forward-solver`` (names of ``tools.schedules.SOLVERS["rnn"]``: newton, quasi-newton) adds the SGD step
parallel in time: the forward pass by that solver (``TimeNewton``), the backward by ``TimeScan``, the update;
a row ``step timescan+NAME`` each, against a row ``step bptt``, BPTT's whole step, timed alike (interleaved,
enqueue to ``synchronize()``, after a warm-up); their speed-up is BPTT's step over the row's and their rounds
the forward's plus the backward's. A step that would take more memory than ``memory_limit`` is refused.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ...backends import get_backend
from ...core.functions import DTYPES
from ...rnn.network import RNN
from ...core.checks import MEMORY_LIMIT
from ...rnn.scans import TimeScan
from ...rnn.schedules import BPTT, resolve
from ..cli import Parser, integer, integers
from ..schedules import SOLVERS, make_schedule, make_solver, names_type, schedule_names
from . import torch_anchor
from .report import ratio

TITLE = "speed-up vs bptt: BPTT's median time over the row's (a step: BPTT's step's), same network (> 1: faster)"
"""The line above the table: which way its speed-ups point."""
HEADER = (f"{'N':>4} {'tau':>5} {'B':>3}  {'schedule':<26} {'k':>2} {'median ms':>10} {'speed-up vs bptt':>16} "
          f"{'rounds':>7} {'flops/bptt':>10}")
"""The columns' titles."""
TORCH = "torch nn.RNN"
"""The name of PyTorch's row."""
STEP = "step "
"""What a step's row name starts with: ``step bptt``, ``step timescan+newton``."""
ETA = 1e-3
"""The learning rate of the timed steps."""


def table_head():
    """The lines above the rows: ``TITLE``, ``HEADER`` and a rule."""
    return [TITLE, HEADER, "-" * len(HEADER)]


def schedules(k, memory_limit=MEMORY_LIMIT, names=schedule_names("rnn")):
    """The schedules measured, by name: ``names`` (of ``tools.schedules``), bptt first whether named or not."""
    chosen = dict.fromkeys(["bptt", *names])
    return {name: make_schedule("rnn", name, k=k, memory_limit=memory_limit) for name in chosen}


def sequences(N, tau, B, dtype="float32", seed=0):
    """x (tau, N, B) standard normal and targets at every step in (0.05, 0.95)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((tau, N, B)).astype(dtype), rng.uniform(0.05, 0.95, (tau, N, B)).astype(dtype))


def torch_backward(torch, net, x, y, repeats, device="cpu"):
    """Median seconds of ``loss.backward()`` of ``net`` written as torch.nn.RNN plus a Linear output layer."""
    L, N = net.L, net.sizes[0]
    rnn = torch.nn.RNN(N, N, num_layers=L - 2, nonlinearity="tanh", dtype=getattr(torch, net.dtype))
    out = torch.nn.Linear(N, net.sizes[-1], dtype=getattr(torch, net.dtype))
    weights, recurrent, biases = (_host(a) for a in (net.weights, net.recurrent, net.biases))
    with torch.no_grad():
        for i in range(L - 2):
            getattr(rnn, f"weight_ih_l{i}").copy_(torch.from_numpy(weights[i]))
            getattr(rnn, f"weight_hh_l{i}").copy_(torch.from_numpy(recurrent[i]))
            getattr(rnn, f"bias_ih_l{i}").copy_(torch.from_numpy(biases[i]))
            getattr(rnn, f"bias_hh_l{i}").zero_()
        out.weight.copy_(torch.from_numpy(weights[-1]))
        out.bias.copy_(torch.from_numpy(biases[-1]))
    rnn, out = rnn.to(device), out.to(device)
    xt = torch.from_numpy(x.transpose(0, 2, 1).copy()).to(device)
    yt = torch.from_numpy(y.transpose(0, 2, 1).copy()).to(device)
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(repeats + 1):  # the first is the warm-up
        for parameter in (*rnn.parameters(), *out.parameters()):
            parameter.grad = None
        states, _ = rnn(xt)
        loss = 0.5 * ((torch.tanh(out(states)) - yt) ** 2).sum()
        synchronize()
        start = time.perf_counter()
        loss.backward()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def step_name(solver):
    """The row of the step whose forward pass is ``solver`` (a name of ``SOLVERS["rnn"]``): ``step bptt`` for
    ``sequential``, else ``step timescan+NAME``."""
    return f"{STEP}bptt" if solver == "sequential" else f"{STEP}timescan+{solver}"


def time_steps(net, x, y, solvers, k, memory_limit, repeats):
    """Median seconds of BPTT's SGD step and of the step parallel in time with each of ``solvers`` (names),
    interleaved after a warm-up each, by row name (``step_name``): ``{"median_s", "rounds"}``, or
    ``{"refused": why}`` for a step that refuses this batch (a memory check)."""
    steps = {}
    for name in dict.fromkeys(["sequential", *solvers]):
        solver = make_solver("rnn", name, memory_limit=memory_limit)
        steps[step_name(name)] = (BPTT() if solver is None else TimeScan(k=k, memory_limit=memory_limit), solver)
    results, times = {}, {}

    def step(row):
        schedule, solver = steps[row]
        net.sgd_step(x, y, ETA, schedule, **({} if solver is None else {"solver": solver}))
        net.synchronize()
        forward = solver.stats["rounds"] if solver is not None else len(net.hidden) * x.shape[0]
        return forward + net.stats["rounds"]

    for row in steps:
        try:
            step(row)
        except ValueError as error:
            results[row] = {"refused": str(error)}
        else:
            times[row] = []
    for _ in range(repeats):
        for row in times:
            start = time.perf_counter()
            rounds = step(row)
            times[row].append(time.perf_counter() - start)
            results[row] = {"rounds": rounds}
    for row, measured in times.items():
        results[row]["median_s"] = statistics.median(measured)
    return results


def _host(arrays):
    return [a.get() if hasattr(a, "get") else a for a in arrays]


def measure(N, tau, B, L=4, k=2, repeats=5, dtype="float32", backend="numpy", max_gflop=3.0,
            memory_limit=MEMORY_LIMIT, torch=None, blas_threads=None, names=schedule_names("rnn"), solvers=()):
    """The rows of one (N, tau, B): a dict per schedule of ``names`` (``schedules``; ``TORCH`` when
    ``torch``, the module, is given; and with ``solvers``, the steps of ``time_steps``) with ``median_s``,
    ``speedup`` (BPTT's median over it, BPTT's step's for a step) and the schedule's ``stats``, or
    ``refused``."""
    sizes, chosen, refused = [N] * L, {}, {}
    itemsize = np.dtype(dtype).itemsize
    measured = schedules(k, memory_limit, names)
    for name, schedule in measured.items():
        flops = resolve(schedule).counters(sizes, tau, B, itemsize)["flops"]
        if flops > max_gflop * 1e9:
            refused[name] = f"skipped: {flops / 1e9:.1f} GFLOP over the budget of {max_gflop:g}"
        else:
            chosen[name] = schedule
    options = {"blas_threads": blas_threads} if backend == "numpy" and blas_threads else {}
    with get_backend(backend, **options) as device, RNN(sizes, output="every", dtype=dtype, backend=device) as net:
        x, y = sequences(N, tau, B, dtype)
        results = net.time_backward(x, y, chosen, repeats=repeats)
        if torch is not None:
            where = "cuda" if device.name == "cupy" and torch.cuda.is_available() else "cpu"
            results[TORCH] = {"median_s": torch_backward(torch, net, x, y, repeats, where)}
        if solvers:
            results.update(time_steps(net, x, y, solvers, k, memory_limit, repeats))
    results.update({name: {"refused": why} for name, why in refused.items()})
    base, rows = results["bptt"]["median_s"], []
    for name in [*measured, TORCH, *(step_name(solver) for solver in dict.fromkeys(["sequential", *solvers]))]:
        if name in results:
            streams = measured[name].k if name in measured else (k if name.startswith(f"{STEP}timescan") else None)
            row = {"N": N, "tau": tau, "B": B, "L": L, "schedule": name, "k": streams, "repeats": repeats,
                   **results[name]}
            if "median_s" in row:
                row["speedup"] = (results[step_name("sequential")]["median_s"] if name.startswith(STEP)
                                  else base) / row["median_s"]
            rows.append(row)
    return rows


def format_row(row):
    """One line of the table under ``HEADER``."""
    k = "-" if row["k"] is None else row["k"]
    head = f"{row['N']:>4} {row['tau']:>5} {row['B']:>3}  {row['schedule']:<26} {k:>2}"
    if "median_s" not in row:
        return f"{head} {row['refused'][:80]}"
    flops = f"{row['flops'] / row['sequential_flops']:10.2f}" if "flops" in row else f"{'':>10}"
    return f"{head} {row['median_s'] * 1e3:>10.3f} {ratio(row['speedup']):>16} {row.get('rounds', ''):>7} {flops}"


def run(grid, report=print, **options):
    """Measure every (N, tau, B) of ``grid`` (an iterable of triples), printing each row as it comes."""
    for line in table_head():
        report(line)
    rows = []
    for N, tau, B in grid:
        for row in measure(N, tau, B, **options):
            report(format_row(row))
            rows.append(row)
    return rows


def solver_names(text):
    """An argparse type: a comma-separated list of the RNN's forward solvers by name, ``sequential`` left out
    (BPTT's step, always timed with them)."""
    names = text.split(",")
    valid = [name for name in SOLVERS["rnn"] if name != "sequential"]
    for name in names:
        if name not in valid:
            raise argparse.ArgumentTypeError(f"unknown RNN forward solver {name!r}; choose from {', '.join(valid)}")
    return names


def parser():
    """The command line of ``leapfrog-bench --model rnn``."""
    p = Parser(prog="leapfrog-bench --model rnn", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("rnn",), default="rnn", help=argparse.SUPPRESS)
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto",
                   help="auto: cupy when a CUDA device is usable, else numpy (default auto)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
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
    solvers = [name for name in SOLVERS["rnn"] if name != "sequential"]
    p.add_argument("--forward-solver", type=solver_names, default=[], metavar="NAME[,NAME...]",
                   help=f"also time the SGD step parallel in time: the forward pass by each solver named, from "
                        f"{', '.join(solvers)} (TimeNewton), the backward by timescan, against BPTT's step "
                        "(default none)")
    p.add_argument("--k", type=integer(1, "--k"), default=2, metavar="K", help="worker streams (default 2)")
    p.add_argument("--repeats", type=integer(1, "--repeats"), default=15, metavar="N", help="(default 15)")
    p.add_argument("--max-gflop", type=float, default=3.0, metavar="G",
                   help="skip a schedule whose chain does more (default 3)")
    p.add_argument("--blas-threads", type=integer(1, "--blas-threads"), default=1, metavar="N",
                   help="numpy backend: BLAS threads, and PyTorch's intra-op threads (default 1)")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch's nn.RNN")
    p.add_argument("--json", metavar="FILE", help="write the rows to FILE")
    return p


def main(argv=None):
    """Run ``leapfrog-bench --model rnn``; return the exit status (0 done, 2 a bad option, 130 Ctrl-C)."""
    args = parser().parse_args(argv)
    torch, torch_note = None, torch_anchor.skipped(args.no_torch)
    if torch_note is None:
        import torch

        torch.set_num_threads(args.blas_threads)
    grid = [(N, tau, B) for N in args.sizes for tau in args.tau for B in args.batch]
    try:
        rows = run(grid, L=args.layers, k=args.k, repeats=args.repeats, dtype=args.dtype, backend=args.backend,
                   max_gflop=args.max_gflop, torch=torch, blas_threads=args.blas_threads, names=args.schedule,
                   solvers=args.forward_solver)
    except KeyboardInterrupt:
        print("leapfrog-bench --model rnn: interrupted (SIGINT)", file=sys.stderr)
        return 130
    except RuntimeError as error:  # backend 'cupy' without a usable GPU
        print(f"leapfrog-bench --model rnn: error: {error}", file=sys.stderr)
        return 2
    if torch_note:
        print(torch_note)
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": sys.argv if argv is None else argv, "rows": rows}, indent=1))
    return 0
