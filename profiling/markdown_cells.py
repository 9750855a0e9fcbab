"""The cells of the Markdown tables of docs/performance.md (``bench_table.py``, ``rnn_tables.py``): the
terminal table's (``leapfrog_gpu.tools.bench.mlp``) with an en dash for what does not apply and between
p20 and p80, ``×`` after a ratio, and times in ms to 2 decimals below 10 ms and to 1 from 10 ms up."""

from leapfrog_gpu.tools.bench import mlp
from leapfrog_gpu.tools.bench.runner import noisy

NONE = "–"
"""A value that does not apply."""


def ms(value):
    return f"{value:.{2 if value < 10 else 1}f}"


def label(r):
    """A record's schedule: ``leapfrog+fused graph``, ``sequential (best seq)``; ``auto → sequential`` in a file
    written by ``leapfrog-bench --k auto`` before it moved to ``autotune_check.py``."""
    return ("auto → " if r.get("auto") else "") + mlp.label(r, graph=" graph", best=" (best seq)")


def spread(stats):
    """``median [p20–p80]``, marked ``!`` when noisy (``runner.NOISY``)."""
    if stats is None:
        return NONE
    return f"{ms(stats['median'])} [{ms(stats['p20'])}–{ms(stats['p80'])}]" + ("!" if noisy(stats) else "")


def ratio(value):
    """A speed-up to 2 decimals (``1.25×``), below 0.1 to 2 significant digits (``0.0072×``)."""
    return NONE if value is None else (f"{value:.2f}" if value >= 0.1 else f"{value:#.2g}") + "×"


def percent(value):
    return NONE if value is None else "<-999%" if 100 * value < -999 else f"{100 * value:.0f}%"


def number(value):
    return NONE if value is None else f"{value:.3f}"
