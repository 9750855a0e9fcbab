"""The stand-in device's queues and the orders they run in.

Nothing runs when it is enqueued. Every stream, the legacy default (null) stream included, is a queue;
the queues run when the host blocks on them (``host_wait``), interleaved in an adversarial order that
respects only events and CUDA's blocking rules: ``main-first`` runs the oldest non-default stream (a
backend's main stream) for as long as it can and the default stream last, ``workers-first`` the default
stream first and then the newest streams, ``random`` a ready stream drawn with a seeded generator. Work
on the null stream waits for all earlier work on blocking streams and work on blocking streams for
earlier null-stream work (``before``); non-blocking streams never wait for the null stream, nor it for
them.

``unsafe(what)`` is where a potentially unsafe call meets the capture modes (see ``capture``).

Every operation says, as it is enqueued, what memory it reads and what it writes, as NumPy views of the
device's memory; ``device.observer``, when set, is called with ``(stream, name, reads, writes)`` for each,
in enqueue (or capture) order: what ``tests/harness/races.py`` reads a launch's accesses from.
"""

import collections
import itertools
import random
import threading
import time

ORDERS = ("main-first", "workers-first", "random")
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2
MODES = {GLOBAL: "global", THREAD_LOCAL: "thread-local", RELAXED: "relaxed"}
"""CUDA's stream capture modes (``cudaStreamCaptureMode``), as ``cupy.cuda.runtime`` numbers them."""


class CUDARuntimeError(RuntimeError):
    """What CuPy raises for a failed CUDA runtime call; ``status`` names the CUDA error."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


class UseAfterFreeError(RuntimeError):
    """An operation touched memory that went back to the pool while it was still queued."""


class _Device:
    """Everything ``reset`` replaces: streams, pool, pinned ranges, logs, the order (``streams.reset``
    adds the null stream and the stack of current streams)."""

    def __init__(self, order, seed, devices):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}; got {order!r}")
        self.order, self.rng = order, random.Random(seed)
        self.count, self.current = devices, 0  # device ids: the queues are shared, only the ids differ
        self.streams = []
        self.ids = itertools.count(0x1000, 0x10)
        self.free = collections.defaultdict(list)  # (stream, bytes) -> chunks to reuse, last freed first
        self.chunks = []  # every pool chunk, to find a raw device pointer's memory (``memory.resolve``)
        self.pinned = []  # (start, end, weakref to the buffer)
        self.waits = []  # (what, stream ptr) of every host wait, in order
        self.trace = []  # ("record" | "wait" | "launch", stream ptr, detail) of every enqueued operation
        self.handles = {}  # graph and executable graph handles -> objects
        self.node_runs = []  # (node name, stream ptr, priority) of every graph node run
        self.null, self.stack = None, []
        self.observer = None  # called with (stream, name, reads, writes) of every operation enqueued or captured


device = None
"""The current device: what ``install`` made last."""


def install(order, seed, devices=1):
    """A fresh device whose queues run in ``order``, without streams yet, and ``devices`` device ids."""
    global device
    device = _Device(order, seed, devices)
    return device


def unsafe(what):
    """A potentially unsafe call by this thread: refused, and the capture invalidated, while this thread
    has a capture under way in global or thread-local mode, or another thread one in global mode."""
    me = threading.get_ident()
    for capture in {s._capture for s in device.streams if s._capture is not None}:
        if (capture.thread == me and capture.mode != RELAXED) or (capture.thread != me and capture.mode == GLOBAL):
            capture.invalidated = capture.invalidated or what
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"operation not permitted when stream is capturing ({what} during a capture "
                                   f"in {MODES[capture.mode]} mode)")


def waits():
    """``(what, stream ptr)`` of every time the host blocked since ``reset``: what is ``get``,
    ``stream.synchronize``, ``event.synchronize`` or ``device.synchronize``."""
    return list(device.waits)


def trace():
    """``(kind, stream ptr, detail)`` of every record, wait and kernel launch enqueued (or captured) since
    ``reset``; the detail is the event's ptr for a record, the ptr of the stream of the event's latest
    recording for a wait (None if it was never recorded), the kernel's name (or ``"graph"``) for a launch."""
    return list(device.trace)


def pending():
    """Operations enqueued and not yet run, over all streams."""
    return sum(len(s._queue) for s in device.streams)


class Item:
    __slots__ = ("kind", "name", "fn", "touches", "target")

    def __init__(self, kind, name, fn=None, touches=(), target=None):
        self.kind, self.name, self.fn, self.touches, self.target = kind, name, fn, touches, target


def push(stream, item):
    stream._queue.append(item)
    stream._enqueued += 1


def before(stream):
    """The legacy default stream's implicit ordering, for work about to be enqueued on ``stream``."""
    if stream._null:
        if any(s._capture is not None and not s._non_blocking for s in device.streams):
            raise CUDARuntimeError("cudaErrorStreamCaptureImplicit",
                                   "the legacy stream is used while a blocking stream is capturing")
        for other in device.streams:
            if not other._null and not other._non_blocking and other._enqueued > other._completed:
                push(stream, Item("wait", "implicit", target=(other, other._enqueued)))
    elif not stream._non_blocking and device.null._enqueued > device.null._completed:
        push(stream, Item("wait", "implicit", target=(device.null, device.null._enqueued)))


def enqueue(stream, name, fn, reads=(), writes=()):
    """Put ``fn()`` on ``stream`` (or into its capture); it runs when the scheduler reaches it. ``reads`` and
    ``writes`` are the device arrays it reads and writes (an array read and written is written).

    ``fn`` must hold plain NumPy views, never a device array: queued work does not keep memory alive.
    """
    arrays = (*reads, *writes)
    enqueue_touching(stream, name, fn, tuple((a._alloc.chunk, a._alloc.generation) for a in arrays),
                     [a._a for a in reads], [a._a for a in writes])


def enqueue_touching(stream, name, fn, touches, reads=(), writes=()):
    """``enqueue`` for work that holds raw pointers: ``touches`` are its ``(chunk, generation)`` pairs,
    ``reads`` and ``writes`` NumPy views of the memory it reads and writes."""
    if device.observer is not None:
        device.observer(stream, name, list(reads), list(writes))
    if stream._capture is not None:
        stream._capture.add(stream, name, fn, touches)
        return
    before(stream)
    push(stream, Item("op", name, fn, touches))


def check_touches(name, where, touches):
    for chunk, generation in touches:
        if chunk.dead >= generation:
            raise UseAfterFreeError(
                f"{name} on {where} touches memory that was freed while it was queued: the memory went "
                f"back to the pool of {chunk.stream!r}, which does not wait for {where}; keep the array "
                "alive (or synchronize) until the work using it has finished")


def _key(stream):
    if device.order == "main-first":
        return (stream._null, stream._index)  # oldest first, the default stream last
    return (not stream._null, -stream._index)  # the default stream first, then the newest


def pick(streams):
    if device.order == "random":
        return device.rng.choice(sorted(streams, key=lambda s: s._index))
    return min(streams, key=_key)


def _ready(item):
    if item.kind != "wait":
        return True
    stream, seq = item.target
    return stream._completed >= seq


def _run(done, what):
    """Run queued work, in the device's order, until ``done()``."""
    while not done():
        ready = [s for s in device.streams if s._queue and _ready(s._queue[0])]
        if not ready:
            stuck = [f"{s!r} waits on {s._queue[0].target[0]!r}" for s in device.streams if s._queue]
            raise RuntimeError(f"deadlock in {what}: {'; '.join(stuck) or 'nothing is queued'}")
        stream = pick(ready)
        _execute(stream, stream._queue.popleft())


def _execute(stream, item):
    try:
        if item.kind == "op":
            check_touches(item.name, repr(stream), item.touches)
            item.fn()
        elif item.kind == "graph":
            item.fn()
    finally:
        stream._completed += 1
        for event, recording in stream._stamps.pop(stream._completed, ()):
            if event._recording == recording:
                event._time = time.perf_counter()


def host_wait(what, stream, done):
    """The host blocks until ``done()``, running the queues meanwhile; logged for ``waits()``."""
    unsafe(what)
    device.waits.append((what, None if stream is None else stream.ptr))
    _run(done, what)


def drained(streams):
    return lambda: all(s._completed == s._enqueued for s in streams)
