"""leapfrog-bench: the training step and the backward pass under each schedule, against the model.

For every network ``[N] * L`` and batch size B it measures (``bench_measure``), after a warm-up and
over ``--repeats`` repeats (median, p20, p80; the configurations take turns, so that load drifting
during the run shifts them alike): the SGD step and the backward pass for every schedule; the forward
pass; and f1, f2, f3, the per-layer costs of equations (2), (5) and (7) on their own. Beside the
measured saving of a pass it prints the model's prediction (1 - 1/k) f3 / f, f = f1 + f2 + f3
(docs/design.md §1), in a table of at most 100 columns that marks noisy timings (``bench_report``).

Anchors measured in the same run: the best sequential configuration (on the CPU, the fastest BLAS
setting, all cores included, on one stream), PyTorch eager autograd when ``torch`` imports (at each
thread count, as ours), and the memory-traffic floor (``traffic.step_bytes`` over a measured copy
bandwidth).

Each network's rows are printed as soon as it is measured, with a progress bar on stderr (on a
terminal); ``--quiet`` prints the whole table at the end instead, and nothing on stderr.

``--graph`` adds, beside every configuration, its step in graph mode (``sgd_step(..., graph=True)``,
captured before the timing starts), and on a GPU PyTorch's step captured as a CUDA graph; it then
prints the graph-mode ratios of the project's GPU targets (``bench_report.graph_verdicts``).

    leapfrog-bench --backend numpy --sizes 1024 --layers 16 --batch 1,64 --k 1,2,4 --json r.json
    leapfrog-bench --backend cupy --sizes 1024 --layers 32 --batch 32 --k 1,2,4 --graph

``--timeline FILE.png`` (one network): once it is measured, each eager configuration runs ``--repeats``
more steps with every launch stamped (``leapfrog_gpu.tools.timeline``), interleaved with as many plain
steps, so that the timeline's own cost is measured in the same run; it prints each stream's busy time
and the share of worker time that overlaps the main stream, and writes the Gantt chart and FILE.json.
A graph step is one launch, so graph rows have no timeline. ``--jsonl FILE`` appends one JSON line
per configuration as soon as its network is measured (after a line with the command and machine), so
that a run killed part-way keeps what it measured. Under ``mpiexec -n P`` it measures what the sums
across ranks cost a step instead (``bench_parallel``). ``--count-calls`` (CuPy backend) adds a table of
what one eager step of each configuration calls of CuPy (``call_count``), and its records to ``--json``.

``--model rnn`` and ``--model dag`` hand the command line to ``bench_rnn`` (the recurrent network's
schedules) and ``bench_dag`` (a ``GraphNet``'s forward solvers and backward schedules), each with
options of its own. This module is the command line; exit status 0 done, 2 a bad option, 130 stopped by Ctrl-C.
"""

import argparse
import datetime
import json
import os
import sys
import textwrap

from ...parallel import comm as parallel
from ...core.functions import ACTIVATIONS, DTYPES
from . import dag as bench_dag, parallel as bench_parallel, rnn as bench_rnn, call_count, torch_anchor
from .. import timeline
from ..schedules import make_schedule, names_type, schedule_names, takes_k
from .measure import ETA, machine, run, stamped_steps
from .report import column_widths, floor_verdicts, graph_verdicts, table, table_foot, table_head, table_rows, timeline_lines, verdicts
from ..cli import Parser, fitted, integer, integers, pip_install, plural, png_refusal, reals
from ..cli import parse_args_on_a_backend, replaced_atomically

DEFAULT_SCHEDULES = ["sequential", "leapfrog"]


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


EXIT_STATUSES = [
    (0, "done"),
    (2, "a bad option (one line on stderr)"),
    (130, "stopped by Ctrl-C; the networks measured so far are printed, and in --jsonl if given"),
]
"""What the command's exit status means, as ``--help`` lists it."""


DURATION = ("The defaults measure 8 networks, from [256] * 8 at B = 1 to [1024] * 16 at B = 64: several minutes "
            "on a 2-core CPU. The time left is printed once the first network is measured; for a quick look, "
            "--sizes 256 --layers 8 --batch 1 --repeats 5 takes seconds.")
"""What ``--help`` says of the time a run takes."""


def parser():
    description = "\n\n".join([__doc__.split("\n\n")[0], textwrap.fill(DURATION, 79)])
    p = Parser(prog="leapfrog-bench", description=description, exit_statuses=EXIT_STATUSES)
    p.add_argument("--model", choices=("mlp", "rnn", "dag"), default="mlp",
                   help="rnn: the recurrent network's backward pass under each of its schedules against BPTT and "
                        "torch.nn.RNN; dag: a GraphNet's forward solvers and backward schedules against its "
                        "sequential order; each with options of its own (leapfrog-bench --model rnn --help, "
                        "--model dag --help; default mlp)")
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto",
                   help="auto: cupy when a CUDA device is usable, else numpy (default auto)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    p.add_argument("--sizes", type=integers(1, "size"), default=[256, 1024], metavar="N[,N...]",
                   help="widths N, each network [N] * L (default 256,1024)")
    p.add_argument("--layers", type=integers(2, "layer count"), default=[8, 16], metavar="L[,L...]",
                   help="layers L, the input layer included (default 8,16)")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[1, 64], metavar="B[,B...]",
                   help="batch sizes B (default 1,64)")
    p.add_argument("--k", type=_k_list, default=[1, 2, 4], metavar="K[,K...]",
                   help="worker streams, and 'auto': the configuration autotune picks (default 1,2,4)")
    p.add_argument("--schedule", type=names_type("mlp"), default=DEFAULT_SCHEDULES, metavar="NAME[,NAME...]",
                   help=f"schedules by name, from {', '.join(schedule_names('mlp'))}; sequential is always measured "
                        f"(default {','.join(DEFAULT_SCHEDULES)})")
    p.add_argument("--blas-threads", type=integers(1, "BLAS thread count"), default=None, metavar="N[,N...]",
                   help="numpy backend: BLAS threads per host stream, for its matrix products; each count given is "
                        f"measured (default 1 and all cores, {os.cpu_count()} here)")
    p.add_argument("--fused", action="store_true",
                   help="every schedule fuses the SGD update into (7) (the step; the backward pass alone is unfused)")
    p.add_argument("--one-pass", action="store_true",
                   help="also time each sequential and leapfrog step with the one-pass backward (one_pass=True)")
    p.add_argument("--torch-compile", action="store_true",
                   help="also time PyTorch's step through torch.compile (its first steps compile: slow)")
    p.add_argument("--graph", action="store_true",
                   help="also time each step as a graph (sgd_step(graph=True)), and PyTorch's as a CUDA graph on a GPU")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS), default="sigmoid",
                   help="every layer's, and the PyTorch anchor's (default sigmoid)")
    p.add_argument("--repeats", type=integer(1, "--repeats"), default=20, metavar="N",
                   help="timed repeats of each configuration (default 20)")
    p.add_argument("--warmup", type=integer(0, "--warmup"), default=2, metavar="N",
                   help="untimed runs first (default 2)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch anchor")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar; the table at the end rather than each network's rows as it is measured")
    p.add_argument("--json", metavar="FILE", help="write the records to FILE")
    p.add_argument("--bucket-mb", type=reals(0, "bucket size"), default=None, metavar="MB[,MB...]",
                   help="under mpiexec: bucket sizes in MB to measure (default 0: one sum per layer)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="plot the speed-up of a pass against k, measured and predicted, with the run's backend, "
                        "machine and date, and say where it was written (needs matplotlib)")
    p.add_argument("--timeline", metavar="FILE.png",
                   help="stamp every launch of a few steps per configuration (one network only): busy time per "
                        "stream, worker overlap, a Gantt chart, and FILE.json (needs matplotlib)")
    p.add_argument("--jsonl", metavar="FILE", help="append one JSON line per configuration to FILE as it is measured")
    p.add_argument("--count-calls", action="store_true",
                   help="cupy backend: also count what each eager step calls of CuPy (matmuls, kernel launches, "
                        "event records and waits, stream enters), in a table of its own")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    model = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    model.add_argument("--model", default="mlp")
    other = {"rnn": bench_rnn, "dag": bench_dag}.get(model.parse_known_args(argv)[0].model)
    if other is not None:  # a command of its own, with its own options
        return other.main(argv)
    p = parser()
    args = parse_args_on_a_backend(p, argv)
    if args.backend == "cupy" and args.blas_threads is not None:
        p.error("--blas-threads applies to the numpy backend only")
    if args.count_calls and args.backend != "cupy":
        p.error("--count-calls counts calls into CuPy: it needs --backend cupy")
    for option in ("json", "plot", "timeline", "jsonl"):
        path = getattr(args, option)
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            p.error(f"--{option} {path}: the folder {os.path.dirname(os.path.abspath(path))} does not exist")
    for option, beside in (("plot", ""), ("timeline", " (its intervals go beside it, in .json)")):
        refusal = getattr(args, option) is not None and png_refusal(f"--{option}", getattr(args, option), beside)
        if refusal:
            p.error(refusal)
    if args.timeline is not None and len(args.sizes) * len(args.layers) * len(args.batch) > 1:
        p.error("--timeline charts one network: give one value each to --sizes, --layers and --batch")
    for option in ("plot", "timeline"):
        if getattr(args, option) is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                p.error(f"--{option} needs matplotlib: {pip_install('plot')}")
    comm = parallel.world("leapfrog-bench")
    comm.use_own_device(args.backend)
    if comm.size > 1:  # under mpiexec: what the sums across ranks cost a step
        return _main_parallel(p, args, comm, sys.argv[1:] if argv is None else argv)
    if args.bucket_mb is not None:
        p.error("--bucket-mb applies under mpiexec -n P with P > 1 only")
    torch_note = torch_anchor.skipped(args.no_torch)

    about = {"command": "leapfrog-bench " + " ".join(sys.argv[1:] if argv is None else argv),
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "machine": machine(args.backend), "torch_note": torch_note}
    widths = column_widths(args, args.schedule)
    panels, networks = [], []

    def measured(case):  # one network's records, as soon as they are measured
        networks.append(case)
        if not args.quiet:
            print(*table_rows(case, widths, args.graph), sep="\n", flush=True)
        if args.timeline:
            panels.extend(stamped_steps(args, case))
        if args.jsonl:
            _append_lines(args.jsonl, case)

    if args.jsonl:
        _append_lines(args.jsonl, [about])
    if not args.quiet:
        print(*table_head(widths, args.graph), sep="\n", flush=True)
    try:
        records = run(args, with_torch=torch_note is None, on_network=measured)
    except KeyboardInterrupt:
        grid = len(args.sizes) * len(args.layers) * len(args.batch)
        kept = f"; their lines are in {args.jsonl}" if args.jsonl and networks else ""
        print(f"{p.prog}: interrupted with {len(networks)} of {plural(grid, 'network')} measured{kept}",
              file=sys.stderr)
        return 130
    print(table(records, widths, args.graph) if args.quiet else table_foot(args.graph))
    if torch_note:
        print(torch_note)
    print(_fitted(verdicts(records)))
    if args.graph:
        print(_fitted(graph_verdicts(records)))
    if args.one_pass:
        print(_fitted(floor_verdicts(records)))
    counts = call_count.measure(args) if args.count_calls else None
    if counts:
        print(_fitted(call_count.table(counts)))
    if args.json:
        report = {**about, "records": records, **({"call_counts": counts} if counts else {})}
        _write_atomically(args.json, json.dumps(report, indent=1) + "\n")
    if args.timeline:
        first = networks[0][0]
        timeline.save(args.timeline, panels, about, f"leapfrog-bench: MLP [{first['N']}] * {first['L']}, batch "
                                                    f"{first['B']}, {args.activation}, {args.dtype}, {args.backend}; "
                                                    "a panel per schedule")
        print(_fitted(timeline_lines(records, args.timeline)))
    if args.plot:
        from .plot import plot

        plot(records, args.plot, about)
        print(f"plot: {args.plot} (the speed-up of a pass against k, measured and as the model predicts)")
    return 0


def _main_parallel(p, args, comm, argv):
    """``leapfrog-bench`` under ``mpiexec -n P`` (``bench_parallel``): every rank measures, rank 0 reports."""
    for option, given in (("--plot", args.plot), ("--fused", args.fused), ("--one-pass", args.one_pass),
                          ("--k auto", "auto" in args.k), ("--graph", args.graph), ("--timeline", args.timeline),
                          ("--jsonl", args.jsonl), ("--count-calls", args.count_calls)):
        if given:
            p.error(f"{option} does not apply under mpiexec")
    specs = [("sequential", 0)] + [(name, k) for name in args.schedule if name != "sequential"
                                   for k in (args.k if takes_k("mlp", name) else [0])]
    records = bench_parallel.run(args, comm, [(name, k, make_schedule("mlp", name, k)) for name, k in specs], ETA)
    if comm.rank == 0:
        print(bench_parallel.table(records))
        report = {"command": f"mpiexec -n {comm.size} leapfrog-bench {' '.join(argv)}",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "machine": machine(args.backend), "records": records}
        if args.json:
            _write_atomically(args.json, json.dumps(report, indent=1) + "\n")
    return 0



def _fitted(text):
    """Each line of ``text`` within the terminal's 100 columns (``cli.fitted``)."""
    return "\n".join(fitted(line) for line in text.splitlines())


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

