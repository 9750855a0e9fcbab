"""Training the recurrent network: the digits read row by row reach 90 % test accuracy in under a minute
with the defaults, and the student of a teacher RNN ends far below the error of predicting the mean."""

import re
import time

import numpy as np
import pytest

from leapfrog_gpu import Leapfrog
from leapfrog_gpu.tools.train import rnn_tasks

pytest.importorskip("sklearn", reason="the digits come with scikit-learn")


def test_digits_by_rows_reach_90_percent_within_a_minute():
    start = time.perf_counter()
    task = rnn_tasks.digits_by_rows()
    assert task.x_train.shape == (8, 8, 1437) and task.y_train.shape == (10, 1437)
    defaults = rnn_tasks.DEFAULTS["digits"]
    with task.network(backend="numpy") as net:
        history = rnn_tasks.train(net, task, schedule=Leapfrog(2), **defaults)
    assert history[-1][1] >= 0.90, history
    assert time.perf_counter() - start < 60


def test_digits_rows_are_the_images_rows():
    task = rnn_tasks.digits_by_rows()
    from leapfrog_gpu.tools.train import data

    images = data.digits().x_train.reshape(8, 8, -1)
    assert np.array_equal(task.x_train[3, :, 5], images[3, :, 5])  # time step 4 = pixel row 3 of image 5


def test_a_student_learns_the_teacher_rnn():
    task = rnn_tasks.teacher(samples=512)
    baseline = float(np.mean((task.y_test - task.y_train.mean(axis=(0, 2))[None, :, None]) ** 2))
    with task.network(backend="numpy") as net:
        history = rnn_tasks.train(net, task, epochs=10, batch=16, eta=0.02, schedule=Leapfrog(2))
    assert history[-1][1] < baseline / 10, (history[-1], baseline)


def test_train_refuses_bad_options():
    task = rnn_tasks.teacher(samples=8)
    with task.network(backend="numpy") as net, pytest.raises(ValueError, match="need batch >= 1"):
        rnn_tasks.train(net, task, epochs=1, batch=0, eta=0.1)


def run(capsys, **given):
    from leapfrog_gpu.tools.train import rnn as train_rnn

    status = train_rnn.main({"model": "rnn", "backend": "numpy", **given})
    return status, capsys.readouterr()


def test_the_command_resumes_where_it_stopped_as_if_never_stopped(tmp_path, capsys):
    from leapfrog_gpu.tools.train import checkpoint

    options = {"data": "teacher", "samples": 64, "tau": 6, "hidden": [9], "quiet": True}
    assert run(capsys, epochs=4, checkpoint_dir=str(tmp_path / "whole"), **options)[0] == 0
    assert run(capsys, epochs=2, checkpoint_dir=str(tmp_path / "part"), **options)[0] == 0
    status, out = run(capsys, epochs=4, checkpoint_dir=str(tmp_path / "part"), resume=True)
    assert status == 0 and "test mse" in out.out
    whole, part = checkpoint.load(tmp_path / "whole"), checkpoint.load(tmp_path / "part")
    assert part[2]["epoch"] == 4
    assert all(np.array_equal(a, b) for a, b in zip(whole[0] + whole[1], part[0] + part[1]))
    assert whole[2]["recurrent"] == part[2]["recurrent"]


@pytest.mark.parametrize("given,status,message", [
    ({"data": "mnist"}, 2, "--model rnn trains on --data digits or teacher; got 'mnist'"),
    ({"graph": True}, 2, "--model rnn does not take --graph"),
    ({"resume": True}, 2, "--resume needs --checkpoint-dir DIR"),
    ({"data": "teacher", "samples": 64, "tau": 6, "epochs": 2, "lr": 50.0}, 3, "the parameters became NaN or Inf"),
])
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_the_command_exits_with_its_status_and_one_line(capsys, given, status, message):
    got, out = run(capsys, **given)
    assert got == status and message in out.err and out.err.count("\n") == 1, out.err


def test_leapfrog_train_model_rnn_reaches_90_percent_with_its_defaults(capsys):
    from leapfrog_gpu.tools.train import command as train

    start = time.perf_counter()
    assert train.main(["--model", "rnn", "--quiet"]) == 0
    seconds = time.perf_counter() - start
    (printed,) = capsys.readouterr().out.splitlines()
    done = re.fullmatch(r"done: 20 epochs, test accuracy (\d+\.\d\d)%, \d+\.\d s", printed)
    assert done and float(done.group(1)) >= 90 and seconds < 60, printed


def test_the_header_and_epoch_lines_fit_100_columns(capsys):
    from leapfrog_gpu.tools.train import command as train

    assert train.main(["--model", "rnn", "--epochs", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "digits-by-rows: 1437 train, 360 test sequences of 8 steps | RNN [8, 64, 10] tanh, cross_entropy"
    assert out[1].endswith("float32 Leapfrog(k=2) | 2 epochs, batch 16, lr 0.1")
    assert re.fullmatch(r"epoch 1/2  test accuracy \d+\.\d\d%  \d+\.\d s", out[2]) and out[4].startswith("done: ")
    assert max(map(len, out)) <= 100, out


def test_leapfrog_train_refuses_tau_without_model_rnn(capsys):
    from leapfrog_gpu.tools.train import command as train

    assert train.main(["--tau", "4"]) == 2
    assert capsys.readouterr().err == "leapfrog-train: error: --tau applies to --model rnn only\n"
