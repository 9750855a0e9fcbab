"""One convention for every ratio the benches print: a speed-up, the baseline's median time over the row's
(> 1: faster), in columns titled "speed-up ... vs <baseline>" under a header that says which way they
point. Each printed cell is checked against the medians of the same run's JSON (the DAG's benchmark's:
tests/tools/test_dag_bench.py)."""

import json
import sys
from pathlib import Path

import pytest

from helpers import render_table, run_bench
from leapfrog_gpu.tools.bench import command as bench, rnn as bench_rnn, runner

FASTER = "(> 1: faster)"


def speedup(base, row):
    """How the benches print a speed-up: ``1.25x``."""
    return runner.ratio(base / row)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "r.json"
    out = run_bench(["--backend", "numpy", "--sizes", "12", "--layers", "4", "--batch", "2", "--k", "2",
                     "--blas-threads", "1,2", "--repeats", "2", "--warmup", "1", "--no-torch", "--json", str(path)])
    return out, json.loads(path.read_text())


def test_the_mlp_table_says_its_columns_are_speed_ups_and_which_way_they_point(mlp):
    out, _ = mlp
    above, top, bottom = out.splitlines()[:3]
    assert above.strip() == f"speed-up {FASTER}" and len(above) == len(bottom)  # over the last columns
    assert top.split()[-3:] == ["bwd", "step", "step"] and bottom.endswith("vs seq  vs best  vs floor")
    assert "speed-up vs X: X's median time over the row's (> 1: faster)" in " ".join(out.split())


def test_the_mlp_cells_are_the_baselines_time_over_the_rows(mlp):
    out, report = mlp
    rows = [line.split() for line in out.splitlines() if line.startswith(("sequential", "leapfrog"))]
    assert len(rows) == len(report["records"]) == 4
    best = min((r for r in report["records"] if r["schedule"] == "sequential"), key=lambda r: r["step_ms"]["median"])
    for cells, r in zip(rows, report["records"]):
        seq = next(s for s in report["records"] if s["schedule"] == "sequential"
                   and s["blas_threads"] == r["blas_threads"])
        assert cells[-3:] == [speedup(seq["backward_ms"]["median"], r["backward_ms"]["median"]),
                              speedup(best["step_ms"]["median"], r["step_ms"]["median"]),
                              speedup(r["floor_ms"], r["step_ms"]["median"])]


def test_the_markdown_table_names_every_ratio_column_a_speed_up(mlp, tmp_path):
    out, rows = render_table(mlp[1], tmp_path)
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("| N |"))
    assert lines[lines.index(header) - 2] == f"Speed-up vs X: X's median time over the row's {FASTER}."
    columns = [title.strip() for title in header.strip("|").split("|")]
    assert columns[13:] == ["bwd speed-up vs seq", "bwd speed-up vs best seq", "step speed-up vs best seq",
                            "step speed-up vs floor"]
    r = mlp[1]["records"][1]
    cells = [cell.strip() for cell in rows[1].strip("|").split("|")]
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "profiling"))
    from markdown_cells import ratio

    assert cells[-1] == ratio(r["floor_ms"] / r["step_ms"]["median"])


def test_the_rnn_table_gives_bptts_time_over_each_rows(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "4", "--batch", "1",
                       "--repeats", "2", "--no-torch", "--json", str(path)]) == 0
    title, header, _, *lines, skipped = capsys.readouterr().out.splitlines()
    assert title.startswith("speed-up vs bptt: BPTT's median time over the row's") and title.endswith(FASTER)
    assert "speed-up vs bptt" in header and "PyTorch" in skipped
    rows = json.loads(path.read_text())["rows"]
    base = {row["schedule"]: row["median_s"] for row in rows if row["schedule"] in ("bptt", "step bptt")}
    assert len(lines) == len(rows) == 10  # five schedules, their backward passes and their steps
    for line, row in zip(lines, rows):
        name, (_, _, faster, *_) = line[15:41].strip(), line[41:].split()
        bptt = base["step bptt" if name.startswith("step ") else "bptt"]
        assert name == row["schedule"] and faster == speedup(bptt, row["median_s"])


def test_a_speed_up_far_below_1_keeps_two_significant_digits():
    assert [runner.ratio(v) for v in (12.345, 1.0, 0.25, 0.0123, 0.000712)] == [
        "12.35x", "1.00x", "0.25x", "0.012x", "0.00071x"]
    assert runner.ratio(0.09) == "0.090x"  # two significant digits shown
    assert bench_rnn.TITLE.endswith(FASTER)
