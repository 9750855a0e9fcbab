"""Render ``leapfrog-bench`` results as the Markdown tables of docs/performance.md.

    python profiling/bench_table.py profiling/results/bench_cpu.json
    python profiling/bench_table.py profiling/results/bench_h200_<date>.jsonl

Takes a ``--json`` file (one run) or a ``--jsonl`` file (each run's header line, then one line per
configuration; ``profiling/device_check.sh`` appends several runs to one). Per run: the command, date
and machine, the table of every configuration, the verdicts against the project's targets that the run
asks for (``verdicts.py``: ``--graph``, ``--one-pass``, ``--optimizer``), and for the configurations stamped
by ``--timeline`` (``bench_timeline.py``), a second table: busy time per
stream, the worker time overlapping the main stream, and the timeline's own cost, beside the
backward-pass speed-up. Every ratio in a table is a speed-up, the baseline's time over the row's
(``SPEEDUP``); a file written before the floor was a speed-up (``floor_ratio``, the step over its floor)
gets its floor column as one.
"""

import json
import sys

from bench_timeline import stamping
from leapfrog_gpu.tools import CLOSED_PIPE_STATUS, guarded
from leapfrog_gpu.tools.bench.mlp import label as schedule
from leapfrog_gpu.tools.bench.runner import noisy
from leapfrog_gpu.tools.cli import UNWRITTEN, Parser, read_or_refuse
from markdown_cells import label, number, percent, ratio, spread
from verdicts import verdicts

SPEEDUP = "Speed-up vs X: X's median time over the row's (> 1: faster)."
"""The line above each table: which way its speed-ups point."""


def table(records):
    graph = any(r.get("graph") for r in records)  # then a column: a graph step against its eager one
    floored = any(floor_speedup(r) for r in records)  # then a last one: the step against its own bytes floor
    by = by_optimizer(records)
    rows = [SPEEDUP, "",
            "| N | L | B | schedule | k | BLAS | step ms | backward ms | f1 | f2 | f3 | pred. | meas. | bwd speed-up "
            "vs seq | bwd speed-up vs best seq | step speed-up vs best seq |" + " graph speed-up vs eager |" * graph
            + " step speed-up vs floor |" * floored,
            "|" + "---:|" * (16 + graph + floored)]
    for r in records:
        rows.append("| " + " | ".join([
            str(r["N"]), str(r["L"]), str(r["B"]), label(r) + by(r), str(r.get("k", 0)),
            str(r.get("blas_threads") or "–"),
            spread(r.get("step_ms")), spread(r.get("backward_ms")),
            *(number(r.get(f)) for f in ("f1_ms", "f2_ms", "f3_ms")),
            *(percent(r.get(f)) for f in ("predicted_saving", "measured_saving")),
            *(ratio(r.get(f)) for f in ("backward_speedup", "backward_speedup_vs_best_sequential",
                                                  "step_speedup_vs_best_sequential")),
            *([ratio(r.get("graph_speedup"))] if graph else []),
            *([ratio(floor_speedup(r))] if floored else []),
        ]) + " |")
    return "\n".join(rows)


def floor_speedup(r):
    """The step's speed-up over its bytes floor, also from a file that has its inverse (``floor_ratio``)."""
    return r.get("floor_speedup") or (r.get("floor_ratio") and 1 / r["floor_ratio"])


def by_optimizer(records):
    """What follows a record's schedule in its row: its optimizer (``, adam``) where ``records`` time more than one
    (a file from before ``--optimizer``: SGD's), else nothing."""
    several = len({r.get("optimizer", "sgd") for r in records}) > 1
    return lambda r: f", {r.get('optimizer', 'sgd')}" if several else ""


def timeline_table(records):
    """The ``--timeline`` analysis of the stamped records, one row each (its schedule as the bench names it:
    ``leapfrog+one-pass``), by optimizer where they have more than one."""
    by = by_optimizer(records)
    rows = [SPEEDUP, "", "| schedule | k | BLAS | step ms | stamping cost | busy ms, main / workers | worker time "
            "overlapping main | main idle ms | bwd speed-up vs seq |", "|" + "---:|" * 9]
    for r in records:
        t = r.get("timeline")
        if t is None:
            continue
        busy = " / ".join(f"{ms:.3f}" for ms in t["busy_ms"].values())
        rows.append("| " + " | ".join([
            schedule(r, best="") + by(r), str(r["k"]),
            str(r.get("blas_threads") or "–"),
            spread(t["step_ms_plain"]), stamping(t["cost"]), busy, percent(t["worker_overlap"]),
            number(t["main_idle_ms"]), ratio(r.get("backward_speedup")),
        ]) + " |")
    return "\n".join(rows) if len(rows) > 4 else ""


def runs(path):
    """``[(header, records)]``: one run from a ``--json`` file, one per header line from a ``--jsonl`` one (a
    header of no run, ``{}``, where the file holds JSON of another shape)."""
    with open(path, encoding="utf-8") as file:
        if not path.endswith(".jsonl"):
            run = json.load(file)
            if not isinstance(run, dict):
                return [({}, None)]
            return [(run, run.get("records", run.get("rows")))]  # rows: an RNN run's, which main refuses
        found = []
        for line in file:
            item = json.loads(line)
            if not isinstance(item, dict):
                return [({}, None)]
            if "command" in item:
                found.append((item, []))
            elif found:
                found[-1][1].append(item)
        return found


def read_runs(parser, path):
    """``runs(path)``, or ``parser.error``'s one line where the file cannot be read or holds anything but runs of
    ``leapfrog-bench``'s MLP."""
    found = read_or_refuse(parser, path, runs, "a file leapfrog-bench --json or --jsonl wrote")
    for run, records in found or [({}, None)]:
        if not isinstance(run, dict) or "command" not in run or not isinstance(records, list):
            parser.error(f"{path} holds no run of leapfrog-bench (no command and records; profiling/rnn_bench.py's "
                         "files are rendered by profiling/rnn_tables.py)")
        if not all(isinstance(r, dict) and {"N", "L", "B", "schedule"} <= set(r) for r in records):
            parser.error(f"{path} holds records of another benchmark than leapfrog-bench's MLP (one without N, L, B "
                         "and schedule), which this script renders")
        if "--model rnn" in run["command"]:
            parser.error(f"{path} holds a run of leapfrog-bench --model rnn, whose table leapfrog-bench prints itself "
                         "(--quiet: at the end); this script renders the MLP's")
    return found


def main():
    """Print the tables of each run of the file named; the exit status."""
    parser = Parser(description=__doc__.splitlines()[0], exit_statuses=[
        (0, "done"), (2, "a file it cannot read, or not of leapfrog-bench's MLP (one line on stderr)"),
        (UNWRITTEN, "stdout could not be written (a full disk): one line"), (130, "stopped by Ctrl-C"),
        CLOSED_PIPE_STATUS])
    parser.add_argument("path", help="a file written by leapfrog-bench --json or --jsonl")
    labels = {"cores": "{} cores", "python": "Python {}", "numpy": "NumPy {}", "cupy": "CuPy {}"}
    for run, records in read_runs(parser, parser.parse_args().path):
        machine = ", ".join(labels.get(key, "{}").format(value) for key, value in run["machine"].items())
        print(f"Command: `{run['command']}`. Date: {run['date'][:10]}. Machine: {machine}.\n")
        print(table(records))
        if any(noisy(r.get("step_ms")) or noisy(r.get("backward_ms")) for r in records):
            print("\n! noisy: p80 – p20 over a quarter of the median")
        judged = verdicts(run["command"], records)
        if judged:
            print(f"\n{judged}")
        stamped = timeline_table(records)
        if stamped:
            print("\nTimeline (medians per step; stamping cost: what stamping every launch adds to the plain "
                  "step):\n")
            print(stamped)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "bench_table.py"))
