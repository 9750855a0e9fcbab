"""``leapfrog-train --model rnn`` as shipped: the digits read row by row reach 90 % test accuracy in under a
minute, and the student of a teacher RNN trains for every seed and schedule to far below the error of
predicting the mean."""

import re
import time

import numpy as np
import pytest

from helpers import cli, one_error_line
from leapfrog_gpu.tools.train import data, rnn_tasks

pytest.importorskip("sklearn", reason="the digits come with scikit-learn")


def test_digits_rows_are_the_images_rows():
    task = rnn_tasks.digits_by_rows()
    assert task.x_train.shape == (8, 8, 1437) and task.y_train.shape == (10, 1437)
    images = data.digits().x_train.reshape(8, 8, -1)
    assert np.array_equal(task.x_train[3, :, 5], images[3, :, 5])  # time step 4 = pixel row 3 of image 5
    assert str(task) == "digits-by-rows: 1437 train, 360 test 8-step sequences"


def test_the_default_run_reaches_90_percent_on_the_digits_within_a_minute(capsys):
    start = time.perf_counter()
    assert cli("--model", "rnn", "--quiet") == 0
    seconds = time.perf_counter() - start
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
                        r"[\d,]+ samples/s", out[2]) and out[4].startswith("done: 2 epochs, test accuracy ")
    assert max(map(len, out)) <= 100, out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("schedule", ["bptt", "leapfrog"])
def test_the_teacher_task_trains_with_its_defaults_for_every_seed_and_schedule(capsys, seed, schedule):
    """The defaults (20 epochs, lr 0.08/tau = 0.005): each run ends below a twentieth of the error of
    always answering the mean target (about 0.23)."""
    assert cli("--model", "rnn", "--data", "teacher", "--seed", seed, "--schedule", schedule, "--quiet") == 0
    done = re.fullmatch(r"done: 20 epochs, test mse (\d\.\d{4}), test loss \d\.\d{4}, \d+\.\d s\n",
                        capsys.readouterr().out)
    task = rnn_tasks.teacher()
    chance = float(np.mean((task.y_test - task.y_train.mean(axis=-1, keepdims=True)) ** 2))
    assert done and float(done.group(1)) < chance / 20, (done, chance)


def test_a_non_finite_loss_without_a_checkpoint_dir_names_no_checkpoint(capsys):
    assert cli("--model", "rnn", "--data", "teacher", "--lr", 0.02, "--epochs", 1, "--quiet") == 3
    line = one_error_line(capsys)
    assert re.fullmatch(r"leapfrog-train: error: the training loss is nan after epoch 1, step \d+: try a smaller "
                        r"--lr than 0\.02", line), line
