"""``leapfrog-train --model rnn`` as shipped: the digits read row by row reach 90 % test accuracy in under a
minute, and the student of a teacher RNN trains for every seed and schedule to far below the error of
predicting the mean."""

import re
import time

import numpy as np
import pytest

from helpers import cli, one_error_line
from leapfrog_gpu import datasets

pytest.importorskip("sklearn", reason="the digits come with scikit-learn")

pytestmark = pytest.mark.slow


def test_the_default_run_reaches_90_percent_on_the_digits_within_a_minute(capsys):
    """A minute of this process's CPU time (every thread's), which other work on the machine does not stretch,
    as it would a wall-clock time: within it, a minute on an idle core."""
    start = time.process_time()
    assert cli("--model", "rnn", "--quiet") == 0
    seconds = time.process_time() - start
    (printed,) = capsys.readouterr().out.splitlines()
    done = re.fullmatch(r"done: 20 epochs, test accuracy (\d+\.\d\d)%, test loss \d\.\d{4}, \d+\.\d s", printed)
    assert done and float(done.group(1)) >= 90 and seconds < 60, printed


def test_the_header_and_epoch_lines_fit_100_columns(capsys):
    assert cli("--model", "rnn", "--epochs", 2) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("digits-by-rows: 1437 train, 360 test 8-step sequences | RNN [8, 64, 10] tanh, cross_entropy, "
                      "float32")
    assert out[1] == "numpy (auto: CuPy is not installed) Leapfrog(k=2) | 2 epochs of 90 steps, batch 16, lr 0.1"
    assert re.fullmatch(r"epoch 1/2  train loss \d\.\d{4}  test loss \d\.\d{4}  test accuracy \d+\.\d\d%  "
                        r"[\d,]+ samples/s", out[3]) and out[5].startswith("done: 2 epochs, test accuracy ")
    assert max(map(len, out)) <= 100, out


@pytest.mark.parametrize("schedule, seed", [("leapfrog", 0), ("leapfrog", 1), ("leapfrog", 2), ("bptt", 0)])
def test_the_teacher_task_trains_with_its_defaults_for_every_seed_and_schedule(capsys, seed, schedule):
    """The defaults (20 epochs, lr 0.08/tau = 0.005, the schedule leapfrog): each run ends below a twentieth of the
    error of always answering the mean target (about 0.23). BPTT at one seed: its steps are leapfrog's to the bit
    (``tests/rnn/test_schedules.py``)."""
    assert cli("--model", "rnn", "--data", "teacher", "--seed", seed, "--schedule", schedule, "--quiet") == 0
    done = re.fullmatch(r"done: 20 epochs, test mse (\d\.\d{4}), test loss \d\.\d{4}, \d+\.\d s\n",
                        capsys.readouterr().out)
    task = datasets.teacher_rnn()
    chance = float(np.mean((task.y_test - task.y_train.mean(axis=-1, keepdims=True)) ** 2))
    assert done and float(done.group(1)) < chance / 20, (done, chance)


def test_a_non_finite_loss_without_a_checkpoint_dir_names_no_checkpoint(capsys):
    assert cli("--model", "rnn", "--data", "teacher", "--lr", 0.02, "--epochs", 1, "--quiet") == 3
    line = one_error_line(capsys)
    assert re.fullmatch(r"leapfrog-train: error: the training loss is nan after epoch 1, step \d+: try a smaller "
                        r"--lr than 0\.02", line), line


@pytest.mark.parametrize("seed", [0, 1])
def test_a_small_gru_learns_a_short_adding_problem_at_its_defaults(capsys, seed):
    """The adding defaults (Adam at lr 0.01, 32 GRU units, batch 32) on tau = 10 and 1024 sequences: 6 epochs, a
    few seconds, end below a tenth of chance (1/6)."""
    assert cli("--model", "rnn", "--cell", "gru", "--data", "adding", "--tau", 10, "--samples", 1024, "--epochs", 6,
               "--seed", seed, "--quiet") == 0
    done = re.fullmatch(r"done: 6 epochs, test mse (\d\.\d{4}), .*\n", capsys.readouterr().out)
    assert done and float(done.group(1)) < 1 / 60, done


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_gated_rnn_trains_on_the_adding_problem(capsys, cell):
    assert cli("--model", "rnn", "--cell", cell, "--data", "adding", "--tau", 6, "--samples", 64, "--hidden", 8,
               "--epochs", 2, "--allow-divergence") == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header == (f"adding: 64 train, 16 test 6-step sequences | RNN of {cell.upper()} cells [2, 8, 1] tanh, "
                      "quadratic, float32")


@pytest.mark.parametrize("argv, message", [
    (["--model", "rnn", "--cell", "gru", "--activation", "relu"], "--cell gru has its own activation, tanh: drop "
                                                                   "--activation relu"),
    (["--cell", "lstm"], "--cell applies to --model rnn only"),
    (["--model", "rnn", "--cell", "lstm", "--schedule", "naumov-rnn"], "--schedule naumov-rnn builds the Elman cell's "
     "layer operators and has none for --cell lstm: choose --schedule from bptt, leapfrog, wavefront, timescan"),
    (["--model", "rnn", "--data", "adding", "--tau", 1], "--data adding marks a step in each half of a sequence: it "
                                                         "needs --tau 2 or more; got 1"),
    (["--model", "rnn", "--data", "digits", "--tau", 8], "--tau applies to --model rnn --data teacher or adding only"),
])
def test_cells_and_the_adding_problem_refuse_what_does_not_apply(capsys, argv, message):
    assert cli(*argv) == 2
    assert one_error_line(capsys) == f"leapfrog-train: error: {message}"


def test_a_gated_run_resumes_its_cell_and_refuses_another(tmp_path, capsys):
    small = ["--model", "rnn", "--data", "adding", "--tau", 4, "--samples", 32, "--hidden", 4, "--allow-divergence",
             "--quiet", "--checkpoint-dir", tmp_path]
    assert cli(*small, "--cell", "gru", "--epochs", 1) == 0
    assert cli(*small, "--epochs", 2, "--resume") == 0
    capsys.readouterr()
    assert cli(*small, "--cell", "lstm", "--epochs", 3, "--resume") == 2
    assert one_error_line(capsys) == ("leapfrog-train: error: --cell lstm differs from the checkpoint's gru; drop it "
                                      "to resume, or start a new --checkpoint-dir")
