"""The text of kernels/README.md: the floors of ``kernel_traffic.py``, then every kernel before and after the
rank-B update in rows, then ``kernel_model.py``'s table and graph step on an H100 SXM and an H200.

"Before" is ``BEFORE``: the model as it was (the data path of the hot loop only, the rank update in tiles) on
the kernels as they were, at the commit it names, for the same cards and shapes.
"""

import json
import textwrap
from pathlib import Path

import kernel_model as km
import kernel_traffic as traffic
from card import H100, H200

BEFORE = Path(__file__).resolve().parent / "results" / "kernel_model_before_rows_cpu_2026-12-05.json"


def table(rows):
    """Markdown table of the model's ``rows``."""
    lines = ["| kernel | N | B | regs | smem | blocks/SM | warps/SM | issue | stages | units | rounds HBM+L2 "
             "| LDG 32/64/128 | cyc/FMA | memory us | FMA us | L2 us | bound | predicted us | fraction |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['N']} | {r['B']} | {r['registers']} | {r['shared_bytes']} | "
            f"{r['blocks_per_sm']} ({r['occupancy_limit']}) | {r['warps_per_sm']} | {r['issue']:.2f} | "
            f"{r['stages']} | {r['units']} | {r['rounds_hbm']}+{r['rounds_l2']} | "
            f"{r['ldg_32']}/{r['ldg_64']}/{r['ldg_128']} | {r['shared_cycles_per_fma']:g} | "
            f"{r['memory_us']:.3g} | {r['fma_us']:.3g} | {r['l2_us']:.3g} | {r['bound']} | {r['predicted_us']:.3g} | "
            f"{r['predicted_fraction']:.2f} |")
    return "\n".join(lines)


def before_after(tables, before):
    """Markdown table of every kernel at every shape, before and after ("-": a kernel added since), on each card,
    with the reason of each still under ``km.TARGET`` after."""
    cards = list(tables)
    head = " | ".join(f"{card.name} {when}" for card in cards for when in ("before", "after"))
    lines = [f"| kernel | N | B | {head} | why under {km.TARGET:.0%} after |",
             "|---|---:|---:|" + "---:|" * (2 * len(cards)) + "---|"]
    old = {card: {(r["kernel"], r["N"], r["B"]): r for r in before[card.name]["kernels"]} for card in cards}
    for i, r in enumerate(tables[cards[0]]):
        cells, reasons = [], []
        for card in cards:
            new = tables[card][i]
            was = old[card].get((new["kernel"], new["N"], new["B"]))
            cells += ["-" if x is None else f"{x['predicted_us']:.3g} ({x['predicted_fraction']:.2f})"
                      for x in (was, new)]
            if new["reason"] and new["reason"] not in reasons:
                reasons.append(new["reason"])
        lines.append(f"| {r['kernel']} | {r['N']} | {r['B']} | {' | '.join(cells)} | {' / '.join(reasons)} |")
    return "\n".join(lines)


def steps(rows, card, before):
    """Markdown table of the graph step at each of ``km.STEP_BATCHES``, before and after."""
    lines = ["| B | Sequential() us | Sequential() us before | Leapfrog(k) us | Leapfrog(k) us before | bytes floor us "
             "| Leapfrog over floor |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    was = {s["B"]: s for s in before[card.name]["steps"]}
    for s in (km.step(rows, card, B=batch) for batch in km.STEP_BATCHES):
        lines.append(f"| {s['B']} | {s['sequential_us']:.0f} | {was[s['B']]['sequential_us']:.0f} | "
                     f"{s['leapfrog_us']:.0f} | {was[s['B']]['leapfrog_us']:.0f} | {s['bytes_floor_us']:.0f} | "
                     f"{s['leapfrog_over_floor']:.1f}x |")
    return "\n".join(lines)


def readme(tables=None):
    """kernels/README.md (``tables``: ``{card: km.records(card=card)}``, computed where None)."""
    tables = {card: km.records(card=card) for card in (H100, H200)} if tables is None else tables
    recorded = json.loads(BEFORE.read_text())
    before = recorded["cards"]
    text = [traffic.readme(), "## Before and after (float32)", "", textwrap.fill(
        "Each kernel's predicted time in us and, in brackets, the fraction of its bound it reaches (below), "
        f"before the rank-B update summed nabla_w in rows (`{BEFORE.relative_to(BEFORE.parents[2])}`: the "
        f"model and the kernels of commit {recorded['commit']}) and after. At B up to 64 (32 in float64) each "
        "of its threads holds 8 columns of a by 16 samples in registers and its 8 warps sum and store a row of "
        "nabla_w each, an octet of rows after another, so that an SM's stores overlap the sums of its next "
        "rows; before, each block summed a 64 x 64 tile and stored it at the end, one wave of tiles at "
        "N = 1024. The model changed with it: the cycles of the data path a thread spends outside its hot loop "
        "(its first copies and loads, the meeting of its sums) now count, spread over the hot loop's trips, so "
        "a before that looks better than its after is the old model's, not the old kernel's (the chain GEMMs "
        "are the same kernels). The last column says why each kernel still under "
        f"{km.TARGET:.0%} is, from the terms of its bound. For the chain GEMMs at N = 1024 the first round trip "
        "to HBM and the FMAs' trips through the data path (8 loads of w and 8 of a_prev for 64 FMAs, then the "
        "64 slices of each output's sum meeting) come to more than the ideal over 0.7 with no re-read from L2 "
        "at all. A split of their reduction over more blocks (split-K) would take the re-reads away, not the "
        "first round trip nor the sums' meeting: it moves part of that into a fixup after the last FMA (the "
        "partial sums written, a fence, a counter, their read: round trips to L2).", 100,
        break_on_hyphens=False),
        "", before_after(tables, before), ""]
    for card, rows in tables.items():
        text += [f"## Model on an {card.name} (float32)", "", textwrap.fill(
            "From the sm_90 code NVRTC compiles and `cuobjdump` reads, with each kernel's launch shape: the "
            "occupancy, the warps an SM holds and the issue rate they give (over the "
            f"{km.FULL_ISSUE_WARPS} an SM needs, or {km.TILED_ISSUE_WARPS} for a register-tiled kernel), the "
            "stages of copies in flight and the units a block slot works through (pipelined kernels), and "
            "lower bounds on the time: the bytes at the bandwidth, the dependent round trips to memory at "
            "their latency, the FMAs, the cycles of the L1/shared-memory data path a thread spends per FMA "
            "(its hot loop's, and the rest's spread over the loop's trips), "
            "the re-reads from L2, and the pipeline (the first load, the units at the pace of their slowest "
            "part, the last one's compute and stores); the largest is the bound. Fraction: the ideal time "
            "(memory, FMA, or one round trip to L2) over the prediction. Assumptions are in "
            f"`profiling/kernel_model.py`: {card.bandwidth / 1e12:.2f} TB/s, {km.HBM_LATENCY * 1e6:.2f} us a round "
            f"from HBM, {km.L2_LATENCY * 1e6:.2f} us from L2, {km.L2_BANDWIDTH / 1e12:.0f} TB/s for what blocks read "
            f"again from L2, {card.clock / 1e9:.2f} GHz, {card.sms} SMs. Compiled with NVRTC {km.nvrtc_version()}. "
            "Not yet checked against a measurement on the device.", 100, break_on_hyphens=False),
            "", table(rows), "", textwrap.fill(
                f"Graph step, N = {km.HEADLINE['N']}, L = {km.HEADLINE['L']}, float32, unfused (gradients and "
                f"updates one kernel a layer each): the kernels above plus {km.NODE * 1e6:.0f} us a node (not yet "
                f"measured), the chain {km.CONTENTION:.0%} slower beside the workers in Leapfrog(k), and the bytes "
                "floor (`traffic.step_bytes`) at the same bandwidth; before: as above:", 100,
                break_on_hyphens=False), "",
            steps(rows, card, before), ""]
    return "\n".join(text)
