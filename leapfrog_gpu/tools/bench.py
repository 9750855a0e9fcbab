"""leapfrog-bench: the training step and the backward pass under each schedule, against the model.

For every network ``[N] * L`` and batch size B it measures, after a warm-up and over ``--repeats``
repeats (median, p20, p80; the configurations take turns, so that load drifting during the run
shifts them alike): the SGD step and the backward pass for every schedule; the forward pass;
and f1, f2, f3, the per-layer costs of equations (2), (5) and (7) on their own, with the ops the
schedules run (``xp.matmul`` for (2) and (5), ``ops.nabla_w`` for (7)). Beside the measured saving of
a pass it prints the model's prediction (1 - 1/k) f3 / f, f = f1 + f2 + f3 (docs/design.md §1).

Anchors measured in the same run: the best sequential configuration (on the CPU, the fastest BLAS
setting, all cores included, on one stream), PyTorch eager autograd when ``torch`` imports (at its
fastest thread count), and the
memory-traffic floor (``traffic.step_bytes`` over a measured copy bandwidth).

Each network's rows are printed as soon as it is measured, with a progress bar on stderr (on a
terminal); ``--quiet`` prints the whole table at the end instead, and nothing on stderr.

``--graph`` adds, beside every configuration, its step in graph mode (``sgd_step(..., graph=True)``,
captured before the timing starts), and on a GPU PyTorch's step captured as a CUDA graph; it then
prints the graph-mode ratios of the project's GPU targets (``graph_verdicts``).

    leapfrog-bench --backend numpy --sizes 1024 --layers 16 --batch 1,64 --k 1,2,4 --json r.json
    leapfrog-bench --backend cupy --sizes 1024 --layers 32 --batch 32 --k 1,2,4 --graph

``--timeline FILE.png`` (one network): once it is measured, each eager configuration runs ``--repeats``
more steps with every launch stamped (``leapfrog_gpu.tools.timeline``), interleaved with as many plain
steps, so that the timeline's own cost is measured in the same run; it prints each stream's busy time
and the share of worker time that overlaps the main stream, and writes the Gantt chart and FILE.json.
A graph step is one launch, so graph rows have no timeline. ``--jsonl FILE`` appends one JSON line
per configuration as soon as its network is measured (after a line with the command and machine), so
that a run killed part-way keeps what it measured.
"""

import argparse
import datetime
import json
import os
import platform
import sys

import numpy as np
from tqdm import tqdm

from .. import autotune, graphs, parallel
from ..backends import get_backend, timing
from ..functions import ACTIVATIONS, DTYPES
from ..naumov import NaumovJacobi, NaumovScan
from ..network import MLP
from ..schedules import Leapfrog, Sequential
from . import bench_parallel, timeline, torch_anchor, traffic
from .cli import Parser, choose_backend, integer, integers, names, pip_install, plural, reals, replaced_atomically

SCHEDULES = {
    "sequential": (Sequential, False),
    "leapfrog": (Leapfrog, True),
    "naumov-scan": (NaumovScan, True),
    "naumov-jacobi": (NaumovJacobi, True),
}
"""Schedules by name: (class, whether it takes k), built as ``cls(k=k, fused=...)`` or ``cls(fused=...)``.
``sequential`` is always measured: it is the baseline."""
DEFAULT_SCHEDULES = ["sequential", "leapfrog"]

ETA = 1e-3  # small enough that the timed steps keep the activations away from saturation


# -- command line -------------------------------------------------------------------------------------


def _k_list(text):
    ks = []
    for part in text.split(","):
        if part == "auto":
            ks.append(part)
            continue
        try:
            k = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--k takes integers >= 1 and 'auto'; got {text!r}") from None
        if k < 1:
            raise argparse.ArgumentTypeError(f"--k takes integers >= 1 and 'auto'; got {text!r}")
        ks.append(k)
    return ks


def parser():
    p = Parser(prog="leapfrog-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--sizes", type=integers(1, "size"), default=[256, 1024], help="widths N (default 256,1024)")
    p.add_argument("--layers", type=integers(2, "layer count"), default=[8, 16], help="layers L (default 8,16)")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[1, 64], help="batch sizes B (default 1,64)")
    p.add_argument("--k", type=_k_list, default=[1, 2, 4], help="worker streams, and 'auto' (default 1,2,4)")
    p.add_argument("--schedule", type=names(SCHEDULES), default=DEFAULT_SCHEDULES,
                   help=f"schedules by name, from {', '.join(SCHEDULES)} (default {','.join(DEFAULT_SCHEDULES)})")
    p.add_argument("--blas-threads", type=integers(1, "BLAS thread count"), default=None,
                   help="numpy backend: BLAS threads per stream to try (default 1 and all cores)")
    p.add_argument("--fused", action="store_true",
                   help="every schedule fuses the SGD update into (7) (the step; the backward pass alone is unfused)")
    p.add_argument("--graph", action="store_true",
                   help="also time each step as a graph (sgd_step(graph=True)), and PyTorch's as a CUDA graph on a GPU")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS), default="sigmoid")
    p.add_argument("--repeats", type=integer(1, "--repeats"), default=20, help="timed repeats (default 20)")
    p.add_argument("--warmup", type=integer(0, "--warmup"), default=2, help="untimed runs first (default 2)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch anchor")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar; the table at the end rather than each network's rows as it is measured")
    p.add_argument("--json", metavar="FILE", help="write the records to FILE")
    p.add_argument("--bucket-mb", type=reals(0, "bucket size"), default=None,
                   help="under mpiexec: bucket sizes in MB to measure (default 0: one sum per layer)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="plot speedup against k, measured and predicted (needs matplotlib)")
    p.add_argument("--timeline", metavar="FILE.png",
                   help="stamp every launch of a few steps per configuration (one network only): busy time per "
                        "stream, worker overlap, a Gantt chart, and FILE.json (needs matplotlib)")
    p.add_argument("--jsonl", metavar="FILE", help="append one JSON line per configuration to FILE as it is measured")
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    try:
        args.backend, _ = choose_backend(args.backend, p.prog)
    except ValueError as error:
        p.error(str(error))
    if args.backend == "cupy" and args.blas_threads is not None:
        p.error("--blas-threads applies to the numpy backend only")
    for option in ("json", "plot", "timeline", "jsonl"):
        path = getattr(args, option)
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            p.error(f"--{option} {path}: the folder {os.path.dirname(os.path.abspath(path))} does not exist")
    if args.timeline is not None and len(args.sizes) * len(args.layers) * len(args.batch) > 1:
        p.error("--timeline charts one network: give one value each to --sizes, --layers and --batch")
    for option in ("plot", "timeline"):
        if getattr(args, option) is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                p.error(f"--{option} needs matplotlib: {pip_install('plot')}")
    comm = parallel.world("leapfrog-bench")
    if comm.size > 1:  # under mpiexec: what the sums across ranks cost a step
        return _main_parallel(p, args, comm, sys.argv[1:] if argv is None else argv)
    if args.bucket_mb is not None:
        p.error("--bucket-mb applies under mpiexec -n P with P > 1 only")
    torch_note = None
    if args.no_torch:
        torch_note = "PyTorch anchor skipped (--no-torch)"
    elif not torch_anchor.available():
        torch_note = f"PyTorch anchor skipped: torch does not import ({pip_install('torch')})"

    about = {"command": "leapfrog-bench " + " ".join(sys.argv[1:] if argv is None else argv),
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "machine": machine(args.backend), "torch_note": torch_note}
    widths = column_widths(args)
    panels, networks = [], []

    def measured(case):  # one network's records, as soon as they are measured
        networks.append(case)
        if not args.quiet:
            print(*table_rows(case, widths), sep="\n", flush=True)
        if args.timeline:
            panels.extend(stamped_steps(args, case))
        if args.jsonl:
            _append_lines(args.jsonl, case)

    if args.jsonl:
        _append_lines(args.jsonl, [about])
    if not args.quiet:
        print(*table_head(widths), sep="\n", flush=True)
    try:
        records = run(args, with_torch=torch_note is None, on_network=measured)
    except KeyboardInterrupt:
        grid = len(args.sizes) * len(args.layers) * len(args.batch)
        kept = f"; their lines are in {args.jsonl}" if args.jsonl and networks else ""
        print(f"{p.prog}: interrupted with {len(networks)} of {plural(grid, 'network')} measured{kept}",
              file=sys.stderr)
        return 130
    print(table(records, widths) if args.quiet else table_foot(args.graph))
    if torch_note:
        print(torch_note)
    print(verdicts(records))
    if args.graph:
        print(graph_verdicts(records))
    if args.json:
        _write_atomically(args.json, json.dumps({**about, "records": records}, indent=1) + "\n")
    if args.timeline:
        timeline.save(args.timeline, panels, about)
        print(timeline_lines(records, args.timeline))
    if args.plot:
        from .bench_plot import plot

        plot(records, args.plot)
    return 0


def _main_parallel(p, args, comm, argv):
    """``leapfrog-bench`` under ``mpiexec -n P`` (``bench_parallel``): every rank measures, rank 0 reports."""
    for option, given in (("--plot", args.plot), ("--fused", args.fused), ("--k auto", "auto" in args.k),
                          ("--graph", args.graph), ("--timeline", args.timeline), ("--jsonl", args.jsonl)):
        if given:
            p.error(f"{option} does not apply under mpiexec")
    specs = [("sequential", 0)] + [(name, k) for name in args.schedule if name != "sequential"
                                   for k in (args.k if SCHEDULES[name][1] else [0])]
    records = bench_parallel.run(args, comm, [(name, k, make_schedule(name, k)) for name, k in specs], ETA)
    if comm.rank == 0:
        print(bench_parallel.table(records))
        report = {"command": f"mpiexec -n {comm.size} leapfrog-bench {' '.join(argv)}",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "machine": machine(args.backend), "records": records}
        if args.json:
            _write_atomically(args.json, json.dumps(report, indent=1) + "\n")
    return 0


# -- measuring ----------------------------------------------------------------------------------------


def run(args, with_torch=True, on_network=None):
    """Every record of the grid, in order: a list of dicts (see ``_measure_case``).

    ``on_network``, if given, is called with each network's records as soon as they are measured. A
    progress bar on stderr (on a terminal, unless ``--quiet``) counts the networks done and the time left.
    """
    settings = autotune.blas_settings(args.backend, args.blas_threads)
    ks = [k for k in args.k if k != "auto"]
    specs = [("sequential", 0)] + [(name, k) for name in args.schedule if name != "sequential"
                                   for k in (ks if SCHEDULES[name][1] else [0])]
    bandwidth = {}
    records = []
    grid = [(n, layers, batch) for n in args.sizes for layers in args.layers for batch in args.batch]
    with tqdm(total=len(grid), desc="measuring", unit="network", leave=False, file=sys.stderr,
              disable=args.quiet or not sys.stderr.isatty()) as bar:
        for n, layers, batch in grid:
            bar.set_postfix_str(f"N={n} L={layers} B={batch}")
            sizes = [n] * layers
            case = _measure_case(args, sizes, batch, settings, specs, bandwidth)
            if with_torch:
                case += _measure_torch(args, sizes, batch, settings)
            records += _derive(case)
            if on_network is not None:
                bar.clear()
                on_network(case)
            bar.update()
    return records


def _measure_case(args, sizes, batch, settings, specs, bandwidth):
    """Records for every schedule at every BLAS setting (and, with ``--k auto``, the configuration
    ``autotune.tune`` picks) on one network.

    The BLAS limit is switched between blocks of timed calls, so that all configurations are measured
    in alternation (``timing.measure_in_blocks``): load that changes during the run shifts them alike,
    and their ratios stay meaningful on a busy machine.
    """
    rng = np.random.default_rng(0)
    reps, warm = args.repeats, args.warmup
    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = _batch(rng, sizes, batch, args.dtype)
        net.backprop(x, y)
        plan = net._plan(batch)
        tuning = None
        if "auto" in args.k:
            ks = [k for k in args.k if k != "auto"] or autotune.KS
            tuning = autotune.tune(net, batch, ks=ks, blas_threads=None if args.backend == "cupy" else settings,
                                   fused=args.fused)
        base = {}
        for threads in settings:
            with autotune.blas_limit(threads):
                if threads not in bandwidth:
                    bandwidth[threads] = timing.copy_bandwidth(backend)["median"]
                f = layer_costs(net, plan, reps, warm)
                forward = timing.summary(timing.measure(backend, lambda: net._forward(plan), reps, warm))
            step_bytes = traffic.step_bytes(sizes, batch, np.dtype(args.dtype).itemsize)
            base[threads] = {
                "backend": args.backend, "device": device_name(backend), "dtype": args.dtype, "N": sizes[0],
                "L": len(sizes), "B": batch, "blas_threads": threads, "repeats": reps, "forward_ms": forward, **f,
                "bytes_per_step": step_bytes, "copy_gbps": bandwidth[threads],
                "floor_ms": step_bytes / (bandwidth[threads] * 1e6)}
        runs = [(name, make_schedule(name, k, args.fused), threads, False, False)
                for threads in settings for name, k in specs]
        if args.graph:  # a graph twin of each configuration that can be captured, captured now
            runs += [(name, schedule, threads, False, True) for name, schedule, threads, _, _ in runs
                     if graphs.refusal(net, plan, schedule) is None]
            for _, schedule, threads, _, graph in runs:
                if graph:
                    with autotune.blas_limit(threads):
                        net.sgd_step(x, y, ETA, schedule, graph=True)
            net.synchronize()
        if tuning is not None:
            name = "leapfrog" if isinstance(tuning.schedule, Leapfrog) else "sequential"
            runs.append((name, tuning.schedule, tuning.blas_threads, True, False))
        eager = [run for run in runs if not run[4]]
        steps = _measure_runs(backend, runs, reps, warm, lambda s, g: net.sgd_step(x, y, ETA, s, graph=g))
        backwards = iter(_measure_runs(backend, eager, reps, warm, lambda s, g: net._backward(plan, s, None)))
        return [{**base[threads], "schedule": name, "k": schedule.k, "fused": schedule.fused, "auto": auto,
                 "graph": graph, "step_ms": timing.summary(step),
                 "backward_ms": None if graph else timing.summary(next(backwards))}
                for (name, schedule, threads, auto, graph), step in zip(runs, steps)]


def _batch(rng, sizes, batch, dtype):
    """A random batch ``(x, y)`` of ``batch`` columns on the host, where training data lives: ``copy_in``
    stages a NumPy batch through pinned memory without blocking, while a CuPy batch's check for NaN
    would wait for the device every step."""
    return rng.random((sizes[0], batch)).astype(dtype), rng.random((sizes[-1], batch)).astype(dtype)


def _measure_runs(backend, runs, repeats, warmup, call):
    """Times of ``call(schedule, graph)`` for every run, the BLAS limit switched between blocks of them."""
    keys = [threads for _, _, threads, _, _ in runs]
    return timing.measure_in_blocks(
        backend, [lambda s=schedule, g=graph: call(s, g) for _, schedule, _, _, graph in runs], keys, repeats, warmup,
        [lambda t=t: autotune.blas_limit(t) for t in keys])


def stamped_steps(args, case):
    """The timeline of each of our eager configurations in ``case`` (one network's records; the ``--k
    auto`` choice is a repeat of one of them, and a graph step is one launch that nothing can stamp
    inside, ``graphs.step``): ``args.repeats`` SGD steps with every launch stamped,
    interleaved with as many plain ones. Adds ``"timeline"`` to each record: the analysis's medians and
    the step's median time plain and stamped. Returns the chart's panels."""
    first = case[0]
    sizes, batch = [first["N"]] * first["L"], first["B"]
    rng = np.random.default_rng(0)
    panels = []
    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = _batch(rng, sizes, batch, args.dtype)
        for r in case:
            if r["schedule"].startswith("torch") or r["auto"] or r["graph"]:
                continue
            schedule = make_schedule(r["schedule"], r["k"], r["fused"])
            stamps = timing.Timeline(backend)

            def stamped(schedule=schedule, stamps=stamps):
                with stamps.step():
                    net.sgd_step(x, y, ETA, schedule)

            with autotune.blas_limit(r["blas_threads"]):
                plain, with_stamps = timing.measure_interleaved(
                    backend, [lambda s=schedule: net.sgd_step(x, y, ETA, s), stamped], args.repeats, args.warmup)
            intervals = [i for i in stamps.intervals() if i.step >= args.warmup]
            analysis = timeline.analyse(intervals)
            r["timeline"] = {**analysis["summary"], "step_ms_plain": timing.summary(plain),
                             "step_ms_stamped": timing.summary(with_stamps),
                             "cost": float(np.median(with_stamps) / np.median(plain))}
            title = (label(r).rstrip("*") + (f" k={r['k']}" if r["k"] else "")
                     + ("" if r["blas_threads"] is None else f", BLAS {r['blas_threads']}"))
            panels.append({"label": title, "bench": r, "intervals": intervals, "analysis": analysis})
    return panels


def make_schedule(name, k, fused=False):
    """The schedule called ``name`` in ``SCHEDULES``, with k worker streams if it takes them."""
    cls, takes_k = SCHEDULES[name]
    return cls(k=k, fused=fused) if takes_k else cls(fused=fused)


def layer_costs(net, plan, repeats, warmup):
    """``{"f1_ms", "f2_ms", "f3_ms"}``: median per-layer time of the matrix product of (2), of (5),
    and of (7), each timed alone as one sweep over the layers on the main stream."""
    backend, xp, ops, w = net.backend, net.backend.xp, net.backend.ops, net._w
    hidden = range(net.L - 1, 1, -1)

    def f1():
        for l in net.layers:
            xp.matmul(w[l], plan.a[l - 1], out=plan.z[l])

    def f2():
        for l in hidden:
            xp.matmul(w[l + 1].T, plan.delta[l + 1], out=plan.delta[l])

    def f3():
        for l in net.layers:
            ops.nabla_w(plan.nabla_w[l], plan.delta[l], plan.a[l - 1])

    costs = {}
    sweeps = (("f1_ms", f1, len(net.layers)), ("f2_ms", f2, len(hidden)), ("f3_ms", f3, len(net.layers)))
    for name, sweep, count in sweeps:
        if count == 0:
            costs[name] = 0.0
            continue
        ms = timing.measure(backend, lambda s=sweep: backend.launch(backend.main, name, s), repeats, warmup)
        costs[name] = float(np.median(ms)) / count
    return costs


def _measure_torch(args, sizes, batch, settings):
    """PyTorch at its fastest thread count of ``settings`` (a short trial of each picks it); with
    ``--graph`` on a GPU, also its step captured as a CUDA graph. A list of records."""
    device = "cuda" if args.backend == "cupy" else "cpu"
    threads = None
    if device == "cpu":
        trials = {t: np.median(torch_anchor.measure(sizes, batch, args.dtype, device, args.activation, t, 3, 1)[0])
                  for t in settings}
        threads = min(trials, key=trials.get)
    modes = [False, True] if args.graph and device == "cuda" else [False]
    import torch

    name = torch.cuda.get_device_name() if device == "cuda" else _cpu_name()
    records = []
    for graph in modes:
        step, backward = torch_anchor.measure(sizes, batch, args.dtype, device, args.activation, threads,
                                              args.repeats, args.warmup, graph=graph)
        records.append({
            "backend": f"torch-{torch.__version__}", "device": name, "dtype": args.dtype, "N": sizes[0],
            "L": len(sizes), "B": batch, "blas_threads": threads, "repeats": args.repeats,
            "schedule": "torch-cuda-graph" if graph else "torch-autograd", "k": 0, "fused": False, "auto": False,
            "graph": graph, "step_ms": timing.summary(step),
            "backward_ms": None if backward is None else timing.summary(backward),
            "forward_ms": None, "f1_ms": None, "f2_ms": None, "f3_ms": None, "bytes_per_step": None,
            "copy_gbps": None, "floor_ms": None})
    return records


def _derive(case):
    """Add the model's prediction and the ratios, each against a baseline measured in this run.

    A graph row's ``step_speedup`` is against the graph-mode sequential step, and its
    ``graph_speedup`` against its own configuration's eager step; it has no backward pass of its own.
    """
    ours = [r for r in case if not r["schedule"].startswith("torch")]
    sequential = {(r["blas_threads"], r["graph"]): r for r in ours if r["schedule"] == "sequential" and not r["auto"]}
    eager = {(r["schedule"], r["k"], r["blas_threads"]): r for r in ours if not r["graph"] and not r["auto"]}
    best_step = min((r for (_, graph), r in sequential.items() if not graph), key=lambda r: r["step_ms"]["median"])
    best_backward = min((r for (_, graph), r in sequential.items() if not graph),
                        key=lambda r: r["backward_ms"]["median"])
    for r in case:
        r["step_speedup_vs_best_sequential"] = best_step["step_ms"]["median"] / r["step_ms"]["median"]
        r["backward_speedup_vs_best_sequential"] = (None if r["backward_ms"] is None else
                                                    best_backward["backward_ms"]["median"] / r["backward_ms"]["median"])
        r["best_sequential"] = r is best_step
        if r["schedule"].startswith("torch"):
            r.update(predicted_saving=None, measured_saving=None, backward_speedup=None, step_speedup=None,
                     graph_speedup=None)
            continue
        seq = sequential[r["blas_threads"], r["graph"]]
        f = r["f1_ms"] + r["f2_ms"] + r["f3_ms"]
        k = r["k"]
        model = {"leapfrog": (1 - 1 / k) * r["f3_ms"] / f if k else 0.0, "sequential": 0.0}
        r["predicted_saving"] = model.get(r["schedule"])  # the seed's model speaks of these two only
        r["step_speedup"] = seq["step_ms"]["median"] / r["step_ms"]["median"]
        r["graph_speedup"] = None
        if r["graph"]:
            twin = eager[r["schedule"], r["k"], r["blas_threads"]]
            r["graph_speedup"] = twin["step_ms"]["median"] / r["step_ms"]["median"]
            r.update(measured_saving=None, backward_speedup=None)
            continue
        seq_backward = seq["backward_ms"]["median"]
        r["measured_saving"] = (seq_backward - r["backward_ms"]["median"]) / (r["forward_ms"]["median"] + seq_backward)
        r["backward_speedup"] = seq_backward / r["backward_ms"]["median"]
        if r["auto"]:  # slower beyond noise: its step's p20-p80 range lies wholly above the best sequential one's
            r["auto_within_noise"] = r["step_ms"]["p20"] <= best_step["step_ms"]["p80"]
    return case


# -- reporting ----------------------------------------------------------------------------------------

COLUMNS = ("N", "L", "B", "dtype", "schedule", "k", "blas", "step ms [p20-p80]", "backward ms [p20-p80]",
           "fwd ms", "f1", "f2", "f3", "pred", "meas", "bwd x seq", "bwd x best", "step x best", "floor ms")
CELL = {"N": 5, "B": 4, "dtype": 7, "step ms [p20-p80]": 22, "backward ms [p20-p80]": 22, "f1": 6, "f2": 6,
        "f3": 6, "pred": 6, "meas": 7}
"""Width of a column's cells where it exceeds its title's (``84.400 [84.000-84.800]``, ``-12.5%``): each
network's rows are printed before the next network is measured, so the widths are set before any
number is known; a wider number pushes the rest of its row to the right."""
GRAPH_COLUMN = "graph x eager"
"""The column ``--graph`` adds: a graph step's speedup over the same eager step."""
TABLE_FOOT = ("* best sequential configuration (fastest step); pred/meas: saving of a pass (forward + backward), "
              "the model's (1 - 1/k) f3/f and measured; f1-f3 in ms per layer")


def column_widths(args):
    """The width of each column: its title's, a number's (``CELL``), or the longest schedule name
    this run can print; with ``--graph``, one more column (graph x eager)."""
    names = [*SCHEDULES, "torch-autograd", "torch-cuda-graph"] + [f"auto->{name}" for name in ("sequential", "leapfrog")]
    schedule = max(len(name) for name in names) + len("+fused") * args.fused + len("[graph]") * args.graph + len("*")
    columns = COLUMNS + (GRAPH_COLUMN,) * args.graph
    return [max(len(title), CELL.get(title, 0), schedule if title == "schedule" else 0) for title in columns]


def table_head(widths):
    """The titles and a rule under them."""
    titles = "  ".join(title.rjust(width) for title, width in zip(COLUMNS + (GRAPH_COLUMN,), widths))
    return [titles, "-" * len(titles)]


def table_rows(records, widths):
    """One line per record."""
    return ["  ".join(str(cell).rjust(width) for cell, width in zip(_cells(r), widths)) for r in records]


def table(records, widths):
    """The whole table as text: titles, one row per record, and the legend."""
    return "\n".join([*table_head(widths), *table_rows(records, widths), table_foot(len(widths) > len(COLUMNS))])


def table_foot(graph):
    """The legend under the table, with the graph columns' when ``graph``."""
    return TABLE_FOOT + ("; [graph]: the step as a graph; graph x eager: its speedup over the same eager step"
                         if graph else "")


def _cells(r):
    threads = "-" if r["blas_threads"] is None else r["blas_threads"]
    return (
        r["N"], r["L"], r["B"], r["dtype"], label(r), r["k"], threads,
        _spread(r["step_ms"]), _spread(r["backward_ms"]), _num(r["forward_ms"] and r["forward_ms"]["median"]),
        _num(r["f1_ms"]), _num(r["f2_ms"]), _num(r["f3_ms"]), _pct(r["predicted_saving"]),
        _pct(r["measured_saving"]), _ratio(r["backward_speedup"]), _ratio(r["backward_speedup_vs_best_sequential"]),
        _ratio(r["step_speedup_vs_best_sequential"]), _num(r["floor_ms"]), _ratio(r.get("graph_speedup")),
    )


def label(r):
    """A record's schedule as the table shows it: leapfrog+fused[graph], auto->sequential, sequential*."""
    name = ("auto->" if r["auto"] else "") + r["schedule"] + ("+fused" if r["fused"] else "")
    name += "[graph]" if r.get("graph") and not r["schedule"].startswith("torch") else ""
    return name + ("*" if r["best_sequential"] else "")


GRAPH_TARGETS = {"torch-autograd": 3.0, "torch-cuda-graph": 1.5, "sequential": 1.3}
"""The GPU targets of graph mode (H200, N = 1024, L = 32, B = 32, float32): the fastest graph-mode
Leapfrog step at least this many times faster than each of these steps; and within 2x of the floor."""
FLOOR_TARGET = 2.0


def graph_verdicts(records):
    """Per network, the fastest graph-mode leapfrog step against the targets' baselines and the floor."""
    lines = ["graph mode against its GPU targets (set for an H200 at N=1024 L=32 B=32 float32):"]
    for key in dict.fromkeys((r["N"], r["L"], r["B"]) for r in records):
        case = [r for r in records if (r["N"], r["L"], r["B"]) == key]
        ours = [r for r in case if r["graph"] and r["schedule"] == "leapfrog"]
        if not ours:
            continue
        best = min(ours, key=lambda r: r["step_ms"]["median"])
        ms = best["step_ms"]["median"]
        parts = [f"{label(best)} k={best['k']} at N={key[0]} L={key[1]} B={key[2]}: step {ms:.4g} ms"]
        for name, target in GRAPH_TARGETS.items():
            base = [r for r in case if r["schedule"] == name and (r["graph"] or name.startswith("torch"))]
            if base:
                ratio = min(r["step_ms"]["median"] for r in base) / ms
                parts.append(f"{ratio:.2f}x vs {name}{'[graph]' if name == 'sequential' else ''} "
                             f"(target >= {target}x{'' if ratio >= target else ', NOT MET'})")
            else:
                parts.append(f"{name}: not measured")
        floor = best["floor_ms"]
        parts.append(f"{ms / floor:.2f}x the bytes floor {floor:.4g} ms (target <= {FLOOR_TARGET}x"
                     f"{'' if ms / floor <= FLOOR_TARGET else ', NOT MET'})")
        lines.append("; ".join(parts))
    return "\n".join(lines) if len(lines) > 1 else ""


def timeline_lines(records, path):
    """What ``--timeline`` prints: one line per stamped configuration, beside its backward speedup."""
    lines = [f"timeline ({path} and its .json): medians over the stamped steps; 'stamped' is the step with every "
             "launch stamped, timed in alternation with plain steps"]
    for r in records:
        if "timeline" not in r:
            continue
        t = r["timeline"]
        lines.append(f"{label(r).rstrip('*')} k={r['k']} blas={r['blas_threads'] or '-'}: plain "
                     f"{t['step_ms_plain']['median']:.3f} ms, stamped x{t['cost']:.3f}; {timeline.describe(t)}; "
                     f"backward x{r['backward_speedup']:.2f} of sequential")
    return "\n".join(lines)


def verdicts(records):
    """One line per ``--k auto`` record: is it within noise of the best sequential configuration?"""
    lines = []
    for r in records:
        if r.get("auto"):
            verdict = "within noise of" if r["auto_within_noise"] else "SLOWER than"
            lines.append(f"auto chose {r['schedule']} k={r['k']} blas={r['blas_threads']} at N={r['N']} L={r['L']} "
                         f"B={r['B']}: step {r['step_speedup_vs_best_sequential']:.2f}x as fast as the best "
                         f"sequential, {verdict} it")
    return "\n".join(lines)


def _spread(stats):
    return "-" if stats is None else f"{stats['median']:.3f} [{stats['p20']:.3f}-{stats['p80']:.3f}]"


def _num(value):
    return "-" if value is None else f"{value:.3f}"


def _pct(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def _ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def machine(backend):
    return {"device": device_name(get_backend(backend)) if backend == "cupy" else _cpu_name(),
            "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "numpy": np.__version__}


def device_name(backend):
    return backend.device_name if backend.name == "cupy" else _cpu_name()


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _append_lines(path, records):
    """Append each record to ``path`` as one JSON line, flushed at once."""
    with open(path, "a", encoding="utf-8") as out:
        out.writelines(json.dumps(r) + "\n" for r in records)


def _write_atomically(path, text):
    """Write ``text`` to ``path`` through a temporary file, so a failed run leaves no half a file."""
    with replaced_atomically(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(text)


if __name__ == "__main__":
    sys.exit(main())
