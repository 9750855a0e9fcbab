"""Render a ``leapfrog-bench --json`` file as the Markdown table of the README's Performance section.

    python profiling/bench_table.py profiling/results/bench_cpu.json
"""

import argparse
import json


def cell(summary):
    if summary is None:
        return "–"
    digits = 2 if summary["median"] < 10 else 1
    return f"{summary['median']:.{digits}f} [{summary['p20']:.{digits}f}–{summary['p80']:.{digits}f}]"


def ratio(value):
    return "–" if value is None else f"{value:.2f}×"


def percent(value):
    return "–" if value is None else f"{value:.0%}"


def number(value):
    return "–" if value is None else f"{value:.3f}"


def table(records):
    graph = any(r.get("graph") for r in records)  # then a last column: a graph step against its eager one
    rows = ["| N | L | B | schedule | k | BLAS | step ms | backward ms | f1 | f2 | f3 | pred. | meas. | bwd ×seq "
            "| bwd ×best seq | step ×best seq |" + (" graph ×eager |" if graph else ""),
            "|" + "---:|" * (16 + graph)]
    for r in records:
        name = ("auto → " if r.get("auto") else "") + r["schedule"] + ("+fused" if r.get("fused") else "")
        name += " graph" if r.get("graph") and not r["schedule"].startswith("torch") else ""
        name += " (best seq)" if r.get("best_sequential") else ""
        rows.append("| " + " | ".join([
            str(r["N"]), str(r["L"]), str(r["B"]), name, str(r.get("k", 0)), str(r.get("blas_threads") or "–"),
            cell(r["step_ms"]), cell(r["backward_ms"]), number(r.get("f1_ms")), number(r.get("f2_ms")),
            number(r.get("f3_ms")), percent(r.get("predicted_saving")), percent(r.get("measured_saving")),
            ratio(r.get("backward_speedup")), ratio(r.get("backward_speedup_vs_best_sequential")),
            ratio(r.get("step_speedup_vs_best_sequential")),
            *([ratio(r.get("graph_speedup"))] if graph else []),
        ]) + " |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="a file written by leapfrog-bench --json")
    with open(parser.parse_args().json, encoding="utf-8") as file:
        run = json.load(file)
    labels = {"cores": "{} cores", "python": "Python {}", "numpy": "NumPy {}", "cupy": "CuPy {}"}
    machine = ", ".join(labels.get(key, "{}").format(value) for key, value in run["machine"].items())
    print(f"Command: `{run['command']}`. Date: {run['date'][:10]}. Machine: {machine}.\n")
    print(table(run["records"]))


if __name__ == "__main__":
    main()
