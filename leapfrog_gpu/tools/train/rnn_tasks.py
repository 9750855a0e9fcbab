"""Sequence tasks for ``leapfrog-train --model rnn``, as ``data.Dataset``s of sequences.

``digits_by_rows``  scikit-learn's 8x8 digits read one row per time step: tau = 8 steps of 8 pixels,
                    one-hot targets at the last step (``output="last"``); the split of ``data.digits``.
``digits_by_pixels`` the same digits read one pixel per time step, row by row: tau = 64 steps of one
                    input, the class at the last step; a constant output scores 10 % (ten classes about
                    equally frequent), the trivial baseline.
``teacher``         a regression task: targets at every step from a random teacher RNN (tanh recurrent
                    layers, identity output, u^l of spectral norm 0.9), inputs x ~ N(0, 1).
``adding``          the adding problem (Hochreiter and Schmidhuber, 1997): two inputs per step, a value
                    U(0, 1) and a marker set at two steps, one in each half; the target, at the last step,
                    the sum of the two marked values. The mean, 1, scores an MSE of 1/6.

Sequences are stored as the network takes them: ``x`` is (tau, n_1, N); ``y`` is (n_L, N) for a target
at the last step, (tau, n_L, N) for one at every step.
"""

import numpy as np

from ...rnn import reference as reference_rnn
from ...rnn.network import RNN
from . import data

TEACHER_HIDDEN = 16
"""The width of the teacher RNN's recurrent layer."""


def digits_by_rows(dtype="float32"):
    """The digits, pixel row r of an image at time step r + 1."""
    digits = data.digits(dtype)
    return data.Dataset("digits-by-rows", _rows(digits.x_train), digits.y_train, _rows(digits.x_test), digits.y_test,
                        digits.classes)


def digits_by_pixels(dtype="float32"):
    """The digits, pixel p of an image (row-major) at time step p + 1."""
    digits = data.digits(dtype)
    return data.Dataset("digits-by-pixels", _pixels(digits.x_train), digits.y_train, _pixels(digits.x_test),
                        digits.y_test, digits.classes)


def _pixels(x):
    """(64, N) images as (64, 1, N): time step = pixel, one input."""
    return np.ascontiguousarray(x.reshape(64, 1, -1))


def _rows(x):
    """(64, N) images, row-major pixels, as (8, 8, N): time step = row, input = the row's 8 pixels."""
    return np.ascontiguousarray(x.reshape(8, 8, -1))


def adding(tau=16, samples=2048, seed=1, dtype="float32"):
    """The adding problem over ``tau`` >= 2 steps: ``samples`` training sequences plus a quarter as many (at least
    one) test ones, x (tau, 2, N) and y (1, N)."""
    count = samples + max(1, samples // 4)
    rng = np.random.default_rng(seed)
    x = np.zeros((tau, 2, count))
    x[:, 0] = rng.random((tau, count))
    columns = np.arange(count)
    for low, high in ((0, tau // 2), (tau // 2, tau)):
        x[rng.integers(low, high, count), 1, columns] = 1
    y = np.sum(x[:, 0] * x[:, 1], axis=0)[None]
    x, y = x.astype(dtype), y.astype(dtype)
    return data.Dataset("adding", x[..., :samples].copy(), y[:, :samples].copy(), x[..., samples:].copy(),
                        y[:, samples:].copy(), None)


def teacher(inputs=4, outputs=2, tau=16, samples=2048, seed=1, dtype="float32"):
    """Targets at every step from a random teacher RNN [inputs, ``TEACHER_HIDDEN``, outputs] (drawn with
    ``seed``): ``samples`` training sequences of ``tau`` steps plus a quarter as many (at least one) test
    ones."""
    sizes = [int(inputs), TEACHER_HIDDEN, int(outputs)]
    test = max(1, samples // 4)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tau, sizes[0], samples + test))
    with RNN(sizes, "tanh", "quadratic", "every", dtype="float64", seed=seed + 1, backend="numpy",
             output_activation="identity") as net:
        weights, recurrent, biases = net.weights, net.recurrent, net.biases
    biases = [0.1 * b for b in biases]
    with data.same_bits():
        y = reference_rnn.feedforward(weights, recurrent, biases, x, "tanh", "identity", "every")
    x, y = x.astype(dtype), y.astype(dtype)
    return data.Dataset("teacher-rnn", x[..., :samples].copy(), y[..., :samples].copy(), x[..., samples:].copy(),
                        y[..., samples:].copy(), None)
