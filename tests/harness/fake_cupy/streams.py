"""Streams, events and the device of the stand-in, as CuPy 14.2's ``cupy/cuda/stream.pyx`` has them.

``Stream(null=False, non_blocking=False, ptds=False, priority=None)``, ``Stream.null``, ``with stream:``,
``use()``, ``record``, ``wait_event`` (it waits for the event's latest recording at the time of the call;
an event never recorded is complete), ``synchronize``, ``done``, ``priority`` (clamped to
``PRIORITY_RANGE``, as CUDA clamps), ``is_non_blocking``. ``Event(block, disable_timing)``, ``record``,
``synchronize``, ``done``, ``get_elapsed_time`` (host time between the moments the streams reached the
two recordings; refused for an event that is not complete or was made with ``disable_timing``).
Synchronizing a capturing stream, a captured event or the device raises ``CUDARuntimeError``; a query or
a host wait is a potentially unsafe call (``queues.unsafe``). ``Device(i)`` for ``0 <= i <`` the count given
to ``reset`` (``cuda.runtime.getDeviceCount()``), ``use()`` making it current: the devices share one set
of queues, only their ids differ (what NCCL's duplicate check reads, ``nccl``).
"""

import collections
import time

from . import capture, queues
from .queues import CUDARuntimeError

PRIORITY_RANGE = (0, -5)
"""(least, greatest) stream priority of the stand-in's device; lower numbers are higher priorities."""


def reset(order="main-first", seed=0, devices=1):
    """A fresh device whose queues run in ``order`` (one of ``ORDERS``; ``seed`` for ``random``), with
    ``devices`` device ids."""
    device = queues.install(order, seed, devices)
    device.null = object.__new__(Stream)
    Stream._setup(device.null, device, null=True, non_blocking=False, priority=None)
    device.stack = [device.null]
    Stream.null = device.null
    return device


class Stream:
    """``cupy.cuda.Stream``: a queue of work on the stand-in device."""

    null = None

    def __new__(cls, null=False, non_blocking=False, ptds=False, priority=None):
        if null:
            return queues.device.null
        if ptds:
            raise NotImplementedError("the CuPy stand-in does not model the per-thread default stream")
        stream = super().__new__(cls)
        cls._setup(stream, queues.device, False, non_blocking, priority)
        return stream

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        pass  # set up by __new__ (Stream(null=True) is the null stream itself)

    @staticmethod
    def _setup(stream, device, null, non_blocking, priority):
        least, greatest = PRIORITY_RANGE
        stream.ptr = 0 if null else next(device.ids)
        stream.device_id = -1 if null else device.current
        stream._null, stream._non_blocking = null, bool(non_blocking) and not null
        stream._priority = 0 if priority is None else min(max(int(priority), greatest), least)
        stream._queue = collections.deque()
        stream._enqueued = stream._completed = 0
        stream._stamps = {}
        stream._capture = stream._frontier = None
        stream._index = len(device.streams)
        device.streams.append(stream)

    def __repr__(self):
        return f"<Stream {self.ptr:#x}{' (null)' if self._null else ''}>"

    def __eq__(self, other):
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self):
        return self.ptr

    def __enter__(self):
        queues.device.stack.append(self)
        return self

    def __exit__(self, *exc):
        queues.device.stack.pop()

    def use(self):
        queues.device.stack[-1] = self
        return self

    @property
    def priority(self):
        return self._priority

    @property
    def is_non_blocking(self):
        return self._non_blocking

    @property
    def done(self):
        self._refuse_if_capturing()
        queues.unsafe("stream.query")
        return self._completed == self._enqueued

    def synchronize(self):
        self._refuse_if_capturing()
        queues.host_wait("stream.synchronize", self, queues.drained([self]))

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        _wait(self, event)

    def begin_capture(self, mode=None):
        capture.begin(self, mode)

    def end_capture(self):
        return capture.end(self)

    def is_capturing(self):
        return self._capture is not None

    def _refuse_if_capturing(self):
        if self._capture is not None:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"operation not permitted when stream is capturing ({self!r})")


class Event:
    """``cupy.cuda.Event``: complete once its stream has reached its latest recording."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.ptr = next(queues.device.ids)
        self._timing = not disable_timing
        self._stream, self._seq, self._time = None, 0, None
        self._recording = 0
        self._captured = None  # (capture, nodes) when recorded on a capturing stream
        self._source = None  # the stream of its latest recording, captured or not (for trace())

    def __repr__(self):
        return f"<Event {self.ptr:#x}>"

    def record(self, stream=None):
        stream = queues.device.stack[-1] if stream is None else stream
        self._recording += 1
        self._source = stream
        queues.device.trace.append(("record", stream.ptr, self.ptr))
        if stream._capture is not None:
            self._captured = (stream._capture, frozenset(stream._frontier))
            self._stream = None
            return
        queues.before(stream)
        self._captured, self._stream, self._seq, self._time = None, stream, stream._enqueued, None
        if stream._completed >= self._seq:
            self._time = time.perf_counter()
        else:
            stream._stamps.setdefault(self._seq, []).append((self, self._recording))

    @property
    def done(self):
        self._refuse_if_captured()
        queues.unsafe("event.query")
        return self._stream is None or self._stream._completed >= self._seq

    def synchronize(self):
        self._refuse_if_captured()
        queues.unsafe("event.synchronize")
        if self._stream is not None:
            stream, seq = self._stream, self._seq
            queues.host_wait("event.synchronize", stream, lambda: stream._completed >= seq)

    def _refuse_if_captured(self):
        if self._captured is not None:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"{self!r} was recorded during a capture; it cannot be queried or awaited")


def _wait(stream, event):
    queues.device.trace.append(("wait", stream.ptr, None if event._source is None else event._source.ptr))
    if event._captured is not None:
        capture.join(stream, event)
        return
    if event._stream is None:
        return  # an event never recorded is complete
    if stream._capture is not None:
        raise RuntimeError(
            f"{stream!r} is capturing and waits on {event!r}, recorded outside the capture: the graph would "
            "not hold that dependency (refused by the stand-in)")
    queues.before(stream)
    queues.push(stream, queues.Item("wait", "wait_event", target=(event._stream, event._seq)))


def get_elapsed_time(start_event, end_event):
    """Milliseconds between the moments the streams reached the two recordings."""
    for event in (start_event, end_event):
        event._refuse_if_captured()
        if not event._timing:
            raise CUDARuntimeError("cudaErrorInvalidResourceHandle", f"{event!r} was created with disable_timing")
        if event._stream is None or event._time is None:
            raise CUDARuntimeError("cudaErrorNotReady", f"{event!r} is not complete")
    return (end_event._time - start_event._time) * 1e3


def get_current_stream(device_id=-1):
    return queues.device.stack[-1]


class Device:
    """``cupy.cuda.Device(device=None)``: the current device, or device ``device``; ``with`` makes it
    current for the block, ``use()`` from then on."""

    def __init__(self, device=None):
        self.id = queues.device.current if device is None else int(device)
        if not 0 <= self.id < queues.device.count:
            raise CUDARuntimeError("cudaErrorInvalidDevice", f"invalid device ordinal ({self.id} of "
                                   f"{queues.device.count} devices)")
        self.compute_capability = "90"
        self._previous = []

    def __enter__(self):
        self._previous.append(queues.device.current)
        queues.device.current = self.id
        return self

    def __exit__(self, *exc):
        queues.device.current = self._previous.pop()

    def use(self):
        queues.device.current = self.id
        return self

    def synchronize(self):
        capturing = [s for s in queues.device.streams if s._capture is not None]
        if capturing:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"operation not permitted when stream is capturing ({capturing})")
        queues.host_wait("device.synchronize", None, queues.drained(queues.device.streams))
