"""The recurrent network's benchmark: rows for every schedule against BPTT, PyTorch's nn.RNN beside them,
a budget that skips what would take too long, and the profiling script's JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leapfrog_gpu.tools import bench_rnn

ROOT = Path(__file__).resolve().parent.parent


def test_measure_gives_a_row_per_schedule_with_its_ratio_to_bptt():
    rows = bench_rnn.measure(4, 8, 2, L=4, repeats=2, max_gflop=1e-4)
    by_name = {row["schedule"]: row for row in rows}
    assert list(by_name)[:5] == list(bench_rnn.schedules(2))
    assert by_name["bptt"]["ratio"] == 1.0 and by_name["bptt"]["rounds"] == 16
    assert by_name["wavefront"]["rounds"] == 9 and by_name["time-scan"]["rounds"] == 8
    assert by_name["naumov-rnn"]["refused"].startswith("skipped: ")  # 4e-4 GFLOP over a budget of 1e-4
    for row in rows:
        assert bench_rnn.format_row(row).startswith("   4     8   2  ")


def test_pytorch_nn_rnn_is_timed_on_the_same_network():
    torch = pytest.importorskip("torch", reason="the PyTorch anchor needs torch (pip install torch==2.13.0)")
    rows = bench_rnn.measure(4, 6, 1, repeats=1, torch=torch)
    assert rows[-1]["schedule"] == "torch nn.RNN" and rows[-1]["median_s"] > 0


def test_the_profiling_script_writes_its_json(tmp_path):
    out = tmp_path / "rnn.json"
    done = subprocess.run([sys.executable, str(ROOT / "profiling" / "rnn_bench.py"), "--N", "3", "--tau", "4,5",
                           "--B", "1", "--repeats", "1", "--repeats-long", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert {row["tau"] for row in report["rows"]} == {4, 5} and report["meta"]["threads"] == 1
    assert "naumov-rnn" in done.stdout
