"""leapfrog-bench on tiny sizes: every record field, the table, the JSON, the plot, and its CLI errors."""

import argparse
import contextlib
import errno
import json
import os
import re
import shlex
import stat
import struct
import sys

import pytest

from helpers import STANDIN_ORDERS, install_standin, render_table, run_bench
from no_gpu_cupy import CUDA_ANSWER
from leapfrog_gpu.tools.bench import command as bench, measure as bench_measure, mlp as bench_mlp
from leapfrog_gpu.tools.bench import plot as bench_plot, torch_anchor, traffic
from leapfrog_gpu.backends import cuda_available, get_backend, host_blas
from leapfrog_gpu.tools.schedules import schedule_names
from leapfrog_gpu.core.torch_io import INSTALL

pytestmark = pytest.mark.slow

FIELDS = ("backend", "device", "dtype", "N", "L", "B", "schedule", "k", "fused", "blas_threads", "step_ms",
          "backward_ms", "f1_ms", "f2_ms", "f3_ms", "predicted_saving", "measured_saving")
TINY = ["--backend", "numpy", "--sizes", "24,40", "--layers", "3", "--batch", "1,5", "--k", "1,2",
        "--blas-threads", "1,2", "--repeats", "3", "--warmup", "1"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    argv = TINY + ["--no-torch", "--json", str(folder / "r.json"), "--plot", str(folder / "r.png")]
    stdout = run_bench(argv)
    return stdout, json.loads((folder / "r.json").read_text()), (folder / "r.png").read_bytes()


def test_records_hold_every_field_for_every_configuration(report):
    records = report[1]["records"]
    # 2 sizes x 2 batches x (sequential, leapfrog k=1, k=2) x BLAS threads 1 and 2
    assert len(records) == 2 * 2 * 3 * 2
    for r in records:
        for field in FIELDS:
            assert field in r, field
        for timing in ("step_ms", "backward_ms"):
            assert r[timing]["p20"] <= r[timing]["median"] <= r[timing]["p80"]
            assert r[timing]["median"] > 0
        assert r["backend"] == "numpy" and r["dtype"] == "float32" and r["L"] == 3 and r["blas_threads"] in (1, 2)
        assert min(r["f1_ms"], r["f2_ms"], r["f3_ms"]) > 0
    assert {(r["schedule"], r["k"]) for r in records} == {("sequential", 0), ("leapfrog", 1), ("leapfrog", 2)}


def test_prediction_and_savings_follow_the_model_and_the_baseline(report):
    records = report[1]["records"]
    for r in records:
        f = r["f1_ms"] + r["f2_ms"] + r["f3_ms"]
        assert r["predicted_saving"] == pytest.approx((1 - 1 / r["k"]) * r["f3_ms"] / f if r["k"] else 0.0)
        seq = next(s for s in records if (s["N"], s["B"], s["blas_threads"], s["schedule"])
                   == (r["N"], r["B"], r["blas_threads"], "sequential"))
        expected = (seq["backward_ms"]["median"] - r["backward_ms"]["median"]) / (
            r["forward_ms"]["median"] + seq["backward_ms"]["median"])
        assert r["measured_saving"] == pytest.approx(expected)
        best = next(s for s in records if s["best_sequential"] and (s["N"], s["B"]) == (r["N"], r["B"]))
        assert r["step_speedup_vs_best_sequential"] == pytest.approx(best["step_ms"]["median"] / r["step_ms"]["median"])
        assert r["step_speedup"] == pytest.approx(seq["step_ms"]["median"] / r["step_ms"]["median"])
        assert r["floor_ms"] == pytest.approx(traffic.step_bytes([r["N"]] * 3, r["B"], 4) / (r["copy_gbps"] * 1e6))
    assert sum(r["best_sequential"] for r in records) == 4  # one per (N, B)


def test_table_prints_one_row_per_record(report):
    stdout, data, _ = report
    rows = _rows(stdout)
    assert len(rows) == len(data["records"])
    assert [(n, b, row[0]) for n, _, b, row in rows] == [(r["N"], r["B"], bench_mlp.label(r))
                                                          for r in data["records"]]
    assert "PyTorch anchor skipped (--no-torch)" in stdout
    assert data["command"].startswith("leapfrog-bench --backend numpy") and data["machine"]["cores"] >= 1


def test_fused_schedules_in_records_and_table():
    stdout = run_bench(["--backend", "numpy", "--sizes", "12", "--layers", "4", "--batch", "3", "--k", "2",
                        "--blas-threads", "1", "--repeats", "2", "--warmup", "1", "--no-torch", "--fused"])
    assert "sequential+fused" in stdout and "leapfrog+fused" in stdout


def test_schedules_by_name_include_naumov():
    stdout = run_bench(["--backend", "numpy", "--sizes", "9", "--layers", "5", "--batch", "2", "--k", "2",
                        "--schedule", "leapfrog,naumov-scan,naumov-jacobi", "--blas-threads", "1", "--repeats", "2",
                        "--warmup", "1", "--no-torch"])
    names = [row[0] for *_, row in _rows(stdout)]
    assert names == ["sequential*", "leapfrog", "naumov-scan", "naumov-jacobi"]


def test_plot_is_a_png(report):
    png = report[2]
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 300 and height > 200


def test_the_plot_takes_one_row_per_k_of_a_configuration():
    """A pass is the same under each optimizer and with the one-pass update: the figure takes the first optimizer's
    plain rows, one dot per k of each (L, B, BLAS threads), not four alike in one colour."""
    rows = [{"schedule": name, "k": k, "graph": False, "one_pass": one_pass, "optimizer": optimizer}
            for optimizer in ("sgd", "adam") for one_pass in (False, True) for name, k in
            (("sequential", 0), ("leapfrog", 1), ("leapfrog", 2))]
    rows.append({**rows[1], "graph": True})
    assert bench_plot.plotted(rows) == [rows[1], rows[2]]


def test_torch_anchor_in_the_same_table(capsys):
    pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    stdout = run_bench(["--backend", "numpy", "--sizes", "16", "--layers", "3", "--batch", "2", "--k", "2",
                        "--blas-threads", "1", "--repeats", "2", "--warmup", "1"])
    row = next(line for line in stdout.splitlines() if "torch-autograd" in line)
    assert row.split()[-1].endswith("x")  # the step's speedup against the best sequential configuration


def test_torch_anchor_computes_our_gradients():
    """PyTorch's step is of the network's own module (``to_torch()``): its autograd gradients of the batch-mean cost
    are ours (float64), and its step is timed."""
    torch = pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    from leapfrog_gpu import MLP
    from leapfrog_gpu.tools.bench import runner, torch_anchor

    x, y = bench_measure.host_batch([5, 7, 3], 4, "float64")
    with MLP([5, 7, 3], dtype="float64", backend="numpy") as net:
        anchor = torch_anchor.Step(net.to_torch(), x, y, bench_measure.OPTIMIZERS["sgd"])
        anchor.backward(anchor.loss())
        nabla_b, nabla_w = net.backprop(x, y)
    ours = [g / 4 for pair in zip(nabla_w, nabla_b) for g in pair]  # of the mean over the batch
    assert len(anchor.params) == len(ours) == 4
    for p, g in zip(anchor.params, ours):
        assert float((p.grad - torch.from_numpy(g)).abs().max()) < 1e-12
    with get_backend("numpy") as backend:
        step = runner.interleaved(backend, {"torch": anchor.step}, 2)["torch"]["ms"]
    backward = anchor.backward_ms(2)
    assert step.shape == backward.shape == (2,) and (step > 0).all() and (backward > 0).all()


@pytest.mark.parametrize("name, settles", [("numpy", True), ("cupy", False)])
def test_a_repeat_is_timed_right_after_one_of_its_own_on_the_host_only(monkeypatch, name, settles):
    """On the host each timed repeat follows an untimed call of the same row (a thread's after-effects stay
    with its own row); on a GPU the rows simply take turns (a device check's minutes are counted)."""
    from leapfrog_gpu.backends import timing
    from leapfrog_gpu.tools.bench import runner

    calls, times = [], iter(range(1, 100))
    monkeypatch.setattr(timing, "_host_time", lambda backend, fn: (fn(), next(times))[1])
    monkeypatch.setattr(timing, "_device_time", lambda backend, fn: (fn(), next(times))[1])
    backend = argparse.Namespace(name=name, synchronize=lambda: None)
    runner.interleaved(backend, {row: lambda row=row: calls.append(row) for row in "ab"}, 2, warmup=1)
    settled = ["a", "a", "b", "b", "b", "b", "a", "a"]  # rounds start one row later
    assert calls == ["a", "b"] + (settled if settles else ["a", "b", "b", "a"])


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "0"], "every size must be >= 1"),
    (["--sizes", "a,b"], "--sizes"),
    (["--sizes", "8,100000000000000000000"], "argument --sizes: must be at most 2147483647; got '8,1000"),
    (["--batch", "100000000000000000000"], "argument --batch: must be at most 2147483647"),
    (["--layers", "1"], "layer count must be >= 2"),
    (["--k", "0"], "every worker stream count must be >= 1"),
    (["--k", "1,auto"], "worker stream counts must be a comma-separated list of integers; got '1,auto'"),
    (["--k", "2,1,2"], "argument --k: give each worker stream count once; got '2,1,2', with 2 twice"),
    (["--blas-threads", "1,1"], "argument --blas-threads: give each BLAS thread count once; got '1,1', with 1 twice"),
    (["--sizes", "8,8"], "argument --sizes: give each size once; got '8,8', with 8 twice"),
    (["--schedule", "naumov"], "unknown MLP schedule 'naumov'; choose from sequential, leapfrog, naumov-scan, "
                               "naumov-jacobi"),
    (["--schedule", "leapfrog,leapfrog"], "--schedule: MLP schedule 'leapfrog' is named twice; name each once"),
    (["--optimizer", "adam,adam"], "argument --optimizer: optimizer 'adam' is named twice; name each once"),
    (["--repeats", "0"], "argument --repeats: must be an integer >= 1"),
    (["--dtype", "float16"], "invalid choice"),
    (["--json", "/nonexistent-folder/r.json"], "does not exist"),
    (["--jsonl", "/nonexistent-folder/r.jsonl"], "does not exist"),
    (["--json", "/"], "--json /: it is a folder; give a file's name"),
    (["--jsonl", "."], "--jsonl .: it is a folder; give a file's name"),
    (["--plot", "p.svg"], "--plot p.svg: the chart is written as PNG: give a name ending in .png"),
    (["--json", ""], "argument --json: must name a file or a folder; got ''"),
    (["--jsonl", ""], "argument --jsonl: must name a file or a folder; got ''"),
    (["--json", "same.json", "--jsonl", "./same.json"], "--json and --jsonl name one file, ./same.json: give each "
                                                        "its own"),  # the later wrote over the earlier, exit 0
    (["--json", "r.png", "--plot", "r.png"], "--json and --plot name one file, r.png: give each its own"),
    (["--json", "j" * 300 + ".json"], f"--json {'j' * 300}.json: its name is longer than the 255 bytes a file's"),
    (["--plot", "p" * 300 + ".png"], f"--plot {'p' * 300}.png: its name is longer than the 255 bytes a file's"),
    (["--plot", "p.png", "--schedule", "sequential"], "--plot draws the leapfrog schedule's speed-up against k: add "
                                                      "leapfrog to --schedule, or leave --plot out"),
    (["--model"], "argument --model: expected one argument"),
])
def test_cli_errors_exit_2_with_one_line(tmp_path, monkeypatch, capsys, argv, message):
    """After the options of a run of a second, which a bad option taken would be (in a folder of its own, where a
    refusal that fails writes its files)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "1", "--repeats", "1",
                    "--no-torch", "--quiet"] + argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("leapfrog-bench: error:") and message in err


@pytest.mark.parametrize("model", ["mlp", "rnn"])
def test_blas_threads_on_the_cupy_backend_are_refused_in_one_line(capsys, monkeypatch, model):
    """On the CuPy stand-in (a usable GPU) --blas-threads sets nothing: refused for either model, before anything is
    measured, not silently ignored (the RNN's took it)."""
    install_standin(monkeypatch, STANDIN_ORDERS[0])
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--model", model, "--backend", "cupy", "--sizes", "8", "--layers", "3", "--batch", "1",
                    "--repeats", "1", "--no-torch", "--quiet", "--blas-threads", "2"]
                   + ["--tau", "4"] * (model == "rnn"))
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == ""
    assert err == f"leapfrog-bench{' --model rnn' * (model == 'rnn')}: error: --blas-threads applies to the numpy " \
                  "backend only\n", err


@pytest.mark.parametrize("model", ["mlp", "rnn"])
def test_more_blas_threads_than_openblas_runs_are_refused_in_one_line(capsys, model):
    """OpenBLAS cuts a count above its MAX_THREADS to that: the rows would say a count that never ran."""
    most = host_blas.most_threads()
    if most is None:
        pytest.skip("no scipy-openblas32: no MAX_THREADS to read")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--model", model, "--backend", "numpy", "--sizes", "8", "--batch", "1", "--repeats", "1",
                    "--no-torch", "--quiet", "--blas-threads", str(most + 1)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert f"{most + 1} is more threads than this OpenBLAS runs (at most {most}, its build's MAX_THREADS" in err


@pytest.mark.parametrize("model, argv", [("mlp", ["--sizes", "2000000000", "--layers", "2", "--batch", "1"]),
                                         ("mlp", ["--sizes", "100000", "--layers", "2", "--batch", "2000000000"]),
                                         ("rnn", ["--sizes", "1000", "--tau", "2000000000", "--batch", "1"])])
def test_sizes_this_machine_cannot_hold_exit_2_with_one_line(capsys, model, argv):
    """NumPy's MemoryError, or its ValueError for an array beyond any address, said in one line."""
    assert bench.main(["--model", model, "--backend", "numpy", "--no-torch", "--repeats", "1", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("leapfrog-bench") and err.endswith(": ask for smaller sizes\n"), err
    assert "not enough memory (Unable to allocate" in err or "larger than this machine can address" in err


def test_memory_that_pytorch_cannot_allocate_exits_2_with_one_line(capsys, monkeypatch):
    """PyTorch says so by a RuntimeError from its allocator (torch.OutOfMemoryError on a GPU is one too): raised here
    by torch itself, as its anchor's step allocates more than any machine holds."""
    torch = pytest.importorskip("torch", reason=f"the PyTorch anchor needs torch ({INSTALL})")
    monkeypatch.setattr(torch_anchor.Step, "run", lambda self: torch.empty(2**60, dtype=torch.uint8))
    assert bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "1",
                       "--repeats", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("leapfrog-bench: error: not enough memory (") and \
        "can't allocate memory" in err and err.endswith("): ask for smaller sizes\n"), err


def test_a_plot_that_cannot_be_written_keeps_the_json_of_the_run(tmp_path, capsys, monkeypatch):
    """The plot is drawn last: a full disk there (exit 5) loses no measurement."""
    def full(records, path, about):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench_plot, "plot", full)
    json_path, png = tmp_path / "r.json", tmp_path / "r.png"
    assert bench.main([*TINY, "--no-torch", "--quiet", "--json", str(json_path), "--plot", str(png)]) == 5
    assert "--plot" in capsys.readouterr().err and not png.exists()
    assert {r["schedule"] for r in json.loads(json_path.read_text())["records"]} >= {"sequential", "leapfrog"}


@pytest.mark.parametrize("model", ["tree", "dag"])
def test_an_unknown_model_exits_2_with_one_line(model, capsys):
    """``dag`` among them: the DAG's benchmark is profiling/dag_bench.py, as ``--help`` says."""
    with pytest.raises(SystemExit) as stop:
        bench.main(["--model", model])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and f"invalid choice: '{model}'" in err
    assert "measured by python profiling/dag_bench.py" in " ".join(bench_mlp.parser().format_help().split())


@pytest.mark.skipif(cuda_available(), reason="checks the message given when no GPU is usable")
def test_cupy_without_gpu_is_a_cli_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "cupy"])
    assert exit_info.value.code == 2 and "use --backend numpy\n" in capsys.readouterr().err


def test_cupy_that_cannot_run_says_what_cuda_answered(cupy_without_gpu, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "cupy"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"leapfrog-bench: error: --backend cupy cannot run: {CUDA_ANSWER}; use --backend numpy\n")


@pytest.mark.parametrize("option", ["--plot"])
def test_plot_without_matplotlib_is_a_cli_error(capsys, monkeypatch, tmp_path, option):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "numpy", "--sizes", "24", "--layers", "3", "--batch", "1", option,
                    str(tmp_path / "r.png")])
    assert exit_info.value.code == 2
    # as docs/training.md says it, in a checkout
    assert f"{option} needs matplotlib: pip install -e '.[plot]'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("model, argv", [
    ("mlp", ["--sizes", "8", "--layers", "2", "--batch", "1", "--k", "2", "--warmup", "0", "--quiet"]),
    ("rnn", ["--sizes", "3", "--tau", "3", "--batch", "1"]),
])
def test_without_torch_every_bench_says_so_in_the_same_line_with_the_readmes_install_command(
        monkeypatch, capsys, model, argv):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert bench.main(["--model", model, "--backend", "numpy", "--repeats", "1", *argv]) == 0
    out, err = capsys.readouterr()
    # as docs/performance.md says it, in a checkout
    assert f"PyTorch anchor skipped ({INSTALL})" in out.splitlines()
    assert "torch" not in err


def test_the_plot_says_where_it_was_written(report):
    said = [line for line in report[0].splitlines() if line.startswith("plot: ")]
    assert len(said) == 1 and said[0].endswith("(the speed-up of a pass against k, measured and as the model predicts)")
    path = said[0].removeprefix("plot: ").split(" (")[0]
    assert path.endswith("r.png") and open(path, "rb").read() == report[2]


def test_json_lines_are_the_records_as_they_come(tmp_path):
    """--jsonl: the header line, then exactly the records of --json."""
    argv = ["--backend", "numpy", "--sizes", "24", "--layers", "4", "--batch", "3", "--k", "1,2", "--blas-threads", "1",
            "--repeats", "2", "--warmup", "1", "--no-torch", "--json", str(tmp_path / "r.json"), "--jsonl",
            str(tmp_path / "r.jsonl")]
    run_bench(argv)
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[0]["command"] == "leapfrog-bench " + " ".join(argv) and "machine" in lines[0]
    assert lines[1:] == records and len(records) == 3


def test_the_command_recorded_reads_back_as_the_arguments_given(tmp_path, monkeypatch):
    """A name with a space or a quote in it is quoted in the command recorded: the shell's reading of it
    (``shlex.split``) gives back the arguments, so that the run can be repeated from it."""
    monkeypatch.chdir(tmp_path)
    argv = ["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "2", "--repeats", "1",
            "--warmup", "0", "--no-torch", "--quiet", "--json", "my run.json", "--jsonl", "it's.jsonl"]
    run_bench(argv)
    command = json.loads((tmp_path / "my run.json").read_text())["command"]
    assert shlex.split(command) == ["leapfrog-bench", *argv], command
    assert json.loads((tmp_path / "it's.jsonl").read_text().splitlines()[0])["command"] == command


def test_json_lines_survive_a_killed_run(tmp_path):
    """Each network's records are on disk as soon as it is measured: a run killed later keeps them whole."""
    import subprocess
    import time

    path = tmp_path / "r.jsonl"
    run = subprocess.Popen([sys.executable, "-m", "leapfrog_gpu.tools.bench", "--backend", "numpy", "--sizes",
                            ",".join(map(str, range(8, 60))), "--layers", "3", "--batch", "2", "--k", "2",
                            "--blas-threads", "1", "--repeats", "2", "--warmup", "0", "--no-torch", "--jsonl", path])
    try:
        deadline = time.monotonic() + 120
        while (not path.exists() or len(path.read_text().splitlines()) < 5) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        run.kill()
        run.wait()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert "command" in lines[0] and len(lines) >= 5 and len(lines) < 1 + 2 * 52
    assert all(r["schedule"] in ("sequential", "leapfrog") for r in lines[1:])


def test_ctrl_c_ends_a_run_with_exit_130_and_one_line_and_keeps_what_it_measured(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the second of three networks is measured: the first one's rows are printed and in
    --jsonl, stderr has one line that says so (after the one with the time left), and nothing else is
    written."""
    _ctrl_c_at_the_second_network(monkeypatch)
    path = tmp_path / "r.jsonl"
    argv = ["--backend", "numpy", "--sizes", "8,9,10", "--layers", "3", "--batch", "2", "--k", "2", "--repeats", "1",
            "--warmup", "0", "--no-torch", "--jsonl", str(path), "--json", str(tmp_path / "r.json")]
    assert bench.main(argv) == 130
    out, err = capsys.readouterr()
    left, said = err.splitlines()
    assert re.fullmatch(r"leapfrog-bench: about \d+ s left for 2 more networks \(the first took [\d.]+ s\)", left)
    assert said == f"leapfrog-bench: interrupted with 1 of 3 networks measured; their lines are in {path}"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert "command" in lines[0] and {r["N"] for r in lines[1:]} == {8} and len(lines) > 2
    assert {n for n, *_ in _rows(out)} == {8}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no --json of a run cut short
    _ctrl_c_at_the_second_network(monkeypatch)
    assert bench.main([*argv[:-4], "--quiet"]) == 130  # --quiet holds the table back to the end: then it prints it
    out, err = capsys.readouterr()
    assert {n for n, *_ in _rows(out)} == {8} and err.endswith("interrupted with 1 of 3 networks measured\n")
    monkeypatch.undo()

    def ctrl_c(*args):  # during the foot (its plot, say), once the table is printed
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_mlp, "foot", ctrl_c)
    assert bench.main([*argv[:-4], "--quiet"]) == 130
    out, err = capsys.readouterr()
    assert {n for n, *_ in _rows(out)} == {8, 9, 10} and out.count("N=8 L=3 B=2 ") == 1  # the table once
    assert err.endswith("interrupted with 3 of 3 networks measured\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, whose every write fails (Linux)")
@pytest.mark.parametrize("option", ["--json", "--jsonl"])
def test_a_file_that_cannot_be_written_ends_the_run_with_exit_5_and_one_line(option, capsys):
    """``/dev/full`` (No space left on device, as a full disk): one line on stderr, exit status 5, and the device
    left a device (the JSON file, written beside its path and renamed onto it, replaced it by a file as root)."""
    argv = ["--backend", "numpy", "--sizes", "8", "--layers", "2", "--batch", "1", "--k", "1", "--repeats", "1",
            "--warmup", "0", "--no-torch", "--quiet", option, "/dev/full"]
    assert bench.main(argv) == 5
    assert capsys.readouterr().err == f"leapfrog-bench: error: cannot write {option} /dev/full (No space left on device)\n"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def _ctrl_c_at_the_second_network(monkeypatch):
    """A Ctrl-C as the second network's measurement begins."""
    measure, calls = bench_measure.measure_network, []

    def ctrl_c_at_the_second(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(*args)

    monkeypatch.setattr(bench_measure, "measure_network", ctrl_c_at_the_second)


def _stdout_at_each_network(monkeypatch, capsys):
    """What has reached stdout and stderr each time a network's measurement begins (since the previous one)."""
    measure, seen = bench_measure.measure_network, []

    def look_then_measure(*args):
        seen.append(capsys.readouterr())
        return measure(*args)

    monkeypatch.setattr(bench_measure, "measure_network", look_then_measure)
    return seen


def as_meant(text):
    """The output with each line that ``cli.fitted`` broke (its continuations indented by two spaces)
    joined again, after checking that every line of the table fits 100 columns."""
    table = text.split("\n* best sequential")[0]
    assert all(len(line) <= 100 for line in table.splitlines()), table
    return text.replace("\n  ", " ")


def _rows(text):
    """``[(N, L, B, cells)]``, one per row of the table in ``text``: each network's heading names its
    N, L and B; each row's first cell is its schedule."""
    rows, network = [], None
    for line in as_meant(text).splitlines():
        if line.startswith("* best sequential"):
            break
        heading = re.match(r"N=(\d+) L=(\d+) B=(\d+) ", line)
        if heading:
            network = tuple(map(int, heading.groups()))
        elif network and re.fullmatch(r"[a-z-]+(\+fused)?(\[graph\])?\*?", line.split()[0]):
            rows.append((*network, line.split()))
    return rows


def test_each_network_is_printed_as_soon_as_it_is_measured(monkeypatch, capsys):
    """Not minutes of silence: a network's rows come before the next network is measured, and a bar on
    stderr names the one being measured, its number among them, and estimates the time left once one is
    done (the estimate itself: tests/tools/bench/test_progress.py)."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    seen = _stdout_at_each_network(monkeypatch, capsys)
    assert bench.main(TINY + ["--no-torch"]) == 0
    seen.append(capsys.readouterr())
    networks = [(24, 1), (24, 5), (40, 1), (40, 5)]
    assert len(seen) == 5 and seen[0].out.split()[:1] == ["speed-up"] and "schedule" in seen[0].out
    for (out, _), (n, b) in zip(seen[1:], networks):
        assert {(row[0], row[2]) for row in _rows(out)} == {(n, b)} and len(_rows(out)) == 6
    err = "".join(captured.err for captured in seen)
    for done, (n, b) in enumerate(networks):  # time left: '?' until a network is done
        left = r"\?" if done == 0 else r"\d\d:\d\d"
        assert re.search(rf"measuring: +\d+%\|.*\| \[\d\d:\d\d<{left}, network {done + 1} of 4, N={n} L=3 B={b}\]",
                         err), err
    assert re.search(r"\rleapfrog-bench: about \d+ s left for 3 more networks \(the first took [\d.]+ s\)\n", err)


def test_quiet_prints_the_table_at_the_end_and_nothing_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    seen = _stdout_at_each_network(monkeypatch, capsys)
    assert bench.main(TINY + ["--no-torch", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert [captured.out + captured.err for captured in seen] == [""] * 4 and err == "" and len(_rows(out)) == 4 * 6


def test_bench_table_renders_every_record_as_a_markdown_row(report, tmp_path):
    """profiling/bench_table.py turns the JSON into the README's table: one row per record."""
    out, rows = render_table(report[1], tmp_path)
    assert len(rows) == len(report[1]["records"])
    assert out.startswith("Command: `leapfrog-bench ") and all(row.count("|") == 18 for row in rows)  # 17 columns: the last, vs floor


def _record(schedule="sequential", k=0, blas=1, step=1.0, spread=0.1, graph=False, backward=0.5):
    """A synthetic record of one network, as ``measure_network`` returns it: no timing noise decides."""
    stats = {"median": step, "p20": step - spread / 2, "p80": step + spread / 2}
    ours = not schedule.startswith("torch")
    return {"backend": "numpy", "device": "cpu", "dtype": "float32", "N": 8, "L": 3, "B": 2, "blas_threads": blas,
            "optimizer": "sgd", "repeats": 5, "schedule": schedule, "k": k, "fused": False, "graph": graph,
            "step_ms": stats, "backward_ms": None if graph else {"median": backward, "p20": backward, "p80": backward},
            "forward_ms": {"median": 0.3, "p20": 0.3, "p80": 0.3} if ours else None,
            "f1_ms": 0.1 if ours else None, "f2_ms": 0.1 if ours else None, "f3_ms": 0.1 if ours else None,
            "bytes_per_step": 1, "copy_gbps": 1.0, "floor_ms": 0.01}


def test_the_best_sequential_record_has_the_smallest_step_among_the_eager_sequential_ones():
    """Not a leapfrog, graph or PyTorch record, however fast: the fastest eager sequential step."""
    case = [_record(blas=1, step=3.0), _record(blas=2, step=2.0), _record(blas=4, step=2.5),
            _record("leapfrog", 2, blas=2, step=1.5), _record(blas=2, step=1.0, graph=True),
            _record("torch-autograd", blas=2, step=0.5)]
    derived = bench_measure.derive(case)
    eager_sequential = [r for r in derived if r["schedule"] == "sequential" and not r["graph"]]
    best = [r for r in derived if r["best_sequential"]]
    assert len(best) == 1, best
    assert best[0]["step_ms"]["median"] == min(r["step_ms"]["median"] for r in eager_sequential) == 2.0
    assert [r["step_speedup_vs_best_sequential"] for r in derived] == [2 / 3, 1.0, 0.8, 2 / 1.5, 2.0, 4.0]


def test_a_noisy_timing_is_marked_in_the_table_and_the_legend_says_when():
    case = bench_measure.derive([_record(step=1.0, spread=0.2), _record("leapfrog", 2, step=1.0, spread=0.3)])
    args = argparse.Namespace(schedule=["leapfrog"], k=[2], optimizer=["sgd"], fused=False, one_pass=False,
                              graph=False, no_torch=True)
    heading, costs, quiet, noisy = bench_mlp.rows(args, case)
    assert heading == "N=8 L=3 B=2 float32" and costs.startswith("  BLAS 1: forward 0.300 ms")
    assert quiet.split()[3] == "1.000" and noisy.split()[3] == "1.000!"  # 0.3 > a quarter of 1.0; 0.2 is not
    assert f"! noisy: p80 - p20 over {bench_mlp.NOISY:.0%} of the median" in bench_mlp.LEGEND


def test_the_table_fits_100_columns_at_its_widest(capsys):
    """Every schedule, fused, in graph mode too, two BLAS settings: no line of the table is wider than 100
    columns (the legend is broken into lines that fit as well)."""
    assert bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "1,2",
                       "--schedule", ",".join(schedule_names("mlp")), "--blas-threads", "1,2", "--repeats", "1",
                       "--warmup", "0", "--no-torch", "--fused", "--graph"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert len(_rows(out)) == (1 + 3 * 2) * 2 * 2  # (sequential, 3 schedules at k = 1, 2) x BLAS x graph


@pytest.mark.parametrize("argv", [["--schedule", "leapfrog", "--one-pass", "--graph"], ["--fused"], []])
def test_the_schedule_column_is_as_wide_as_the_longest_label_printed(capsys, argv):
    """Sequential is measured whether named or not: with --schedule leapfrog --one-pass --graph its row
    sequential+one-pass[graph] is the longest label, and its cells stay under their titles as every row's do."""
    assert bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "2",
                       "--blas-threads", "1", "--repeats", "1", "--warmup", "0", "--no-torch", "--quiet", *argv]) == 0
    out = capsys.readouterr().out.splitlines()
    titles = next(line for line in out if line.startswith("schedule "))
    width = titles.index("k  blas") - 3  # the schedule's column, then two spaces, then k's, two wide
    rows = [line for line in out if line.startswith(("sequential", "leapfrog"))]
    assert width == max(len(row.split()[0]) for row in rows), titles
    assert all(row[width:width + 3] == "   " and row[width + 3] in "02" for row in rows), "\n".join(rows)


def test_a_k_of_two_digits_keeps_every_cell_under_its_title(capsys):
    """k = 12 fills the k column (two wide): its cell ends where the title k does, and BLAS's where blas does."""
    assert bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "12",
                       "--schedule", "leapfrog", "--blas-threads", "1", "--repeats", "1", "--warmup", "0",
                       "--no-torch", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    titles = next(line for line in out if line.startswith("schedule "))
    k, blas = titles.index(" k ") + 2, titles.index(" blas ") + 5  # where each title ends
    row = next(line for line in out if line.startswith("leapfrog "))
    assert (row[k - 3:k + 1], row[blas - 2:blas + 1]) == (" 12 ", " 1 "), "\n".join([titles, row])


def test_help_gives_every_option_a_help_and_a_readable_metavar_and_lists_the_exit_statuses(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for option, default in (("--backend", "auto"), ("--dtype", "float32"), ("--activation", "sigmoid")):
        assert re.search(rf"{option} {{[^}}]*}} .*?\(default {default}\)", out), option
    for metavar in ("--sizes N[,N...]", "--layers L[,L...]", "--batch B[,B...]", "--k K[,K...]",
                    "--blas-threads N[,N...]", "--repeats N"):
        assert metavar in out
    assert "SIZES" not in out and "BLAS_THREADS" not in out
    assert "BLAS threads for the matrix products, shared among the streams of a leapfrog backward pass" in out
    assert all(action.help for action in bench_mlp.parser()._actions), "an option without help"
    assert re.search(r"exit status: 0 done 2 a bad option, or sizes this machine cannot hold .* 130 stopped by "
                     "Ctrl-C", out)


def test_version_is_the_packages(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"leapfrog-bench {version('leapfrog_gpu')}\n"


def test_ctrl_c_is_said_on_a_line_of_its_own_not_on_the_progress_bar(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the progress bar is shown
    _ctrl_c_at_the_second_network(monkeypatch)
    assert bench.main(["--backend", "numpy", "--sizes", "8,9", "--layers", "3", "--batch", "2", "--k", "2",
                       "--repeats", "1", "--warmup", "0", "--no-torch"]) == 130
    err = capsys.readouterr().err
    before, said, _ = err.partition("leapfrog-bench: interrupted with 1 of 2 networks measured")
    assert said and "measuring:" in before, err
    *_, bar, line = re.split(r"[\r\n]", before)
    assert line == "" and bar.strip() == "", f"the line is written onto the bar's: {err!r}"


def test_the_plot_says_where_and_when_and_its_legend_covers_no_data(tmp_path, figures):
    run_bench(["--backend", "numpy", "--sizes", "8,12", "--layers", "3", "--batch", "1,2", "--k", "1,2",
               "--blas-threads", "1", "--repeats", "1", "--warmup", "0", "--no-torch", "--quiet",
               "--plot", str(tmp_path / "p.png"), "--json", str(tmp_path / "r.json")])
    about = json.loads((tmp_path / "r.json").read_text())
    (figure,) = figures
    title = figure.get_suptitle()
    for said in ("numpy backend", about["machine"]["device"], about["machine"]["platform"], about["date"][:10]):
        assert said in title, (said, title)
    for ax in figure.axes:
        legend, data = ax.get_legend(), ax.get_window_extent(figure.renderer)
        assert legend is not None and not legend.get_window_extent(figure.renderer).overlaps(data), ax.get_title()


def test_a_saving_of_any_size_keeps_its_column_width():
    """A pass slowed down 30-fold by another job on the machine must not widen the table: the saving
    column holds at most 7 characters whatever the timing."""
    assert bench_mlp.percent(-31.872) == "<-999%" and bench_mlp.percent(-9.98) == "-998.0%"
    assert bench_mlp.percent(0.215) == "21.5%" and bench_mlp.percent(None) == "-"
    widths = {bottom: width for _, bottom, width in bench_mlp.COLUMNS}
    assert max(len(bench_mlp.percent(v)) for v in (-1e9, -9.99, -1.0, 0.0, 0.999, 1.0)) <= widths["saving"]


# -- refusals before measuring, what --help and the output say -------------------------------------------------------


@pytest.mark.parametrize("model, argv", [("mlp", ["--sizes", "2000000000", "--layers", "2", "--batch", "1"]),
                                         ("rnn", ["--sizes", "1000", "--tau", "2000000000", "--batch", "1"])])
def test_a_run_refused_before_its_first_network_writes_no_json_lines(tmp_path, capsys, model, argv):
    """Sizes this machine cannot hold (exit 2): no --jsonl file made, and one there already left as it was (a
    header line of a run that measured nothing would read as a run)."""
    fresh, kept = tmp_path / "fresh.jsonl", tmp_path / "kept.jsonl"
    kept.write_text('{"command": "an earlier run"}\n')
    for path in (fresh, kept):
        assert bench.main(["--model", model, "--backend", "numpy", "--no-torch", "--repeats", "1", "--quiet", *argv,
                           "--jsonl", str(path)]) == 2
    assert capsys.readouterr().err.count("ask for smaller sizes\n") == 2
    assert not fresh.exists() and kept.read_text() == '{"command": "an earlier run"}\n'


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, in which no file can be made (Linux)")
@pytest.mark.parametrize("option, name", [("--json", "r.json"), ("--jsonl", "r.jsonl"), ("--plot", "r.png")])
def test_an_output_whose_folder_takes_no_file_is_refused_before_measuring(capsys, monkeypatch, option, name):
    """/proc takes no new file, root's neither (whose permissions pass anywhere): refused in one line, exit 2,
    before anything is measured (the run measured, then exited 5)."""
    monkeypatch.setattr(bench_measure, "measure_network", lambda *args: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "1", "--repeats",
                    "1", "--no-torch", "--quiet", option, f"/proc/{name}"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"leapfrog-bench: error: {option} /proc/{name}: no file can be made in the folder /proc ("), \
        err
    assert err.endswith("); give a file in one where one can\n"), err


def test_a_file_this_process_may_not_write_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    """A --jsonl file there already that may not be written (as root none is: its permission check is stood in
    for): one line, exit 2, the file as it was."""
    kept = tmp_path / "kept.jsonl"
    kept.write_text("{}\n")
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: path != str(kept) and access(path, mode, **kw))
    monkeypatch.setattr(bench_measure, "measure_network", lambda *args: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--backend", "numpy", "--sizes", "8", "--layers", "3", "--batch", "1", "--no-torch", "--quiet",
                    "--jsonl", str(kept)])
    assert exit_info.value.code == 2 and kept.read_text() == "{}\n"
    assert capsys.readouterr().err == (f"leapfrog-bench: error: --jsonl {kept}: the file is not writable; give "
                                       "another name, or make it writable\n")


def test_a_pipe_or_a_file_there_already_is_taken_without_making_a_file_beside_it(tmp_path, monkeypatch):
    """/dev/fd/N of a pipe (as /dev/stdout piped into another command) resolves to no path, and an existing file is
    appended to or written in place: neither needs a new file in its folder, which is tried for a new name alone."""
    from leapfrog_gpu.tools import cli

    existing = tmp_path / "kept.jsonl"
    existing.write_text("")
    monkeypatch.setattr(cli.tempfile, "TemporaryFile", lambda dir: (_ for _ in ()).throw(
        PermissionError(errno.EACCES, os.strerror(errno.EACCES))))  # as in a folder that takes no new file
    read, write = os.pipe()
    try:
        assert cli.output_refusal("--json", f"/dev/fd/{write}") is None
    finally:
        os.close(read), os.close(write)
    assert cli.output_refusal("--jsonl", str(existing)) is None
    assert cli.output_refusal("--json", str(tmp_path / "new.json")).startswith(f"--json {tmp_path / 'new.json'}: "
                                                                               "no file can be made in the folder ")


def test_in_blocks_each_round_runs_its_rows_in_one_order_as_the_docstring_says(monkeypatch):
    """Rows under two BLAS settings are timed in blocks, a setting's rows in the same order every round (no
    rotation, as under one setting): after each row's first call, a, b twice, then c twice."""
    from leapfrog_gpu.backends import timing
    from leapfrog_gpu.tools.bench import runner

    calls = []
    monkeypatch.setattr(timing, "_device_time", lambda backend, fn: (fn(), 1.0)[1])
    backend = argparse.Namespace(name="cupy", synchronize=lambda: None)  # no settling run
    settings = {"a": (1, contextlib.nullcontext), "b": (1, contextlib.nullcontext), "c": (2, contextlib.nullcontext)}
    runner.interleaved(backend, {row: lambda row=row: calls.append(row) for row in "abc"}, 2, 1, settings)
    assert calls == ["a", "b", "c", "a", "b", "a", "b", "c", "c"]
    assert "each block's rounds in the same order, none rotated" in " ".join(runner.interleaved.__doc__.split())


def test_warmup_0_still_runs_each_row_once_untimed_and_the_help_says_so(monkeypatch, capsys):
    """The first call of a row checks whether it is refused: it runs whatever --warmup says, 0 included."""
    from leapfrog_gpu.backends import timing
    from leapfrog_gpu.tools.bench import runner

    calls = []
    monkeypatch.setattr(timing, "_device_time", lambda backend, fn: (fn(), 1.0)[1])
    backend = argparse.Namespace(name="cupy", synchronize=lambda: None)
    runner.interleaved(backend, {"a": lambda: calls.append("a")}, 2, warmup=0)
    assert calls == ["a"] * 3  # one untimed, two timed
    for model in ("mlp", "rnn"):
        with pytest.raises(SystemExit):
            bench.main(["--model", model, "--help"])
        assert "one runs even at 0, the first call checking whether the row runs or is refused" in " ".join(
            capsys.readouterr().out.split())


def test_a_graph_the_capture_refuses_is_said_under_the_table_and_in_the_help(capsys, monkeypatch):
    """On the CuPy stand-in naumov-scan's step cannot be captured: it has no [graph] row, and a line says so (its
    rows were left out silently)."""
    install_standin(monkeypatch, STANDIN_ORDERS[0])
    assert bench.main(["--backend", "cupy", "--sizes", "8", "--layers", "3", "--batch", "1", "--k", "2",
                       "--schedule", "leapfrog,naumov-scan", "--repeats", "1", "--warmup", "0", "--no-torch",
                       "--graph", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert [row.split()[0] for row in out.splitlines() if "[graph]  " in row] == ["sequential[graph]",
                                                                                  "leapfrog[graph]"]
    assert "[graph]: no graph row for naumov-scan: the capture refuses its step on cupy" in " ".join(out.split())
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    assert "a step the capture refuses (Naumov's schedules on CuPy) has no graph row, and a line under the table " \
           "says so" in " ".join(capsys.readouterr().out.split())
