"""Sequence tasks for the recurrent network, and the loop that trains it on one.

``digits_by_rows``  scikit-learn's 8x8 digits read one row per time step: tau = 8 steps of 8 pixels,
                    one-hot targets at the last step (``output="last"``); the split of ``data.digits``.
``teacher``         a regression task: targets at every step from a random teacher RNN (tanh recurrent
                    layers, identity output, u^l of spectral norm 0.9), inputs x ~ N(0, 1).

Sequences are stored as the network takes them: ``x`` is (tau, n_1, N); ``y`` is (n_L, N) for a target
at the last step, (tau, n_L, N) for one at every step.
"""

import dataclasses
import math
import time

import numpy as np

from ...rnn import reference as reference_rnn
from ...rnn.network import RNN
from . import data


@dataclasses.dataclass(frozen=True)
class Sequences:
    """Training and test sequences of one task, with the network that suits it (``sizes``, ``output``,
    ``activation``, ``cost``, ``output_activation``). ``classes`` is the number of classes (targets
    one-hot at the last step), or ``None`` for regression."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int | None
    sizes: tuple
    output: str
    activation: str = "tanh"
    cost: str = "quadratic"
    output_activation: str | None = None

    def __str__(self):
        tau, _, samples = self.x_train.shape
        return f"{self.name}: {samples} train, {self.x_test.shape[2]} test sequences of {tau} steps"

    def network(self, sizes=None, activation=None, cost=None, **options):
        """An ``RNN`` for this task: its shape, activation and cost unless given; ``options`` go to ``RNN``
        (dtype, seed, backend, ...)."""
        return RNN(list(sizes or self.sizes), activation or self.activation, cost or self.cost, self.output,
                   output_activation=self.output_activation, **options)


def digits_by_rows(hidden=64, dtype="float32"):
    """The digits, pixel row r of an image at time step r + 1; a network [8, hidden, 10] with a sigmoid
    output under cross-entropy."""
    digits = data.digits(dtype)
    return Sequences("digits-by-rows", _rows(digits.x_train), digits.y_train, _rows(digits.x_test), digits.y_test,
                     digits.classes, (8, hidden, 10), "last", cost="cross_entropy")


def _rows(x):
    """(64, N) images, row-major pixels, as (8, 8, N): time step = row, input = the row's 8 pixels."""
    return np.ascontiguousarray(x.reshape(8, 8, -1))


def teacher(sizes=(4, 16, 2), tau=16, samples=2048, seed=1, hidden=32, dtype="float32"):
    """Targets at every step from a random teacher RNN of widths ``sizes``; the student is
    [n_1, hidden, n_L]. ``samples`` training sequences plus a quarter as many test ones."""
    sizes = [int(n) for n in sizes]
    test = max(1, samples // 4)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tau, sizes[0], samples + test))
    with RNN(sizes, "tanh", "quadratic", "every", dtype="float64", seed=seed + 1, backend="numpy",
             output_activation="identity") as net:
        weights, recurrent, biases = net.weights, net.recurrent, net.biases
    biases = [0.1 * b for b in biases]
    y = reference_rnn.feedforward(weights, recurrent, biases, x, "tanh", "identity", "every")
    x, y = x.astype(dtype), y.astype(dtype)
    return Sequences("teacher-rnn", x[:, :, :samples].copy(), y[:, :, :samples].copy(), x[:, :, samples:].copy(),
                     y[:, :, samples:].copy(), None, (sizes[0], hidden, sizes[-1]), "every",
                     output_activation="identity")


TASKS = {"digits": digits_by_rows, "teacher": teacher}
"""Tasks by command-line name."""

DEFAULTS = {
    "digits": {"epochs": 20, "batch": 16, "eta": 0.1},
    "teacher": {"epochs": 20, "batch": 16, "eta": 0.02},
}
"""Each task's training defaults: >= 90 % test accuracy on the digits in a few seconds on one CPU core."""


def evaluate(net, x, y, classes, batch=512):
    """Test accuracy (classes) or mean squared error per output (regression), in batches of ``batch``."""
    right, squared, count = 0, 0.0, 0
    for start in range(0, x.shape[2], batch):
        out = np.asarray(_host(net.feedforward(x[:, :, start:start + batch])), np.float64)
        target = y[..., start:start + batch]
        if classes:
            right += int(np.sum(out.argmax(axis=0) == target.argmax(axis=0)))
        else:
            squared += float(np.sum((out - target) ** 2))
        count += target.shape[-1]
    if classes:
        return right / count
    return squared / (count * y.shape[-2] * (y.shape[0] if y.ndim == 3 else 1))


def _host(array):
    return array.get() if hasattr(array, "get") else array


def run_epoch(net, task, batch, eta, schedule=None, seed=0):
    """One pass of SGD over the training sequences, shuffled by the generator seeded with ``seed``, in
    batches of ``batch`` (the last one smaller)."""
    if batch < 1 or not math.isfinite(eta) or eta < 0:
        raise ValueError(f"need batch >= 1 and a finite eta >= 0; got batch {batch}, eta {eta}")
    order = np.random.default_rng(seed).permutation(task.x_train.shape[2])
    for first in range(0, len(order), batch):
        chosen = order[first:first + batch]
        net.sgd_step(task.x_train[:, :, chosen], task.y_train[..., chosen], eta, schedule)


def train(net, task, epochs, batch, eta, schedule=None, seed=0, report=None):
    """Train ``net`` on ``task`` by SGD for ``epochs`` epochs (epoch e shuffled by the seed (seed, e)).
    After each epoch ``report(epoch, metric, seconds)`` (when given) gets the test accuracy or mean
    squared error. Returns the list of ``(epoch, metric, seconds)``."""
    history, start = [], time.perf_counter()
    for epoch in range(1, epochs + 1):
        run_epoch(net, task, batch, eta, schedule, seed=[seed, epoch])
        metric = evaluate(net, task.x_test, task.y_test, task.classes)
        history.append((epoch, metric, time.perf_counter() - start))
        if report is not None:
            report(*history[-1])
    return history
