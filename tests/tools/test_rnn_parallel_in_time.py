"""The SGD step parallel in time in the commands: ``leapfrog-train --model rnn --forward-solver newton
--schedule timescan`` and ``leapfrog-bench --model rnn --forward-solver``, each solver by its name in
``tools.schedules.SOLVERS``, and the long-sequence task ``--data pixels`` (the digits read pixel by pixel)."""

import json

import numpy as np
import pytest

from helpers import cli, parameters
from leapfrog_gpu.rnn.newton import TimeNewton
from leapfrog_gpu import datasets
from leapfrog_gpu.tools.bench import command as bench, rnn as bench_rnn
from leapfrog_gpu.tools.train import models

pytest.importorskip("sklearn", reason="the digits come with scikit-learn")

PIXELS = ["--model", "rnn", "--data", "pixels", "--hidden", 4, "--batch-size", 64, "--dtype", "float64", "--quiet"]
"""The task at its smallest: 23 steps an epoch."""


@pytest.fixture
def solved(monkeypatch):
    """The ``quasi`` of every ``TimeNewton`` solve that runs, in order."""
    seen = []
    solve = TimeNewton.solve

    def recorded(self, p):
        seen.append(self.quasi)
        return solve(self, p)

    monkeypatch.setattr(TimeNewton, "solve", recorded)
    return seen


def test_pixels_are_the_images_pixels_in_reading_order():
    task = datasets.digits_by_pixels()
    assert task.x_train.shape == (64, 1, 1437) and task.y_train.shape == (10, 1437)
    images = datasets.digits().x_train
    assert np.array_equal(task.x_train[19, 0], images[19])  # step 20: row 2, column 3 of every image
    assert str(task) == "digits-by-pixels: 1437 train, 360 test 64-step sequences"


@pytest.mark.parametrize("name, quasi", [("sequential", None), ("newton", False), ("quasi-newton", True)])
def test_each_solver_name_runs_its_solver_in_the_step_and_the_evaluations(capsys, solved, name, quasi):
    assert cli(*PIXELS, "--epochs", 1, "--schedule", "timescan", "--forward-solver", name) == 0
    assert set(solved) == (set() if quasi is None else {quasi}) and (quasi is None or len(solved) >= 23)
    solver = models.forward_solver({"model": "rnn", "forward_solver": name})
    assert solver is None if quasi is None else (type(solver), solver.quasi) == (TimeNewton, quasi)


def test_the_step_parallel_in_time_is_bptts_within_rounding_from_the_same_seed(tmp_path, capsys):
    runs = {"bptt": ["--schedule", "bptt"], "pit": ["--schedule", "timescan", "--forward-solver", "newton"]}
    for name, args in runs.items():
        assert cli(*PIXELS, "--epochs", 1, *args, "--checkpoint-dir", tmp_path / name,
                   "--metrics", tmp_path / f"{name}.jsonl") == 0
    bptt, pit = (parameters(tmp_path / name)[0] for name in runs)
    for a, b in zip(bptt, pit, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    lines = {name: json.loads((tmp_path / f"{name}.jsonl").read_text()) for name in runs}
    assert lines["pit"]["forward_solver"] == "newton" and lines["bptt"]["forward_solver"] == "sequential"
    assert lines["pit"]["schedule"].startswith("TimeScan(")
    assert abs(lines["pit"]["test_loss"] - lines["bptt"]["test_loss"]) < 1e-10


def test_a_run_parallel_in_time_resumes_with_its_solver(tmp_path, capsys, solved):
    run = [*PIXELS, "--schedule", "timescan", "--forward-solver", "quasi-newton", "--checkpoint-dir", tmp_path]
    assert cli(*run, "--epochs", 1) == 0
    first = len(solved)
    assert cli(*PIXELS, "--checkpoint-dir", tmp_path, "--resume", "--epochs", 2) == 0
    assert set(solved) == {True} and len(solved) >= first + 23  # the resumed run kept quasi-newton


def test_the_pixels_task_learns_above_its_ten_percent_baseline(tmp_path, capsys):
    assert cli(*PIXELS[:4], "--epochs", 5, "--metrics", tmp_path / "m.jsonl", "--quiet") == 0  # the defaults
    accuracy = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])["test_accuracy"]
    assert accuracy > 0.2  # ten classes: a constant output scores 10 %


# -- leapfrog-bench --model rnn --forward-solver -------------------------------------------------------------


def test_the_bench_times_each_named_step_against_bptts_step(solved, capsys):
    rows = bench_rnn.measure(4, 8, 2, L=4, repeats=2, names=["bptt"], solvers=["quasi-newton", "newton"])
    by_name = {row["schedule"]: row for row in rows}
    assert list(by_name) == ["bptt", "step bptt", "step timescan+quasi-newton", "step timescan+newton"]
    step = by_name["step bptt"]
    assert step["speedup"] == 1.0 and step["rounds"] == 2 * 8 + 16  # the forward's K·tau, BPTT's chain
    for name in ("step timescan+quasi-newton", "step timescan+newton"):
        assert by_name[name]["speedup"] == step["median_s"] / by_name[name]["median_s"] and by_name[name]["k"] == 2
    assert set(solved) == {True, False} and solved[:2] == [True, False]  # each warm-up, in the order named
    assert by_name["step timescan+newton"]["rounds"] < by_name["step timescan+quasi-newton"]["rounds"]


def test_the_bench_command_prints_the_step_rows_and_refuses_an_unknown_solver(capsys):
    assert bench.main(["--model", "rnn", "--backend", "numpy", "--sizes", "3", "--tau", "4", "--batch", "1",
                       "--repeats", "1", "--no-torch", "--schedule", "bptt", "--forward-solver", "newton"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[3:5] for line in printed[3:6]] == [["bptt", "0"], ["step", "bptt"], ["step", "timescan+newton"]]
    with pytest.raises(SystemExit) as stop:
        bench.main(["--model", "rnn", "--forward-solver", "jacobi"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert "unknown RNN forward solver 'jacobi'; choose from newton, quasi-newton" in err
