"""The stream timeline of a few steps (``backends.timing.Timeline``: every launch stamped on its own stream), its
analysis and its Gantt chart, without a profiler.

Per step: each stream's busy time (the union of its intervals), the share of worker-stream time that overlaps
main-stream work (the worker streams': not the communication stream's, whose sums wait on the chain), and the
idle gaps of the main stream, which runs the critical path (forward, chain, update): a gap there is time the chain
waited, for a join or for the host. ``profiling/overlap.py`` measures an Nsight Systems trace with ``overlap``
below, so both measure the same thing (there too the share is the worker streams': every stream but the main one
and those that run NCCL's kernels alone, a data-parallel run's sums).

    leapfrog-train --timeline t.png --profile-steps 10:15     # as profiling/bench_timeline.py --timeline t.png

Each writes ``t.png`` (a panel per configuration showing one step, the one with the most worker overlap, else the
median one: a row per stream, a bar per launch coloured by its role, ``core.launches``) and ``t.json`` (every
interval, and the analysis of every step).
"""

import itertools
import json
import os
from pathlib import Path

import numpy as np

from ..core import launches
from ..core.files import replaced_atomically
from .cli import output_refusal, pip_install, plural, png_refusal

MAIN = "main"
GAPS_SHOWN = 3  # the longest idle gaps of the main stream kept per step
COLOURS = dict(zip([*launches.ROLES, launches.OTHER], ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange",
                                                        "tab:cyan", "tab:brown", "tab:gray")))
ACROSS = 200  # characters of a bar's label that fit across a panel


# -- intervals ----------------------------------------------------------------------------------------


def union(intervals):
    """Sorted, disjoint ``(start, end)`` pairs covering ``intervals``."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]


def length(intervals):
    return sum(end - start for start, end in intervals)


def overlap(streams, main, workers=None):
    """How much of each stream's busy time, of ``streams`` (``{stream: [(start, end), ...]}``), overlaps that of
    stream ``main``: ``(busy, shared, share)``, ``busy[s]`` the length of the union of stream s's intervals,
    ``shared[s]`` the part that overlaps ``main``'s (``None`` for ``main``), and ``share`` the ``workers``' (default:
    every stream but ``main``) ``shared`` over their ``busy`` (``None`` when they are never busy)."""
    merged = {s: union(intervals) for s, intervals in streams.items()}
    busy = {s: length(m) for s, m in merged.items()}  # |A & B| = |A| + |B| - |A | B|
    shared = {s: None if s == main else busy[s] + busy[main] - length(union(m + merged[main]))
              for s, m in merged.items()}
    workers = [s for s in streams if s != main] if workers is None else workers
    worker_busy = sum(busy[s] for s in workers)
    share = sum(shared[s] for s in workers) / worker_busy if worker_busy else None
    return busy, shared, share


# -- analysis -----------------------------------------------------------------------------------------


def analyse_step(intervals):
    """The analysis of one step's intervals (``timing.Interval``, ns): a dict of its span, each
    stream's busy time, the worker time overlapping the main stream, and the main stream's idle gaps."""
    first = min(i.start for i in intervals)
    streams = {}
    for i in intervals:
        streams.setdefault(i.stream, []).append((i.start, i.end))
    workers = [s for s in streams if s.startswith("worker")]  # not the communication stream's sums
    busy, shared, share = overlap(streams, MAIN, workers) if MAIN in streams else (
        {s: length(union(v)) for s, v in streams.items()}, {}, None)
    chain = sorted((i for i in intervals if i.stream == MAIN), key=lambda i: i.start)
    gaps = []
    reach, last = None, None
    for i in chain:
        if reach is not None and i.start > reach:
            gaps.append({"ms": (i.start - reach) / 1e6, "at_ms": (reach - first) / 1e6, "after": last,
                         "before": i.name})
        if reach is None or i.end >= reach:
            reach, last = i.end, i.name
    gaps.sort(key=lambda gap: -gap["ms"])
    return {
        "step": intervals[0].step,
        "span_ms": (max(i.end for i in intervals) - first) / 1e6,
        "launches": len(intervals),
        "busy_ms": {s: ns / 1e6 for s, ns in sorted(busy.items(), key=lambda item: _stream_order(item[0]))},
        "overlap_with_main": {s: ns / busy[s] if busy[s] else None for s, ns in shared.items() if ns is not None},
        "worker_overlap": share,
        "main_idle_ms": sum(gap["ms"] for gap in gaps),
        "main_gaps": gaps[:GAPS_SHOWN],
    }


def by_step(intervals):
    """``{step: [intervals of that step]}``, steps in order."""
    ordered = sorted(intervals, key=lambda i: i.step)
    return {step: list(group) for step, group in itertools.groupby(ordered, key=lambda i: i.step)}


def analyse(intervals):
    """Every step analysed, and their medians: ``{"steps": [...], "summary": {...}}``, the summary with the median
    span, busy time per stream, worker overlap and main-stream idle time, and the chart's step, ``"shown_step"``:
    the one with the most worker overlap (the shorter of two alike), else the one of median span (``"shown"``)."""
    steps = [analyse_step(group) for group in by_step(intervals).values()]
    if not steps:
        raise ValueError("the timeline holds no launch: was anything launched inside timeline.step()?")
    spans = [s["span_ms"] for s in steps]
    overlapping = [s for s in steps if s["worker_overlap"]]
    shown = (max(overlapping, key=lambda s: (s["worker_overlap"], -s["span_ms"])) if overlapping
             else steps[int(np.argsort(spans)[(len(spans) - 1) // 2])])["step"]
    streams = sorted({name for s in steps for name in s["busy_ms"]}, key=_stream_order)
    overlaps = [s["worker_overlap"] for s in steps if s["worker_overlap"] is not None]
    summary = {
        "steps": len(steps), "shown_step": shown, "shown": "the most overlap" if overlapping else "the median span",
        "span_ms": float(np.median(spans)),
        "busy_ms": {name: float(np.median([s["busy_ms"].get(name, 0.0) for s in steps])) for name in streams},
        "worker_overlap": float(np.median(overlaps)) if overlaps else None,
        "main_idle_ms": float(np.median([s["main_idle_ms"] for s in steps])),
    }
    return {"steps": steps, "summary": summary}


def _stream_order(name):
    """``main`` first, then workers by number, then anything else by name."""
    number = name.removeprefix("worker")
    if name == MAIN:
        return 0, 0, ""
    return (1, int(number), "") if number != name and number.isdigit() else (2, 0, name)


def describe(summary):
    """One line: busy time per stream, worker overlap and main-stream idle time, medians per step."""
    busy = " / ".join(f"{name} {ms:.3f}" for name, ms in summary["busy_ms"].items())
    share = _percent(summary["worker_overlap"]) + (" (no worker stream)" if summary["worker_overlap"] is None else "")
    return (f"step {summary['span_ms']:.3f} ms; busy ms {busy}; worker time overlapping main: {share}; main idle "
            f"{summary['main_idle_ms']:.3f} ms (medians of {plural(summary['steps'], 'step')})")


# -- output -------------------------------------------------------------------------------------------


def refusal(path):
    """Why ``--timeline path`` cannot be written, in one line, or ``None``: the chart is a PNG, neither it nor its
    .json is a folder, it can be written there (``cli.output_refusal``: said now, not once the steps it stamps have
    run), and matplotlib draws it."""
    why = png_refusal("--timeline", path, " (its intervals go beside it, in .json)")
    if why:
        return why
    for written in (path, os.fspath(Path(path).with_suffix(".json"))):
        if os.path.isdir(written):
            return f"--timeline {path}: {written} is a folder; give the name of a file that is none"
    why = output_refusal("--timeline", path)
    if why:
        return why
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"--timeline needs matplotlib: {pip_install('plot')}"
    return None


def save(path, panels, about, title):
    """Write the chart of ``panels`` (``[{"label": str, "intervals": [Interval, ...], ...}]``, one panel each)
    under ``title`` (the network) to ``path`` (PNG), and them and ``about`` (command, date, ...) to ``path`` with
    suffix ``.json``, each file whole or not at all. Returns the panels, each with its ``"analysis"``."""
    for panel in panels:
        panel["analysis"] = analyse(panel["intervals"])
    draw([(p["label"], p["intervals"], p["analysis"]["summary"]) for p in panels], path, title)
    record = {**about, "title": title,
              "units": "intervals: [step, stream, name, start ns, end ns] from the first stamp",
              "panels": [{**{k: v for k, v in p.items() if k != "intervals"},
                          "intervals": [list(i) for i in p["intervals"]]} for p in panels]}
    with replaced_atomically(Path(path).with_suffix(".json")) as tmp, open(tmp, "w", encoding="utf-8") as out:
        json.dump(record, out, separators=(",", ":"))
        out.write("\n")
    return panels


def draw(panels, path, title):
    """The Gantt chart under ``title``: one panel per ``(label, intervals, summary)``, showing the step
    ``summary["shown_step"]`` on its own time axis (ms from its start); one row per stream, a bar per
    launch, coloured by its role (``core.launches``) and labelled with its name, or its unit, where it fits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = []
    for label, intervals, summary in panels:
        step = [i for i in intervals if i.step == summary["shown_step"]]
        rows.append((label, step, summary, sorted({i.stream for i in step}, key=_stream_order)))
    heights = [0.9 + 0.32 * len(streams) for *_, streams in rows]
    fig, axes = plt.subplots(len(rows), 1, figsize=(12, 0.9 + sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (label, step, summary, streams) in zip(axes[:, 0], rows):
        first = min(i.start for i in step)
        span = max(i.end for i in step) - first
        for row, stream in enumerate(streams):
            for i in (i for i in step if i.stream == stream):
                ax.broken_barh([((i.start - first) / 1e6, max(i.end - i.start, 1) / 1e6)], (row - 0.4, 0.8),
                               facecolors=COLOURS[launches.role(i.name)], edgecolors="white", linewidth=0.3)
                room = ACROSS * (i.end - i.start) / span
                name = i.name.replace("nabla_", "\N{NABLA}").replace("delta", "\N{GREEK SMALL LETTER DELTA}")
                ax.text((i.start + i.end - 2 * first) / 2e6, row, next((text for text in (name, launches.unit(i.name))
                        if len(text) <= room), ""), ha="center", va="center", fontsize=6, color="white")
        ax.set_yticks(range(len(streams)), streams)
        ax.set_ylim(len(streams) - 0.5, -0.5)
        share = _percent(analyse_step(step)["worker_overlap"])
        ax.set_title(f"{label}: step {summary['shown_step']} ({summary['shown']} of {summary['steps']} steps), "
                     f"{span / 1e6:.3f} ms, worker time overlapping main {share} (median "
                     f"{_percent(summary['worker_overlap'])}); main idle {summary['main_idle_ms']:.3f} ms (median)",
                     fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the start of the step; bars: launches named what[unit], the unit a layer "
                           "(MLP, RNN) or node (DagNet)")
    shown = {launches.role(i.name) for _, step, *_ in rows for i in step}
    legend = [Patch(color=colour, label=role) for role, colour in COLOURS.items() if role in shown]
    height = fig.get_figheight()
    fig.suptitle(title, y=1 - 0.08 / height, fontsize=10)
    fig.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.35 / height), ncol=len(legend),
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.65 / height))
    with replaced_atomically(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def _percent(share):
    return "-" if share is None else f"{100 * share:.0f}%"
