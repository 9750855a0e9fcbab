"""The pieces of a host stream: its events, its FIFO of operations, and what one operation holds
(``host.NumpyBackend`` runs them)."""

import collections
import queue
import threading


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
    """One enqueued operation: ``op`` (a function call), ``record``, ``wait`` or ``mark`` (NVTX)."""

    __slots__ = ("kind", "name", "fn", "args", "event", "generation")

    def __init__(self, kind, name, fn=None, args=(), event=None, generation=0):
        self.kind, self.name, self.fn, self.args = kind, name, fn, args
        self.event, self.generation = event, generation
