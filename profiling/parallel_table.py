"""Render runs of ``mpiexec -n P python profiling/parallel_bench.py --json`` (before, ``leapfrog-bench`` under
mpiexec) as the Markdown table of docs/performance.md's data-parallel benchmark: per configuration, the
median over the runs of each run's medians, and the smallest and largest run in brackets (runs at
different times meet different loads on a shared machine).

    python profiling/parallel_table.py profiling/results/bench_cpu_parallel_*.json
"""

import json
import statistics
import sys
from pathlib import Path

from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import Parser, read_or_refuse

KEY = ("N", "L", "B", "P", "schedule", "k", "bucket_mb", "blas_threads")
COLUMNS = {  # heading: how to read the value from a record
    "step ms": lambda r: r["step_ms"]["median"],
    "local ms": lambda r: r["local_slowest_ms"],
    "sums ms": lambda r: r["sums_slowest_ms"],
    "exposed ms": lambda r: r["exposed_ms"],
    "hidden": lambda r: r["hidden"],
    "one process ms (B·P)": lambda r: r["one_ms"]["median"],
    "speed-up vs one process": lambda r: r["speedup"],
}


def cell(values, heading):
    middle, low, high = statistics.median(values), min(values), max(values)
    if heading == "hidden":
        return f"{middle:.0%} [{low:.0%}–{high:.0%}]"
    if heading == "speed-up vs one process":
        return f"{middle:.2f}× [{low:.2f}–{high:.2f}]"
    digits = 1 if abs(middle) >= 10 else 2
    return f"{middle:.{digits}f} [{low:.{digits}f}–{high:.{digits}f}]"


def table(runs):
    """One row per configuration found in every run, in the order of the first."""
    found = [{tuple(r[k] for k in KEY): r for r in run["records"]} for run in runs]
    rows = ["Speed-up vs one process: one process's step on B·P samples over the data-parallel step (> 1: faster).",
            "", "| N | L | B per rank | P | schedule | k | bucket MB | BLAS | " + " | ".join(COLUMNS) + " |",
            "|" + "---:|" * (len(KEY) + len(COLUMNS))]
    for key in found[0]:
        if not all(key in records for records in found):
            continue
        cells = [cell([read(records[key]) for records in found], heading) for heading, read in COLUMNS.items()]
        rows.append("| " + " | ".join([*(f"{part:g}" if isinstance(part, float) else str(part) for part in key),
                                       *cells]) + " |")
    return "\n".join(rows)


def main():
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="files written by parallel_bench.py --json")
    runs = []
    for path in parser.parse_args().json:
        run = read_or_refuse(parser, path, lambda name: json.loads(Path(name).read_text(encoding="utf-8")),
                             "a file parallel_bench.py --json wrote")
        records = run.get("records") if isinstance(run, dict) else None
        if not (isinstance(records, list) and records and {"command", "date"} <= set(run) and all(
                isinstance(r, dict) and {*KEY, "step_ms", "one_ms"} <= set(r) for r in records)):
            parser.error(f"{path} holds no run of parallel_bench.py (a command, a date and records, each with "
                         f"{', '.join(KEY)}, step_ms and one_ms)")
        runs.append(run)
    print(f"{len(runs)} runs: `{runs[0]['command']}`, {runs[0]['date'][:10]}\n")
    print(table(runs))


if __name__ == "__main__":
    sys.exit(guarded(main, "parallel_table.py"))
