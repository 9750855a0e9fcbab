"""The pieces of a host stream: its events, its FIFO of operations, what one operation holds, the loop of its
thread (``drain``), and what ends the threads of a backend (``host.NumpyBackend`` runs them)."""

import collections
import functools
import queue
import threading

import numpy as np

from . import blas_limits


class HostEvent:
    """A CUDA-like event: ``recorded`` counts enqueued recordings, ``completed`` those reached.

    Waiters sleep on the event's own condition (sharing the backend's lock), so a recording wakes
    only the streams that wait for this event.
    """

    __slots__ = ("name", "recorded", "completed", "reached")

    def __init__(self, name, lock):
        self.name = name
        self.recorded = 0
        self.completed = 0
        self.reached = threading.Condition(lock)

    def __repr__(self):
        return f"HostEvent({self.name!r}, recorded={self.recorded}, completed={self.completed})"


class HostStream:
    """A FIFO of operations, drained by its own thread (``threads`` mode) or by ``synchronize``."""

    def __init__(self, name):
        self.name = name
        self.queue = queue.SimpleQueue()
        self.deferred = collections.deque()
        self.thread = None
        self.delays = None  # a seeded random.Random in chaos mode

    def __repr__(self):
        return f"HostStream({self.name!r})"


class Item:
    """One enqueued operation: ``op`` (a function call), ``record``, ``wait``, ``mark`` (NVTX) or ``blas`` (the BLAS
    threads); a ``mark`` or a ``blas`` item runs even after an operation failed."""

    __slots__ = ("kind", "name", "fn", "args", "event", "generation")

    def __init__(self, kind, name, fn=None, args=(), event=None, generation=0):
        self.kind, self.name, self.fn, self.args = kind, name, fn, args
        self.event, self.generation = event, generation


def quiet(run):
    """``run`` under ``np.errstate(all="ignore")``, a new one each call (NumPy 1's keeps the state it replaced on the
    instance, which threads sharing one would overwrite): what the streams run under, on their threads and on the
    caller (serial and deferred modes). NaN and Inf are the network's to report (``check_finite``, ``fit``), as on a
    GPU, not NumPy's, whose warnings would name our ops."""
    @functools.wraps(run)
    def quietly(*args, **kwargs):
        with np.errstate(all="ignore"):
            return run(*args, **kwargs)

    return quietly


@quiet
def drain(stream):
    """A stream's thread: run each entry of its queue, ``(run, items, bases)``, as ``run(stream, items, bases)``
    (its backend's), until the stop (None). Only the entries queued hold the backend: one dropped unclosed is
    collected once its work has run, and its ``release()`` (``stop``) ends this thread."""
    while _run_next(stream):
        pass


def _run_next(stream):
    """Wait for the next entry of ``stream``'s queue and run it; False for the stop. Nothing of the entry is held
    once it has run, while the thread waits for the next: a network it names can be collected."""
    entry = stream.queue.get()
    if entry is None:
        return False
    run, items, bases = entry
    run(stream, items, bases)
    return True


def stop(queues, blas):
    """End a backend without waiting for anything: a stop (None) on each of its threads' ``queues``, behind the
    work queued there, each thread ending once it reaches it; and give back the BLAS ticket ``blas`` (None:
    none held), which may then hold for the rest of that work.

    A backend's ``release()`` (a ``weakref.finalize``: it holds these arguments, never the backend or a
    network) may run on any thread during a collection, that of a stream included: it must not wait.
    """
    for fifo in queues:
        fifo.put(None)
    if blas is not None:
        blas_limits.release(blas)
