"""Training the recurrent network: the digits read row by row reach 90 % test accuracy in under a minute
with the defaults, and the student of a teacher RNN ends far below the error of predicting the mean."""

import time

import numpy as np
import pytest

from leapfrog_gpu import Leapfrog
from leapfrog_gpu.tools import rnn_tasks

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
    from leapfrog_gpu.tools import data

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
