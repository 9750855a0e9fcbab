"""Loss and test metric (accuracy or mean squared error) of a network on a dataset, computed on the host
in float64 from ``feedforward``, and the rule that tells a run that diverged or learns nothing from one
that is merely slow."""

import math

import numpy as np

from ...backends import to_host

EPSILON = 1e-12
"""Cross-entropy clips a^L to [EPSILON, 1 - EPSILON]: a float32 sigmoid rounds to exactly 0 or 1 long
before the true cost is infinite, and only a NaN or Inf in the network should make the loss non-finite."""


def cost(name, a, y):
    """C summed over the batch (and a sequence's time steps), for a^L and y: quadratic ``0.5 ||a - y||^2``
    or cross-entropy ``-y ln a - (1 - y) ln(1 - a)``."""
    a, y = np.asarray(a, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if name == "quadratic":
        return 0.5 * float(np.sum((a - y) ** 2))
    a = np.clip(a, EPSILON, 1 - EPSILON)
    return -float(np.sum(y * np.log(a) + (1 - y) * np.log1p(-a)))


def evaluate(net, x, y, batch, classes=None, solver=None):
    """Mean cost per sample of ``net`` on inputs ``x`` and targets ``y`` (the samples their last axis), and
    its metric (``metric_name``): the fraction of samples whose largest output is the target's class when
    ``classes`` is set, else the mean squared error per output value. ``solver``: the forward pass's
    (``dag.forward``), or ``None``.

    ``feedforward`` runs ``batch`` samples at a time: the network keeps buffers per batch size, so the
    training batch size adds no new ones but the remainder does. A data-parallel network (``net.comm``)
    evaluates its rank's share of the samples, and the sums are added up across ranks.
    """
    samples = x.shape[-1]
    if net.comm is not None:
        share = net.comm.share(samples)
        x, y = x[..., share], y[..., share]
    forward = {} if solver is None else {"solver": solver}
    total, correct, squared = 0.0, 0, 0.0
    for start in range(0, x.shape[-1], batch):
        a = to_host(net.feedforward(x[..., start:start + batch], **forward))
        target = y[..., start:start + batch]
        total += cost(net.cost, a, target)
        if classes is not None:
            correct += int(np.sum(np.argmax(a, axis=-2) == np.argmax(target, axis=-2)))
        else:
            squared += float(np.sum((np.asarray(a, dtype=np.float64) - target) ** 2))
    if net.comm is not None:
        total, correct, squared = net.comm.sum([total, correct, squared])
    values = samples * math.prod(y.shape[:-1])  # the output values of every sample
    return total / samples, (correct / samples if classes is not None else squared / values)


def metric_name(classes):
    """The test metric's key in the ``--metrics`` lines: ``test_accuracy`` for a classification (``classes``
    set), ``test_mse`` for a regression."""
    return "test_accuracy" if classes else "test_mse"


def in_words(name, value):
    """A metric as the command says it: ``test accuracy 97.22%``, ``test mse 0.0027``."""
    return f"test accuracy {value:.2%}" if name == "test_accuracy" else f"test mse {value:.4f}"


def measured(metrics):
    """``(name, value)`` of the test metric that an epoch's ``metrics`` hold."""
    name = "test_accuracy" if "test_accuracy" in metrics else "test_mse"
    return name, metrics[name]


def chance_loss(name, y):
    """Mean cost per sample of the best constant output for targets ``y`` (the samples their last axis):
    the mean target (for one-hot targets, the class frequencies). A network that scores no better has
    learnt nothing from its inputs."""
    y = np.asarray(y, dtype=np.float64)
    return cost(name, np.broadcast_to(y.mean(axis=-1, keepdims=True), y.shape), y) / y.shape[-1]


class Divergence:
    """Judges the mean training loss after each epoch against where it started and the chance level.

    ``check(loss)`` returns why the run should stop, or ``None``: the loss grew past ``GROWTH`` times
    its start (or the chance level, when that is higher), or it has stayed at or above the chance
    level for ``PATIENCE`` epochs in a row. A deep or slow network may sit at chance for an epoch or
    three before it learns; a diverged one sits far above it, its outputs saturated.
    """

    GROWTH = 10.0
    PATIENCE = 5

    def __init__(self, start, chance, epochs_at_chance=0):
        self.start, self.chance, self.epochs_at_chance = start, chance, epochs_at_chance

    def check(self, loss):
        if loss > self.GROWTH * max(self.start, self.chance):
            return f"the run diverged: its training loss grew from {self.start:.4g} to {loss:.4g}"
        self.epochs_at_chance = self.epochs_at_chance + 1 if loss >= self.chance else 0
        if self.epochs_at_chance >= self.PATIENCE:
            return (f"the run learns nothing: its training loss was {self.start:.4g} at the start and is {loss:.4g} "
                    f"now, at or above chance level ({self.chance:.4g}, what a constant output scores) for the last "
                    f"{self.epochs_at_chance} epochs")
        return None
