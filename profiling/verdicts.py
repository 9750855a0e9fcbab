"""The verdicts of ``leapfrog-bench``'s records against the project's targets: graph mode's (``--graph``, set for
an H200), the one-pass step's against PyTorch and its bytes floor (``--one-pass``, set for the CPU), and each
optimizer's best own step against torch.optim's (``--optimizer``); each ratio with its target, met or NOT MET.
``bench_table.py`` prints them under each run's table; on its own, those of the last run in a file.

    python profiling/verdicts.py profiling/results/device_check_.../bench.jsonl
"""

import sys

from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench.mlp import label
from leapfrog_gpu.tools.cli import Parser


def verdicts(command, records):
    """The verdicts that the run ``command`` (its header's) asks for, on its ``records``, as lines of text."""
    timed = [r for r in records if "refused" not in r]
    sgd = [r for r in timed if r.get("optimizer", "sgd") == "sgd"]  # the targets of graph mode and one-pass are SGD's
    lines = [graph_verdicts(sgd), given(command, "--one-pass") and floor_verdicts(sgd),
             given(command, "--optimizer") and optimizer_verdicts(timed)]
    return "\n".join(text for text in lines if text)


def given(command, option):
    """Whether the run's ``command`` gives ``option``, as ``--option``, ``--option value`` or ``--option=value``."""
    return any(word == option or word.startswith(f"{option}=") for word in command.split())


GRAPH_TARGETS = {"torch-autograd": 3.0, "torch-cuda-graph": 1.5, "sequential": 1.3}
"""The GPU targets of graph mode (H200, N = 1024, L = 32, B = 32, float32): the fastest graph-mode
Leapfrog step at least this many times faster than each of these steps; and within 2x of the floor."""
FLOOR_TARGET = 2.0


def graph_verdicts(records):
    """Per network, the fastest graph-mode leapfrog step against the targets' baselines and the floor."""
    lines = ["graph mode against its GPU targets (set for an H200 at N=1024 L=32 B=32 float32):"]
    for key in dict.fromkeys((r["N"], r["L"], r["B"]) for r in records):
        case = [r for r in records if (r["N"], r["L"], r["B"]) == key]
        ours = [r for r in case if r.get("graph") and r["schedule"] == "leapfrog"]
        if not ours:
            continue
        best = min(ours, key=lambda r: r["step_ms"]["median"])
        ms = best["step_ms"]["median"]
        parts = [f"{label(best)} k={best['k']} at N={key[0]} L={key[1]} B={key[2]}: step {ms:.4g} ms"]
        for name, target in GRAPH_TARGETS.items():
            base = [r for r in case if r["schedule"] == name and (r.get("graph") or name.startswith("torch"))]
            if base:
                times = min(r["step_ms"]["median"] for r in base) / ms
                parts.append(f"{times:.2f}x vs {name}{'[graph]' if name == 'sequential' else ''} "
                             f"(target >= {target}x{'' if times >= target else ', NOT MET'})")
            else:
                parts.append(f"{name}: not measured")
        floor = best["floor_ms"]
        parts.append(f"{ms / floor:.2f}x the bytes floor {floor:.4g} ms (target <= {FLOOR_TARGET}x"
                     f"{'' if ms / floor <= FLOOR_TARGET else ', NOT MET'})")
        lines.append("; ".join(parts))
    return "\n".join(lines) if len(lines) > 1 else ""


CPU_TARGETS = {1: (1.5, 1.3), "many": (1.2, None)}
"""The CPU targets of the one-pass step, by B (1, or more): the best step at least this many times faster
than PyTorch's best eager step, and within this many times its own bytes floor (None: compute-bound)."""
TORCH_EAGER = ("torch-autograd", "torch-sgd-foreach", "torch-sgd-fused")


def floor_verdicts(records):
    """Per network, our best eager step against PyTorch's best eager step and its own bytes floor, and
    against ``torch.compile``'s step where measured, each ratio with its target, met or NOT MET."""
    lines = ["the best step against PyTorch and its bytes floor (targets set for the CPU at N=1024 L=16):"]
    for key in dict.fromkeys((r["N"], r["L"], r["B"]) for r in records):
        case = [r for r in records if (r["N"], r["L"], r["B"]) == key]
        ours = [r for r in case if not r["schedule"].startswith("torch") and not r.get("graph")]
        best = min(ours, key=lambda r: r["step_ms"]["median"])
        ms, (speedup, within) = best["step_ms"]["median"], CPU_TARGETS[1 if key[2] == 1 else "many"]
        parts = [f"N={key[0]} L={key[1]} B={key[2]}: {label(best).rstrip('*')} k={best['k']} {ms:.4g} ms"]
        torch = [r for r in case if r["schedule"] in TORCH_EAGER]
        if torch:
            anchor = min(torch, key=lambda r: r["step_ms"]["median"])
            times = anchor["step_ms"]["median"] / ms
            parts.append(f"{times:.2f}x as fast as {anchor['schedule']} {anchor['step_ms']['median']:.4g} ms (target "
                         f">= {speedup}x{'' if times >= speedup else ', NOT MET'})")
        compiled = [r["step_ms"]["median"] for r in case if r["schedule"] == "torch-compile"]
        if compiled:  # its fastest thread count
            parts.append(f"{min(compiled) / ms:.2f}x as fast as torch-compile {min(compiled):.4g} ms")
        floor = best["floor_ms"]
        verdict = "" if within is None else f" (target <= {within}x{'' if ms / floor <= within else ', NOT MET'})"
        parts.append(f"{ms / floor:.2f}x its bytes floor {floor:.4g} ms{verdict}")
        lines.append("; ".join(parts))
    return "\n".join(lines) if len(lines) > 1 else ""  # no SGD step timed: no heading either


OPTIMIZER_TARGETS = {("adam", 1): 1.5, ("adam", "many"): 1.2, ("sgd", 1): 1.5}
"""The CPU targets of ``--optimizer`` (set at N = 1024, L = 16 for Adam, N = 256, L = 16 for SGD), by
optimizer and B (1, or more): the best own step at least this many times faster than PyTorch's best step
by torch.optim's same optimizer."""


def optimizer_verdicts(records):
    """Per network and optimizer, the best own step against PyTorch's best step of the same optimizer, with
    its target where one is set, met or NOT MET."""
    lines = ["the best own step against PyTorch's best step by the same optimizer:"]
    for key in dict.fromkeys((r["N"], r["L"], r["B"], r["optimizer"]) for r in records):
        case = [r for r in records if (r["N"], r["L"], r["B"], r["optimizer"]) == key and "refused" not in r]
        ours = min((r for r in case if not r["schedule"].startswith("torch")), key=lambda r: r["step_ms"]["median"])
        torch = [r for r in case if r["schedule"].startswith(("torch-autograd", f"torch-{key[3]}"))]
        if not torch:
            continue
        anchor = min(torch, key=lambda r: r["step_ms"]["median"])
        times, target = anchor["step_ms"]["median"] / ours["step_ms"]["median"], OPTIMIZER_TARGETS.get(
            (key[3], 1 if key[2] == 1 else "many"))
        verdict = "" if target is None else f" (target >= {target}x{'' if times >= target else ', NOT MET'})"
        lines.append(f"N={key[0]} L={key[1]} B={key[2]} {key[3]}: {label(ours).rstrip('*')} k={ours['k']} blas="
                     f"{ours['blas_threads']} {ours['step_ms']['median']:.4g} ms, {times:.2f}x as fast as "
                     f"{anchor['schedule']} threads={anchor['blas_threads']} {anchor['step_ms']['median']:.4g} ms"
                     f"{verdict}")
    return "\n".join(lines)


def main():
    from bench_table import read_runs

    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a file written by leapfrog-bench --json or --jsonl")
    run, records = read_runs(parser, parser.parse_args().path)[-1]
    judged = verdicts(run["command"], records)
    if judged:
        print(judged)


if __name__ == "__main__":
    sys.exit(guarded(main, "verdicts.py"))
