"""``leapfrog-bench``'s table of the MLP, within 100 columns: each network's heading (what its rows share),
then a row per configuration, every ratio a speed-up, the baseline's time over the row's (> 1: faster); its
legend. In ``runner``'s cell formats (the Markdown tables' are
``profiling/markdown_cells.py``'s); what each column means: docs/performance.md.
"""

from ..cli import fitted
from .runner import NOISY, median, ratio


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


TITLES = (("", "schedule"), ("", "k"), ("", "blas"), ("step", "ms"), ("bwd", "ms"), ("pred", "saving"),
          ("meas", "saving"), ("bwd", "vs seq"), ("step", "vs best"))
"""Each column's title, on two lines; the last three columns are speed-ups, under ``SPEEDUP``."""
SPEEDUP = "speed-up (> 1: faster)"
"""The title above the speed-up columns, ending where they end."""
CELL = {"blas": 4, "ms": 7, "saving": 7, "vs seq": 6, "vs best": 6, "vs floor": 6}
"""Width of a column's cells where it exceeds its title's (``1234.5!``, ``-112.5%``, ``12.34x``): a network's
rows are printed before the next is measured, so the widths are set before any number is known."""
GRAPH_TITLE, FLOOR_TITLE = ("graph", "vs eager"), ("step", "vs floor")
"""The last column: with ``--graph`` a graph step's speed-up over the same eager step, else the step's over its
own bytes floor (the JSON has both)."""
TABLE_FOOT = (f"* best sequential configuration (fastest step); ! noisy: p80 - p20 over {NOISY:.0%} of the median; "
              "pred/meas saving: of a pass (forward + backward), the model's (1 - 1/k) f3/f and measured; "
              "speed-up vs X: X's median time over the row's (> 1: faster); bwd vs seq: the backward pass vs "
              "sequential's at the same BLAS setting; step vs best: the step vs the best sequential step; f1-f3 in "
              "ms per layer")


def column_widths(args, schedules):
    """The width of each column: its titles', a number's (``CELL``), or for the schedule the longest
    name this run can print (``schedules``: the names it measures)."""
    update = "+one-pass" if args.one_pass else "+fused" if args.fused else ""
    labels = [name + update + "[graph]" * args.graph for name in schedules] + [f"sequential{update}*"]
    optimizers = getattr(args, "optimizer", ["sgd"])
    labels += ["torch-autograd", "torch-cuda-graph"] + [f"torch-{name}-foreach" for name in optimizers]
    schedule = max(map(len, labels))
    return [max(len(top), len(bottom), CELL.get(bottom, 0), schedule if bottom == "schedule" else 0)
            for top, bottom in titles(args.graph)]


def titles(graph):
    """The titles of a table's columns, with or without ``--graph``."""
    return TITLES + ((GRAPH_TITLE,) if graph else (FLOOR_TITLE,))


def table_head(widths, graph=False):
    """The titles, on three lines: ``SPEEDUP`` above the speed-up columns, then each column's own."""
    above = SPEEDUP.rjust(sum(widths) + 2 * (len(widths) - 1))
    return [above] + [_line([title[line] for title in titles(graph)], widths) for line in (0, 1)]


def network_lines(case):
    """The heading of one network's rows: its shape, then per BLAS setting, indented, what its rows share."""
    first = case[0]
    parts = [f"N={first['N']} L={first['L']} B={first['B']} {first['dtype']}"
             + ("" if first.get("optimizer", "sgd") == "sgd" else f", optimizer {first['optimizer']}")]
    for r in {r["blas_threads"]: r for r in case if r.get("f1_ms") is not None}.values():
        floors = {s.get("update", "plain"): s["floor_ms"] for s in case
                  if s.get("f1_ms") is not None and s["blas_threads"] == r["blas_threads"]}
        parts.append(("" if r["blas_threads"] is None else f"BLAS {r['blas_threads']}: ")
                     + f"forward {median(r['forward_ms'])} ms{_of_floor(r)}, per layer f1 {number(r['f1_ms'])} f2 "
                     f"{number(r['f2_ms'])} f3 {number(r['f3_ms'])} ms, bytes floor "
                     + ", ".join(f"{update} {number(floor)}" for update, floor in floors.items()) + " ms")
    return [parts[0]] + [fitted(f"  {part}") for part in parts[1:]]


def _of_floor(r):
    """`` (speed-up vs its floor 0.83x)``: the forward pass's own bytes floor over its median, where the record
    has one."""
    floor = r.get("forward_floor_ms")
    return f" (speed-up vs its floor {ratio(floor / r['forward_ms']['median'])})" if floor else ""


def table_rows(case, widths, graph=False):
    """One network's lines: its heading, then a row per record."""
    return network_lines(case) + [_line((label(r), r["k"], r["blas_threads"], f"refused: {r['refused']}"), widths[:4])
                                  if "refused" in r else _line(_cells(r, graph), widths) for r in case]


def table_foot(graph):
    """The legend under the table, with the graph column's when ``graph``, else the floor's."""
    return fitted(TABLE_FOOT + ("; [graph]: the step as a graph; graph vs eager: the step vs the same eager step"
                                if graph else "; step vs floor: the step vs its own bytes floor (1: at the floor)"))


def _line(cells, widths):
    first, *rest = cells
    return "  ".join([str(first).ljust(widths[0]), *(str(c).rjust(w) for c, w in zip(rest, widths[1:]))]).rstrip()


def _cells(r, graph):
    last = ratio(r.get("graph_speedup")) if graph else ratio(r.get("floor_speedup"))
    return (label(r), r["k"], "-" if r["blas_threads"] is None else r["blas_threads"], median(r["step_ms"]),
            median(r["backward_ms"]), percent(r["predicted_saving"]), percent(r["measured_saving"]),
            ratio(r["backward_speedup"]), ratio(r["step_speedup_vs_best_sequential"]), last)

