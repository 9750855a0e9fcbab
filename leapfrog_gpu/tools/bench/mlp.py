"""leapfrog-bench: the training step and the backward pass under each schedule, against the model.

For every network ``[N] * L`` and batch size B: the SGD step and the backward pass under each schedule, the
forward pass and f1, f2, f3 (``measure``), beside the model's saving of a pass and the anchors: the best
sequential configuration, PyTorch (``torch_anchor``), the bytes floor (``traffic``). This module is the MLP's
suite of ``runner``: its options, what its networks share, its table (within 100 columns; the Markdown
tables' cells are ``profiling/markdown_cells.py``'s). What each column means: docs/performance.md.

    leapfrog-bench --backend numpy --sizes 1024 --layers 16 --batch 1,64 --k 1,2,4 --json r.json
    leapfrog-bench --backend cupy --sizes 1024 --layers 32 --batch 32 --k 1,2,4 --graph
"""

import contextlib
import textwrap

from ...backends import get_backend, host_blas, timing
from ...core.functions import ACTIVATIONS
from ...core.schedules import Leapfrog, Sequential
from ...mlp import autotune
from ..cli import (blas_thread_counts, fitted, integers, names, path, pip_install, png_refusal,
                   refuse_blas_threads_on_cupy, writing)
from . import measure, progress, runner, torch_anchor
from .runner import NOISY, line, median, ratio

PROG = "leapfrog-bench"
RECORDS = "records"
GRID = {"N": "sizes", "L": "layers", "B": "batch"}
DEFAULT_SCHEDULES = [Sequential.name, Leapfrog.name]
DURATION = ("The defaults measure 8 networks, from [256] * 8 at B = 1 to [1024] * 16 at B = 64: several minutes "
            "on a 2-core CPU. The time left is printed once the first network is measured; for a quick look, "
            "--sizes 256 --layers 8 --batch 1 --repeats 5 takes seconds.")
"""What ``--help`` says of the time a run takes."""
MODEL_HELP = ("rnn: the recurrent network's backward pass and SGD step under each of its schedules against BPTT "
              "and PyTorch's, with options of its own (leapfrog-bench --model rnn --help; default mlp); a DagNet's "
              "are measured by python profiling/dag_bench.py")
COLUMNS = (("", "k", 2), ("", "blas", 4), ("step", "ms", 7), ("bwd", "ms", 7), ("pred", "saving", 7),
           ("meas", "saving", 7), ("bwd", "vs seq", 6), ("step", "vs best", 7))
"""Each column after the schedule's: its title on two lines, and its width, set before any number is known
(``1234.5!``, ``-112.5%``, k up to 99). The last two, and ``LAST``, are speed-ups, under ``SPEEDUP``."""
LAST = {False: ("step", "vs floor", 8), True: ("graph", "vs eager", 8)}
"""The last column: the step's speed-up over its bytes floor, or with ``--graph`` over its eager twin."""
SPEEDUP = "speed-up (> 1: faster)"
"""The title above the speed-up columns, ending where they end."""
LEGEND = ("* best sequential configuration (the fastest eager step of plain sequential, one-pass and graph rows "
          f"aside); ! noisy: p80 - p20 over {NOISY:.0%} of the median; "
          "pred/meas saving: of a pass (forward + backward), the model's (1 - 1/k) f3/f and measured; "
          "speed-up vs X: X's median time over the row's (> 1: faster); bwd vs seq: the backward pass vs "
          "sequential's at the same BLAS setting; step vs best: the step vs the best sequential step; f1-f3 in "
          "ms per layer; ")
"""The legend under the table, then the last column's (``LAST_LEGEND``)."""
LAST_LEGEND = {False: "step vs floor: the step vs its own bytes floor (1: at the floor)",
               True: "[graph]: the step as a graph; graph vs eager: the step vs the same eager step"}


def parser():
    description = "\n\n".join([__doc__.split("\n\n")[0], textwrap.fill(DURATION, 79)])
    p = runner.parser(PROG, description, "mlp", sizes=[256, 1024], batch=[1, 64], repeats=20, warmup=2,
                      schedules=DEFAULT_SCHEDULES, model_help=MODEL_HELP)
    p.add_argument("--layers", type=integers(2, "layer count"), default=[8, 16], metavar="L[,L...]",
                   help="layers L, the input layer included, each network [N] * L (default 8,16)")
    p.add_argument("--k", type=integers(1, "worker stream count"), default=[1, 2, 4], metavar="K[,K...]",
                   help="worker streams (default 1,2,4)")
    p.add_argument("--blas-threads", type=blas_thread_counts, default=None, metavar="N[,N...]",
                   help="numpy backend: BLAS threads for the matrix products, shared among the streams of a "
                        f"leapfrog backward pass; each count given is measured (default 1 and all cores, "
                        f"{host_blas.all_threads()} here)")
    p.add_argument("--fused", action="store_true",
                   help="every schedule fuses the SGD update into (7) (the step; the backward pass alone is unfused)")
    p.add_argument("--optimizer", type=names(runner.OPTIMIZERS, "optimizer"), default=["sgd"],
                   metavar="NAME[,NAME...]",
                   help=f"each step's, ours (train_step) and PyTorch's (torch.optim's, foreach=True and fused=True), "
                        f"from {', '.join(runner.OPTIMIZERS)}: each measured in turn, its rows under a heading of "
                        "their own (default sgd)")
    p.add_argument("--one-pass", action="store_true",
                   help="also time each sequential and leapfrog step with the one-pass backward (one_pass=True)")
    p.add_argument("--graph", action="store_true",
                   help="also time each step as a graph (sgd_step(graph=True)), and PyTorch's as a CUDA graph on a "
                        "GPU; a step the capture refuses (Naumov's schedules on CuPy) has no graph row, and a line "
                        "under the table says so")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS), default="sigmoid",
                   help="every layer's, and the PyTorch anchor's (default sigmoid)")
    p.add_argument("--plot", type=path, metavar="FILE.png",
                   help="plot the speed-up of a pass against k, measured and predicted, with the run's backend, "
                        "machine and date, and say where it was written (needs matplotlib)")
    return p


def check(p, args):
    """The options that do not go together."""
    refuse_blas_threads_on_cupy(p, args)
    if args.plot is not None:
        refusal = png_refusal("--plot", args.plot)
        if refusal:
            p.error(refusal)
        if Leapfrog.name not in args.schedule:
            p.error(f"--plot draws the {Leapfrog.name} schedule's speed-up against k: add {Leapfrog.name} to "
                    "--schedule, or leave --plot out")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            p.error(f"--plot needs matplotlib: {pip_install('plot')}")


def work(key):
    """The work of a network, by which the time left weighs it: its layers'."""
    return (key["L"] - 1) * progress.layer_work(key["N"], key["B"])


@contextlib.contextmanager
def start(args):
    """What the networks share: the BLAS settings and a copy's GB/s at each, at which a step's bytes floor is
    taken (measured before the first network, so that its time is its own)."""
    settings, bandwidth = autotune.blas_settings(args.backend, args.blas_threads), {}
    with get_backend(args.backend) as backend:
        for threads in settings:
            with autotune.blas_limit(threads):
                bandwidth[threads] = timing.copy_bandwidth(backend)["median"]
    yield {"settings": settings, "bandwidth": bandwidth}


def case(args, state, key):
    """One network's records for each ``--optimizer`` (``measure.measure_network``, ``measure.derive``)."""
    return [r for name in args.optimizer for r in measure.derive(measure.measure_network(
        args, [key["N"]] * key["L"], key["B"], state["settings"], state["bandwidth"], name))]


def head(args):
    """The titles, on three lines: ``SPEEDUP`` above the speed-up columns, then each column's own."""
    titles, widths = columns(args)
    return [SPEEDUP.rjust(sum(map(abs, widths)) + 2 * (len(widths) - 1))] + [line(t, widths) for t in titles]


def rows(args, case):
    """One network's lines: for each ``--optimizer`` its heading (``network_lines``), then a row per record."""
    widths, lines = columns(args)[1], []
    for name in args.optimizer:
        part = [r for r in case if r["optimizer"] == name]
        lines += network_lines(part) + [line(_cells(r, args.graph), widths) for r in part]
    return lines


def foot(args, state, records, about):
    """The legend and the plot."""
    print(fitted(LEGEND + LAST_LEGEND[args.graph]))
    if args.graph and (eager := uncaptured(records)):
        print(fitted(f"[graph]: no graph row for {', '.join(eager)}: the capture refuses "
                     f"{'its step' if len(eager) == 1 else 'their steps'} on {args.backend} "
                     "(leapfrog_gpu.core.capture.refusal)"))
    if args.plot:
        from .plot import plot

        with writing(f"--plot {args.plot}"):
            plot(records, args.plot, about)
        print(f"plot: {args.plot} (the speed-up of a pass against k, measured and as the model predicts)")


def uncaptured(records):
    """The labels of our eager rows in ``records`` without a graph twin (``--graph``): steps the capture refuses."""
    def twin(r):
        return tuple(r.get(key) for key in ("N", "L", "B", "optimizer", "schedule", "k", "fused", "one_pass",
                                            "blas_threads"))

    ours = [r for r in records if not r["schedule"].startswith("torch")]
    graphs = {twin(r) for r in ours if r["graph"]}  # a twin refused as it ran is a row that says so
    return list(dict.fromkeys(label(r, best="") for r in ours
                              if not r["graph"] and "refused" not in r and twin(r) not in graphs))


def columns(args):
    """``(titles, widths)`` of the table: the titles' two lines, each a tuple; the schedule's column as wide as
    the longest label of a row this run can print (``labels``), left-aligned."""
    *titles, widths = zip(("", "schedule", -max(map(len, labels(args)))), *COLUMNS, LAST[args.graph])
    return titles, widths


def labels(args):
    """The schedules of the rows a run can print, as the table shows them (``label``), before any is measured: each
    configuration (the baseline's always), with ``--one-pass`` the one-pass ones, with ``--graph`` each as a graph
    too, and where PyTorch is timed ``torch-NAME-foreach``, the longest of its rows."""
    ours = [{"schedule": name, "fused": args.fused} for name, _ in measure.configurations(args)]
    ours += [{"schedule": name, "one_pass": True} for name, _ in measure.one_pass_configurations(args)]
    ours += [{**r, "graph": True} for r in ours if args.graph]
    ours.append({"schedule": measure.BASELINE, "fused": args.fused, "best_sequential": True})
    torch = [] if torch_anchor.skipped(args.no_torch) else [f"torch-{name}-foreach" for name in args.optimizer]
    return [label(r) for r in ours] + torch


def label(r, graph="[graph]", best="*"):
    """A record's schedule as a table shows it: leapfrog+fused[graph], sequential*."""
    update = "+one-pass" if r.get("one_pass") else "+fused" if r.get("fused") else ""
    name = r["schedule"] + update
    name += graph if r.get("graph") and not r["schedule"].startswith("torch") else ""
    return name + (best if r.get("best_sequential") else "")


def percent(value):
    """``value`` as a percentage; a loss beyond -999 % (another job slowed the run) as ``<-999%``, in 7 columns."""
    if value is None:
        return "-"
    return "<-999%" if 100 * value < -999 else f"{100 * value:.1f}%"


def number(value):
    return "-" if value is None else f"{value:.3f}"


def network_lines(case):
    """The heading of one network's rows: its shape, then per BLAS setting, indented, what its rows share."""
    first = case[0]
    parts = [f"N={first['N']} L={first['L']} B={first['B']} {first['dtype']}"
             + ("" if first.get("optimizer", "sgd") == "sgd" else f", optimizer {first['optimizer']}")]
    for r in {r["blas_threads"]: r for r in case if r.get("f1_ms") is not None}.values():
        floors = {s.get("update", "plain"): s["floor_ms"] for s in case
                  if s.get("f1_ms") is not None and s["blas_threads"] == r["blas_threads"]}
        floor = r.get("forward_floor_ms")
        parts.append(("" if r["blas_threads"] is None else f"BLAS {r['blas_threads']}: ")
                     + f"forward {median(r['forward_ms'])} ms"
                     + (f" (speed-up vs its floor {ratio(floor / r['forward_ms']['median'])})" if floor else "")
                     + f", per layer f1 {number(r['f1_ms'])} f2 {number(r['f2_ms'])} f3 {number(r['f3_ms'])} ms, bytes "
                     + "floor " + ", ".join(f"{update} {number(floor)}" for update, floor in floors.items()) + " ms")
    return [parts[0]] + [fitted(f"  {part}") for part in parts[1:]]


def _cells(r, graph):
    head = [label(r), r["k"], "-" if r["blas_threads"] is None else r["blas_threads"]]
    if "refused" in r:
        return head + [f"refused: {r['refused']}"]
    return head + [median(r["step_ms"]), median(r["backward_ms"]), percent(r["predicted_saving"]),
                   percent(r["measured_saving"]), ratio(r["backward_speedup"]),
                   ratio(r["step_speedup_vs_best_sequential"]),
                   ratio(r.get("graph_speedup") if graph else r.get("floor_speedup"))]
