"""The recurrent network's benchmark: rows for every schedule by its name in ``tools.schedules``, with its
speed-up over BPTT, PyTorch's nn.RNN beside them, a budget that skips what would take too long, and the
profiling script's JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leapfrog_gpu.tools.bench import rnn as bench_rnn
from leapfrog_gpu.tools.schedules import schedule_names

ROOT = Path(__file__).resolve().parent.parent


def test_measure_gives_a_row_per_schedule_with_its_speedup_over_bptt():
    rows = bench_rnn.measure(4, 8, 2, L=4, repeats=2, max_gflop=1e-4)
    by_name = {row["schedule"]: row for row in rows}
    assert list(by_name) == ["bptt", "leapfrog", "wavefront", "timescan", "naumov-rnn"] == list(schedule_names("rnn"))
    assert by_name["bptt"]["speedup"] == 1.0 and by_name["bptt"]["rounds"] == 16
    for row in rows[1:-1]:
        assert row["speedup"] == by_name["bptt"]["median_s"] / row["median_s"]  # > 1: faster than BPTT
    assert by_name["wavefront"]["rounds"] == 9 and by_name["timescan"]["rounds"] == 8
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


def test_the_command_prints_its_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = bench_rnn.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "4", "--batch", "1,2",
                             "--repeats", "1", "--no-torch", "--json", str(out)])
    printed = capsys.readouterr().out
    assert status == 0 and printed.startswith("\n".join(bench_rnn.table_head()) + "\n")
    assert printed.count("\n") == 3 + 2 * 5 + 1  # the head, 5 rows a network, the line saying PyTorch was skipped
    assert len(json.loads(out.read_text())["rows"]) == 10


def test_the_command_refuses_a_bad_option_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        bench_rnn.main(["--layers", "2"])
    assert stop.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_leapfrog_bench_model_rnn_runs_the_rnn_benchmark(capsys):
    from leapfrog_gpu.tools.bench import command as bench

    assert bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "3", "--batch", "1",
                       "--repeats", "1", "--no-torch"]) == 0
    assert capsys.readouterr().out.startswith("\n".join(bench_rnn.table_head()))
