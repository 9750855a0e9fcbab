"""``leapfrog-bench`` of one MLP with the stream timeline of each eager configuration: every launch of a few
steps stamped, busy time per stream, the worker time overlapping the main stream, and a Gantt chart.

    python profiling/bench_timeline.py --backend numpy --sizes 1024 --layers 16 --batch 1 --k 2 --timeline t.png

Every option of ``leapfrog-bench`` (its table, ``--json``, ``--jsonl``, ``--graph`` ...), for one network,
and ``--timeline FILE.png``. After the network's rows are measured, each of our eager configurations (a
graph step is one launch, which nothing can stamp inside) runs ``--repeats`` steps of its ``--optimizer``
with every launch stamped (``timing.Timeline``), in turn with as many plain ones, so that the stamps' own
cost is measured too. Each record gains ``"timeline"``: the analysis's medians (``tools.timeline.analyse``)
and the step's median time plain and stamped; FILE.png gets a panel per configuration (with its optimizer
where ``--optimizer`` names more than one) and FILE.json every interval. On the NumPy backend the whole
run takes one BLAS thread per stream (``--blas-threads 1``): with more, the streams' BLAS threads would
contend for the cores, and the chart would show the contention. What the chart and the numbers mean:
docs/performance.md#stream-timeline; ``bench_table.py`` renders the records.
"""

import contextlib
import os
import sys
from pathlib import Path

import numpy as np

from leapfrog_gpu.backends import get_backend, timing
from leapfrog_gpu.mlp import autotune
from leapfrog_gpu.mlp.network import MLP
from leapfrog_gpu.tools import guarded, timeline
from leapfrog_gpu.tools.bench import measure, mlp as bench_mlp, runner
from leapfrog_gpu.tools.bench.runner import ratio
from leapfrog_gpu.tools.cli import fitted, listed, one_file_each, writing
from leapfrog_gpu.tools.schedules import make_schedule

PROG = "python profiling/bench_timeline.py"
RECORDS, GRID, work, head, rows = bench_mlp.RECORDS, bench_mlp.GRID, bench_mlp.work, bench_mlp.head, bench_mlp.rows
"""What this suite of ``runner`` takes of ``leapfrog-bench``'s (``bench.mlp``) as it is."""


def parser():
    """``leapfrog-bench``'s options, and ``--timeline``."""
    p = bench_mlp.parser()
    p.prog, p.description = PROG, __doc__.split("\n\n")[0]
    p.epilog = listed(runner.exit_statuses(["--json", "--jsonl", "--plot", "--timeline"]))
    p.add_argument("--timeline", metavar="FILE.png", required=True,
                   help="the chart, one panel per eager configuration, and FILE.json beside it (needs matplotlib)")
    return p


def check(p, args):
    """``leapfrog-bench``'s checks; an MLP, one network, a PNG in a folder that exists (it and its .json no other
    output's file), one BLAS thread per stream."""
    if args.model != "mlp":
        p.error(f"--model {args.model}: this script charts an MLP's steps; an RNN's timeline is leapfrog-train "
                "--model rnn --timeline FILE.png")
    if timeline.refusal(args.timeline):
        p.error(timeline.refusal(args.timeline))
    beside = os.fspath(Path(args.timeline).with_suffix(".json"))
    written = [(f"--{option}", getattr(args, option)) for option in ("json", "jsonl", "plot")]
    if why := one_file_each([*written, ("--timeline", args.timeline), ("--timeline's .json", beside)]):
        p.error(why)
    if len(runner.grid(bench_mlp, args)) > 1:
        p.error("--timeline charts one network: give one value each to --sizes, --layers and --batch")
    if args.blas_threads not in (None, [1]):
        p.error("--blas-threads: the timeline runs one BLAS thread per stream; give 1 or leave it out")
    bench_mlp.check(p, args)
    if args.backend == "numpy":
        args.blas_threads = [1]


@contextlib.contextmanager
def start(args):
    """``leapfrog-bench``'s shared state, and the chart's panels."""
    with bench_mlp.start(args) as state:
        yield {**state, "panels": []}


def case(args, state, key):
    """The network's records (``leapfrog-bench``'s), each eager configuration's stamped."""
    records = bench_mlp.case(args, state, key)
    state["panels"].extend(stamped_steps(args, records))
    return records


def foot(args, state, records, header):
    """``leapfrog-bench``'s lines, the chart, and a line per stamped configuration."""
    bench_mlp.foot(args, state, records, header)
    first = records[0]
    title = (f"leapfrog-bench: MLP [{first['N']}] * {first['L']}, batch {first['B']}, {args.activation}, "
             f"{args.dtype}, {args.backend}; a panel per schedule")
    with writing(f"--timeline {args.timeline}"):  # a full disk, a folder gone: one line, exit status 5
        timeline.save(args.timeline, state["panels"], header, title)
    print(*(fitted(line) for line in timeline_lines(records, args.timeline).splitlines()), sep="\n")


def stamped_steps(args, case):
    """The timeline of each of our eager configurations in ``case`` (one network's records): ``--repeats``
    steps of the record's optimizer with every launch stamped, in turn with as many plain ones. Adds
    ``"timeline"`` to each record: the analysis's medians and the step's median time plain and stamped. Returns
    the chart's panels, each labelled with its optimizer where ``--optimizer`` names more than one."""
    first, panels = case[0], []
    sizes = [first["N"]] * first["L"]
    x, y = measure.host_batch(sizes, first["B"], args.dtype)
    for name in args.optimizer:  # a network each, as measured: an optimizer's state is its network's
        rule = runner.OPTIMIZERS[name]
        with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                       backend=backend) as net:
            for r in case:
                if (r["optimizer"] != name or r["schedule"].startswith("torch") or r["graph"]
                        or "refused" in r):
                    continue
                schedule = make_schedule("mlp", r["schedule"], r["k"], r["fused"], r["one_pass"])
                stamps = timing.Timeline(backend)

                def plain(schedule=schedule):
                    net.train_step(x, y, rule, schedule)

                def stamped(schedule=schedule, stamps=stamps):
                    with stamps.step():
                        net.train_step(x, y, rule, schedule)

                with autotune.blas_limit(r["blas_threads"]):
                    times = runner.interleaved(backend, {"plain": plain, "stamped": stamped}, args.repeats,
                                               args.warmup, settle=False)  # the two in alternation: the stamps' cost
                intervals = [i for i in stamps.intervals() if i.step >= max(args.warmup, 1)]
                analysis = timeline.analyse(intervals)
                plain_ms, stamped_ms = times["plain"]["ms"], times["stamped"]["ms"]
                r["timeline"] = {**analysis["summary"], "step_ms_plain": timing.summary(plain_ms),
                                 "step_ms_stamped": timing.summary(stamped_ms),
                                 "cost": float(np.median(stamped_ms) / np.median(plain_ms))}
                panels.append({"label": panel_label(r, len(args.optimizer) > 1), "bench": r, "intervals": intervals,
                               "analysis": analysis})
    return panels


def panel_label(r, optimizer):
    """A stamped record's panel: ``leapfrog k=2, BLAS 1``, with its optimizer (``, adam``) where ``optimizer``."""
    return (bench_mlp.label(r).rstrip("*") + (f" k={r['k']}" if r["k"] else "")
            + ("" if r["blas_threads"] is None else f", BLAS {r['blas_threads']}")
            + (f", {r['optimizer']}" if optimizer else ""))


def timeline_lines(records, path):
    """One line per stamped configuration, beside its backward speed-up; with its optimizer where the records
    have more than one."""
    several = len({r["optimizer"] for r in records}) > 1
    lines = [f"timeline ({path} and its .json): medians over the stamped steps; 'stamped' is the time the stamps "
             "add to a plain step, the two timed in alternation"]
    for r in records:
        if "timeline" not in r:
            continue
        t = r["timeline"]
        lines.append(f"{bench_mlp.label(r).rstrip('*')} k={r['k']} blas={r['blas_threads'] or '-'}"
                     + (f" {r['optimizer']}" if several else "") + ": plain "
                     f"{t['step_ms_plain']['median']:.3f} ms, stamped {stamping(t['cost'])}; "
                     f"{timeline.describe(t)}; backward speed-up vs sequential {ratio(r['backward_speedup'])}")
    return "\n".join(lines)


def stamping(cost):
    """What the stamps add to a step, ``cost`` (the stamped step's time over the plain one's): ``+2.1%``."""
    return f"{100 * (cost - 1):+.1f}%"


def main(argv=None):
    """``leapfrog-bench``'s run of the one network, stamped; its exit status."""
    return runner.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(guarded(main, PROG))
