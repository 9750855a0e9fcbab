"""``leapfrog-bench``'s table of the MLP, within 100 columns: each network's heading (what its rows share),
then a row per configuration, every ratio a speed-up, the baseline's time over the row's (> 1: faster); its
legend. The Markdown tables' cells are ``profiling/markdown_cells.py``'s; what each column means:
docs/performance.md.
"""

from ..cli import fitted
from .runner import NOISY, line, median, ratio

COLUMNS = (("", "k", 1), ("", "blas", 4), ("step", "ms", 7), ("bwd", "ms", 7), ("pred", "saving", 7),
           ("meas", "saving", 7), ("bwd", "vs seq", 6), ("step", "vs best", 7))
"""Each column after the schedule's: its title, on two lines, and its width, that of a number where it exceeds
the title's (``1234.5!``, ``-112.5%``): a network's rows are printed before the next is measured, so the
widths are set before any number is known. The last two, and ``LAST``, are speed-ups, under ``SPEEDUP``."""
LAST = {False: ("step", "vs floor", 8), True: ("graph", "vs eager", 8)}
"""The last column: without ``--graph`` the step's speed-up over its own bytes floor, with it a graph step's
over the same eager step (the JSON has both)."""
SPEEDUP = "speed-up (> 1: faster)"
"""The title above the speed-up columns, ending where they end."""
TABLE_FOOT = (f"* best sequential configuration (fastest step); ! noisy: p80 - p20 over {NOISY:.0%} of the median; "
              "pred/meas saving: of a pass (forward + backward), the model's (1 - 1/k) f3/f and measured; "
              "speed-up vs X: X's median time over the row's (> 1: faster); bwd vs seq: the backward pass vs "
              "sequential's at the same BLAS setting; step vs best: the step vs the best sequential step; f1-f3 in "
              "ms per layer")


def label(r, graph="[graph]", best="*"):
    """A record's schedule as a table shows it: leapfrog+fused[graph], sequential*."""
    update = "+one-pass" if r.get("one_pass") else "+fused" if r.get("fused") else ""
    name = r["schedule"] + update
    name += graph if r.get("graph") and not r["schedule"].startswith("torch") else ""
    return name + (best if r.get("best_sequential") else "")


def percent(value):
    """``value`` as a percentage; a loss beyond -999 % (a run slowed down by another job, say) as
    ``<-999%``, so that the column keeps its width."""
    if value is None:
        return "-"
    return "<-999%" if 100 * value < -999 else f"{100 * value:.1f}%"


def number(value):
    return "-" if value is None else f"{value:.3f}"


def columns(args):
    """``(titles, widths)`` of the table's columns for ``args``, the titles' two lines each a tuple: the schedule's
    as wide as the longest name this run can print (``--schedule``, ``--optimizer``, PyTorch's), left-aligned."""
    update = "+one-pass" if args.one_pass else "+fused" if args.fused else ""
    labels = [name + update + "[graph]" * args.graph for name in args.schedule] + [f"sequential{update}*"]
    labels += ["torch-autograd", "torch-cuda-graph"] + [f"torch-{name}-foreach" for name in args.optimizer]
    *titles, widths = zip(("", "schedule", -max(map(len, labels))), *COLUMNS, LAST[args.graph])
    return titles, widths


def table_head(args):
    """The titles, on three lines: ``SPEEDUP`` above the speed-up columns, then each column's own."""
    titles, widths = columns(args)
    return [SPEEDUP.rjust(sum(map(abs, widths)) + 2 * (len(widths) - 1))] + [line(t, widths) for t in titles]


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
                     + f", per layer f1 {number(r['f1_ms'])} f2 {number(r['f2_ms'])} f3 {number(r['f3_ms'])} ms, "
                     "bytes floor " + ", ".join(f"{update} {number(floor)}" for update, floor in floors.items()) + " ms")
    return [parts[0]] + [fitted(f"  {part}") for part in parts[1:]]


def table_rows(case, args):
    """One network's lines: its heading, then a row per record."""
    return network_lines(case) + [line(_cells(r, args.graph), columns(args)[1]) for r in case]


def table_foot(graph):
    """The legend under the table, with the graph column's when ``graph``, else the floor's."""
    return fitted(TABLE_FOOT + ("; [graph]: the step as a graph; graph vs eager: the step vs the same eager step"
                                if graph else "; step vs floor: the step vs its own bytes floor (1: at the floor)"))


def _cells(r, graph):
    head = [label(r), r["k"], "-" if r["blas_threads"] is None else r["blas_threads"]]
    if "refused" in r:
        return head + [f"refused: {r['refused']}"]
    return head + [median(r["step_ms"]), median(r["backward_ms"]), percent(r["predicted_saving"]),
                   percent(r["measured_saving"]), ratio(r["backward_speedup"]),
                   ratio(r["step_speedup_vs_best_sequential"]),
                   ratio(r.get("graph_speedup") if graph else r.get("floor_speedup"))]
