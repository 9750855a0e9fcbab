"""The Markdown tables of docs/rnn.md from a run of ``profiling/rnn_bench.py``: the steps measured, and the
same steps on a GPU, modelled (a model, not a measurement).

    python profiling/rnn_tables.py profiling/results/rnn_bench_cpu_2026-12-03.json
    python profiling/rnn_tables.py RESULTS.json --round-us 10 --tflops 50

The measured table gives, per (N, tau, B), BPTT's step and every step's speed-up over it (BPTT's median
over the row's, > 1: faster; "—" where the run skipped or refused the step), PyTorch's as the run named them
(``torch nn.GRU 2t``: a GRU's at two threads).

In the model a step's time is its dependent rounds at ``--round-us`` each (a launch that waits for the one
before) plus its flops at ``--tflops`` (the forward pass and the backward chain, as the bench counts
them, and the weight gradients of the run's cell, ``rnn.schedules.gradient_flops``, which every schedule does
alike). The
rounds and flops are the CPU run's: a step parallel in time takes the same Newton iterations on any
device, up to rounding; its scans ran by the host's algorithm (``scan="auto"``: cyclic reduction for
full Jacobians), whose rounds a GPU's ``auto`` (doubling) would about halve and whose flops it would
multiply by up to log2 tau. Leapfrog(k) is modelled as BPTT: the same rounds; the gradients it overlaps
are a few microseconds of flops at this rate. PyTorch's step on a GPU runs cuDNN's fused kernels and is
not modelled.
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

from leapfrog_gpu.rnn.schedules import gradient_flops
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import Parser, number, read_or_refuse
from markdown_cells import ratio

MEASURED = ("step bptt", "step leapfrog", "step timescan", "step timescan+newton", "step timescan+quasi-newton")
"""Our rows of the measured table, BPTT's first; PyTorch's (``step torch ...``) follow them."""
MODELLED = ("step bptt", "step timescan", "step timescan+newton", "step timescan+quasi-newton")
"""The rows modelled, BPTT's first."""


def modelled_s(row, round_s, flops_per_s):
    """Seconds of ``row`` (a step's row of the bench's JSON, with ``rounds`` and ``flops``) on the model."""
    sizes = [row.get("inputs", row["N"])] + [row["N"]] * (row["L"] - 1)
    gradients = gradient_flops(sizes, row["tau"], row["B"], outputs=row["tau"], cell=row.get("cell", "elman"))
    return row["rounds"] * round_s + (row["flops"] + gradients) / flops_per_s


def by_size(rows, names):
    """{(N, tau, B): {name: row}} of the rows named in ``names``."""
    sizes = defaultdict(dict)
    for row in rows:
        if row["schedule"] in names:
            sizes[row["N"], row["tau"], row["B"]][row["schedule"]] = row
    return sizes


def head(names, first):
    return ["| N | τ | B | " + first + " | " + " | ".join(name.removeprefix("step ") for name in names[1:]) + " |",
            "|---:|---:|---:|---:|" + "---:|" * (len(names) - 1)]


def measured(rows):
    """Markdown lines: per (N, tau, B), BPTT's step (median ms) and every step's speed-up over it."""
    names = [*MEASURED, *dict.fromkeys(row["schedule"] for row in rows if row["schedule"].startswith("step torch "))]
    lines = head(names, "BPTT ms")
    for (N, tau, B), steps in sorted(by_size(rows, names).items()):
        base = steps[MEASURED[0]]["median_s"]
        cells = [ratio(base / steps[name]["median_s"]) if "median_s" in steps.get(name, {}) else "—"
                 for name in names[1:]]
        lines.append(f"| {N} | {tau} | {B} | {base * 1e3:.2f} | " + " | ".join(cells) + " |")
    return lines


def table(rows, round_s, flops_per_s):
    """Markdown lines: per (N, tau, B), BPTT's modelled ms and every modelled step's speed-up over it
    ("—" where the CPU run skipped or refused the step)."""
    lines = head(MODELLED, "BPTT (model)")
    for (N, tau, B), steps in sorted(by_size(rows, MODELLED).items()):
        base = modelled_s(steps[MODELLED[0]], round_s, flops_per_s)
        cells = [ratio(base / modelled_s(steps[name], round_s, flops_per_s))
                 if "rounds" in steps.get(name, {}) else "—" for name in MODELLED[1:]]
        lines.append(f"| {N} | {tau} | {B} | {base * 1e3:.2f} ms | " + " | ".join(cells) + " |")
    return lines


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="the JSON file profiling/rnn_bench.py wrote")
    parser.add_argument("--round-us", type=number(0), default=5.0,
                        help="microseconds a dependent round takes (default 5)")
    parser.add_argument("--tflops", type=number(0, strict=True), default=20.0,
                        help="TFLOP/s of the products (default 20)")
    args = parser.parse_args(argv)
    found = read_or_refuse(parser, args.results, lambda name: json.loads(Path(name).read_text(encoding="utf-8")),
                           "a file profiling/rnn_bench.py wrote")
    rows = found.get("rows") if isinstance(found, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, dict) and {"N", "tau", "B", "L", "schedule"} <= set(row)
                                             for row in rows):
        parser.error(f"{args.results} holds no rows of profiling/rnn_bench.py (each with N, tau, B, L and schedule)")
    timed = {size for size, steps in by_size(rows, MEASURED[:1]).items() if "median_s" in steps[MEASURED[0]]}
    untimed = sorted({(row["N"], row["tau"], row["B"]) for row in rows} - timed)
    if not timed or untimed:
        where = " at N={} tau={} B={}".format(*untimed[0]) if untimed else ""
        parser.error(f"{args.results} holds no timed step bptt{where}, the tables' baseline (profiling/rnn_bench.py "
                     "--time step times it)")
    print("Measured: BPTT's step (median ms) and each step's speed-up over it (> 1: faster).\n")
    print("\n".join(measured(rows)))
    print(f"\nModelled: {args.round_us:g} µs per dependent round, {args.tflops:g} TFLOP/s; speed-up over BPTT's "
          "modelled step (> 1: faster).\n")
    print("\n".join(table(rows, args.round_us * 1e-6, args.tflops * 1e12)))


if __name__ == "__main__":
    sys.exit(guarded(main, "rnn_tables.py"))
