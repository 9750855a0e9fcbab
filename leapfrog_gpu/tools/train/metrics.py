"""The test metric as ``leapfrog-train`` says it, and the rule that tells a run that diverged or learns nothing
from one that is merely slow. The metrics themselves are the library's (``core.fitting.evaluate``)."""

import numpy as np

from ...core.fitting import cost


def in_words(metrics):
    """The test metric that an epoch's ``metrics`` hold, as the command says it: ``test accuracy 97.22%``, ``test
    mse 0.0027``."""
    if "test_accuracy" in metrics:
        return f"test accuracy {metrics['test_accuracy']:.2%}"
    return f"test mse {metrics['test_mse']:.4f}"


def speed(samples_per_s):
    """An epoch's speed as the command says it: ``1,234 samples/s``, or that it ran no step (a run resumed after the
    epoch's last step, ``samples_per_s`` None)."""
    return "no step run" if samples_per_s is None else f"{samples_per_s:,.0f} samples/s"


def chance_loss(name, y):
    """Mean cost per sample of the best constant output for targets ``y`` (the samples their last axis):
    the mean target (for one-hot targets, the class frequencies). A network that scores no better has
    learnt nothing from its inputs."""
    y = np.asarray(y, dtype=np.float64)
    return cost(name, np.broadcast_to(y.mean(axis=-1, keepdims=True), y.shape), y, np.float64) / y.shape[-1]


class Divergence:
    """Judges the mean training loss after each epoch: ``check(loss)`` says why the run should stop, or returns
    ``None``. It stops once the loss grew past ``GROWTH`` times its start (or the chance level, when higher), or
    stayed at or above the chance level for ``PATIENCE`` epochs in a row: a deep or slow network may sit at chance
    for an epoch or three before it learns; a diverged one sits far above it, its outputs saturated."""

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
