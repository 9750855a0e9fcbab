"""One thread at a time on a network, and on a backend: their public calls, from two threads at once, run one after
the other.

A step loads its batch into the plan's buffers, sets the step controls, counts the step and enqueues its launches
and events; two threads doing that at once on one network interleave them (one step reading the other's batch, a
count lost), which no stream order can undo. Each call named in ``SERIAL`` holds the network's lock (re-entrant:
``fit`` calls ``train_step``) for as long as it runs, and then its backend's: a graph step's capture records what is
enqueued on the backend's streams, and refuses a wait for them, whichever thread enqueues or waits, so that another
network's step on that backend would be recorded into the graph or refused. ``fit`` holds the backend's lock step by
step (its calls do), so that networks that share a backend train side by side from two threads, one call at a time.
"""

import contextlib
import functools
import threading

SERIAL = ("close", "synchronize", "parameters", "set_parameters", "save", "feedforward", "gradients", "backprop",
          "train_step", "sgd_step", "fit", "evaluate", "predict", "optimizer_state", "set_optimizer_state",
          "to_torch")
"""The public calls that hold the lock: every one that enqueues work, waits for it or reads what it wrote."""


class OneThreadAtATime:
    """A base whose subclasses' calls of ``SERIAL``, their own or inherited, hold the instance's lock and then its
    backend's (``fit`` the instance's alone: its calls hold the backend's)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in SERIAL:
            method = getattr(cls, name, None)
            if method is not None and not hasattr(method, "serialized"):
                setattr(cls, name, _serialized(method, backend=name != "fit"))


def lock(owner):
    """The lock of a network or a backend, made on first use: what a call that is no method of ``SERIAL`` (a
    property) holds, the network's before the backend's."""
    return owner.__dict__.get("_serial") or owner.__dict__.setdefault("_serial", threading.RLock())


def _serialized(method, backend):
    @functools.wraps(method)
    def serialized(self, *args, **kwargs):
        with lock(self), lock(self.backend) if backend else contextlib.nullcontext():
            return method(self, *args, **kwargs)

    serialized.serialized = True
    return serialized
