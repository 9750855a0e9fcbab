"""A CuPy stand-in on the CPU, at least as strict as CuPy 14 about streams, so that the CuPy backend's
own code (``backends/cuda.py``, ``backends/ops_cuda.py``, the ``cupy`` branches of the library) runs
in CI and a missing wait fails there.

Nothing runs when it is enqueued. Every stream, the legacy default (null) stream included, is a queue;
the queues run when the host blocks on them, interleaved in an adversarial order that respects only
events and CUDA's blocking rules. ``reset(order, seed)`` starts a fresh device with one of ``ORDERS``:
``main-first`` runs the oldest non-default stream (a backend's main stream) for as long as it can and
the default stream last, ``workers-first`` the default stream first and then the newest streams,
``random`` a ready stream drawn with a seeded generator. Kernels are the real ``kernels/*.cu`` files,
run by the fiber harness of ``tests/cuda_cpu`` (``RawModule``); the rest is NumPy, run when reached.

Modelled, as CuPy 14.2's source does it (``cupy/cuda/stream.pyx``, ``cupy/_core/core.pyx``,
``cupy/cuda/memory.pyx``, ``cupy/cuda/graph.pyx``, ``cupy_backends/cuda/libs/cublas.pyx``):

- Streams: ``Stream(null=False, non_blocking=False, ptds=False, priority=None)``, ``Stream.null``,
  ``with stream:``, ``use()``, ``record``, ``wait_event`` (it waits for the event's latest recording
  at the time of the call; an event never recorded is complete), ``synchronize``, ``done``,
  ``priority`` (clamped to ``PRIORITY_RANGE``, as CUDA clamps), ``is_non_blocking``. Work on the null
  stream waits for all earlier work on blocking streams and work on blocking streams for earlier
  null-stream work; non-blocking streams never wait for the null stream, nor it for them.
- Events: ``Event(block, disable_timing)``, ``record``, ``synchronize``, ``done``,
  ``get_elapsed_time`` (host time between the moments the streams reached the two recordings;
  refused for an event that is not complete or was made with ``disable_timing``).
- Arrays: every creation (``asarray``, ``array``, ``empty``, ``zeros``, ``ones``, ``full``, the
  ``*_like``s, ``copy``, ``astype``), ufunc, reduction, ``copyto``, ``fill``, slice assignment and
  ``matmul``/``dot`` is enqueued on the *current* stream and allocates from a pool on the current
  stream. ``get(stream=None)`` copies on the current (or given) stream and synchronizes that stream
  only; ``bool``/``float``/``int``/``item``/``repr`` go through it. ``set(arr, stream=None)`` wants
  the same dtype (``TypeError``) and shape (``ValueError``); it reads a pinned source
  (``cuda.alloc_pinned_memory``) when the copy runs and a pageable one at once, as
  ``cudaMemcpyAsync`` does. ``asarray`` of a host array takes its copy at once. ``numpy`` calls on a
  device array are refused (``TypeError``, as CuPy's ``__array__``); ufuncs with a NumPy array
  operand too. Only basic indexing (ints, slices, ``None``, ``...``) gives views.
- The memory pool: memory freed (the last array using it collected) goes back to the pool of the
  stream that allocated it and is reused by the next allocation of that size on that stream, as
  CuPy's per-stream arenas do. The stand-in also queues a poison on that stream (NaN in every byte),
  and a later operation, enqueued before the free, that runs after the poison raises
  ``UseAfterFreeError``: memory handed back while another stream still uses it is caught. Fresh
  memory and ``empty`` are NaN-filled (0xFF bytes).
- Raw kernels: ``RawModule(code=, options=).get_function(name)`` returns a ``RawKernel`` called as
  ``kernel(grid, block, args, shared_mem=0, stream=None)``; a NumPy array argument of more than one
  element is refused, as CuPy does. ``RawModule.calls`` counts modules built and functions looked up.
- NCCL (``cupy.cuda.nccl``): ``get_unique_id``, ``NcclCommunicator(ndev, commId, rank)`` and its
  ``allReduce(sendbuf, recvbuf, count, datatype, op, stream)`` on pointers (``array.data.ptr``), enqueued
  on the stream whose ``ptr`` it is given. One process stands for every rank: the other ``ndev - 1`` hold
  the very same buffer, so a sum multiplies it by ``ndev`` when the stream reaches it. It must be in place,
  on the current stream, and not the legacy default one.
- The rest of what the project reaches: ``cuda.Device``, ``cuda.runtime.getDeviceProperties``,
  ``cuda.nvtx`` (``_UnavailableModule`` is what CuPy built without NVTX puts there), ``cuda.profiler``
  and ``cupyx.profiler.profile`` (no-ops); ``modules()`` says what ``sys.modules`` must hold.
- Capture: ``Stream.begin_capture()`` (refused on the null stream), ``end_capture()`` returning a
  ``Graph`` whose ``launch(stream=None)`` replays what was captured: kernel launches with the
  argument values they had (pointers and scalars baked in), copies, ufuncs. Streams join a capture by
  waiting on an event recorded in it and must be joined back before ``end_capture`` (else
  ``cudaErrorStreamCaptureUnjoined``). A replay runs the graph's nodes in an adversarial order that
  respects the captured dependencies only. During capture, as in CuPy: ``matmul``/``dot`` (cuBLAS)
  raise ``NotImplementedError``, ``set``/``asarray`` of host data (H2D) and ``get`` (D2H) raise
  ``RuntimeError``, and synchronizing a capturing stream, a captured event or the device raises
  ``CUDARuntimeError``.

Stricter than CuPy, on purpose:

- An allocation on a capturing stream raises ``CaptureAllocationError``. CuPy allows it (relaxed
  capture mode; the pool may call cudaMalloc), but the graph keeps writing memory that returns to the
  pool when the array dies: a graph must use preallocated buffers only.
- A capturing stream that waits on an event recorded outside the capture is refused: that
  dependency would not be part of the graph.
- Kernel arguments must match the kernel's C signature and arrays be C-contiguous (the harness).

Not modelled: several devices, the per-thread default stream, host threads (the current stream is
one global), ``launch_host_func``, memory hooks and async (``cudaMallocAsync``) pools, CUB's
temporary allocations inside reductions, advanced indexing, Jitify and name expressions, external
event record/wait nodes, and flush-to-zero (the harness computes float32 with denormals, as NumPy).
Performance is not modelled: ``get_elapsed_time`` measures host time.
"""

import builtins
import collections
import contextlib
import ctypes
import itertools
import numbers
import random
import time
import types
import weakref

import numpy as np

import cuda_cpu

ORDERS = ("main-first", "workers-first", "random")
PRIORITY_RANGE = (0, -5)
"""(least, greatest) stream priority of the stand-in's device; lower numbers are higher priorities."""
DEVICE_NAME = "CPU stand-in (cuda_cpu harness)"
_POISON = 0xFF  # every byte 0xFF: a NaN in float32 and float64, -1 in integers
_ROUND = 512  # CuPy's pool rounds allocations up to 512 bytes
_min, _max, _all, _any, _sum = builtins.min, builtins.max, builtins.all, builtins.any, builtins.sum
# (this module defines cupy.min, max, all, any and sum)


class CUDARuntimeError(RuntimeError):
    """What CuPy raises for a failed CUDA runtime call; ``status`` names the CUDA error."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


class UseAfterFreeError(RuntimeError):
    """An operation touched memory that went back to the pool while it was still queued."""


class CaptureAllocationError(RuntimeError):
    """An allocation on a capturing stream (see the module docstring: stricter than CuPy)."""


# -- the device: streams, the scheduler, the pool ----------------------------------------------------


class _Device:
    """Everything ``reset`` replaces: streams, pool, pinned ranges, logs, the order."""

    def __init__(self, order, seed):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}; got {order!r}")
        self.order, self.rng = order, random.Random(seed)
        self.streams = []
        self.ids = itertools.count(0x1000, 0x10)
        self.free = collections.defaultdict(list)  # (stream, bytes) -> chunks to reuse, last freed first
        self.pinned = []  # (start, end, weakref to the buffer)
        self.waits = []  # (what, stream ptr) of every host wait, in order
        self.trace = []  # ("record" | "wait" | "launch", stream ptr, detail) of every enqueued operation
        self.null = object.__new__(Stream)
        Stream._setup(self.null, self, null=True, non_blocking=False, priority=None)
        self.stack = [self.null]


_device = None


def reset(order="main-first", seed=0):
    """A fresh device whose queues run in ``order`` (one of ``ORDERS``; ``seed`` for ``random``)."""
    global _device
    _device = _Device(order, seed)
    Stream.null = _device.null
    return _device


def waits():
    """``(what, stream ptr)`` of every time the host blocked since ``reset``: what is ``get``,
    ``stream.synchronize``, ``event.synchronize`` or ``device.synchronize``."""
    return list(_device.waits)


def trace():
    """``(kind, stream ptr, detail)`` of every record, wait and kernel launch enqueued (or captured) since
    ``reset``; the detail is the event's ptr for a record, the ptr of the stream of the event's latest
    recording for a wait (None if it was never recorded), the kernel's name (or ``"graph"``) for a launch."""
    return list(_device.trace)


def pending():
    """Operations enqueued and not yet run, over all streams."""
    return _sum(len(s._queue) for s in _device.streams)


class _Item:
    __slots__ = ("kind", "name", "fn", "touches", "target")

    def __init__(self, kind, name, fn=None, touches=(), target=None):
        self.kind, self.name, self.fn, self.touches, self.target = kind, name, fn, touches, target


def _push(stream, item):
    stream._queue.append(item)
    stream._enqueued += 1


def _before(stream):
    """The legacy default stream's implicit ordering, for work about to be enqueued on ``stream``."""
    device = _device
    if stream._null:
        if _any(s._capture is not None and not s._non_blocking for s in device.streams):
            raise CUDARuntimeError("cudaErrorStreamCaptureImplicit",
                                   "the legacy stream is used while a blocking stream is capturing")
        for other in device.streams:
            if not other._null and not other._non_blocking and other._enqueued > other._completed:
                _push(stream, _Item("wait", "implicit", target=(other, other._enqueued)))
    elif not stream._non_blocking and device.null._enqueued > device.null._completed:
        _push(stream, _Item("wait", "implicit", target=(device.null, device.null._enqueued)))


def _enqueue(stream, name, fn, arrays=()):
    """Put ``fn()`` on ``stream`` (or into its capture); it runs when the scheduler reaches it.

    ``fn`` must hold plain NumPy views, never a device array: queued work does not keep memory alive.
    """
    touches = tuple((a._alloc.chunk, a._alloc.generation) for a in arrays)
    if stream._capture is not None:
        stream._capture.add(stream, name, fn, touches)
        return
    _before(stream)
    _push(stream, _Item("op", name, fn, touches))


def _check_touches(name, where, touches):
    for chunk, generation in touches:
        if chunk.dead >= generation:
            raise UseAfterFreeError(
                f"{name} on {where} touches memory that was freed while it was queued: the memory went "
                f"back to the pool of {chunk.stream!r}, which does not wait for {where}; keep the array "
                "alive (or synchronize) until the work using it has finished")


def _key(stream):
    if _device.order == "main-first":
        return (stream._null, stream._index)  # oldest first, the default stream last
    return (not stream._null, -stream._index)  # the default stream first, then the newest


def _pick(streams):
    if _device.order == "random":
        return _device.rng.choice(sorted(streams, key=lambda s: s._index))
    return _min(streams, key=_key)


def _ready(item):
    if item.kind != "wait":
        return True
    stream, seq = item.target
    return stream._completed >= seq


def _run(done, what):
    """Run queued work, in the device's order, until ``done()``."""
    while not done():
        ready = [s for s in _device.streams if s._queue and _ready(s._queue[0])]
        if not ready:
            stuck = [f"{s!r} waits on {s._queue[0].target[0]!r}" for s in _device.streams if s._queue]
            raise RuntimeError(f"deadlock in {what}: {'; '.join(stuck) or 'nothing is queued'}")
        stream = _pick(ready)
        _execute(stream, stream._queue.popleft())


def _execute(stream, item):
    try:
        if item.kind == "op":
            _check_touches(item.name, repr(stream), item.touches)
            item.fn()
        elif item.kind == "graph":
            item.fn()
    finally:
        stream._completed += 1
        for event, recording in stream._stamps.pop(stream._completed, ()):
            if event._recording == recording:
                event._time = time.perf_counter()


def _host_wait(what, stream, done):
    _device.waits.append((what, None if stream is None else stream.ptr))
    _run(done, what)


def _drained(streams):
    return lambda: _all(s._completed == s._enqueued for s in streams)


class _Chunk:
    """Pool memory: bytes owned by the pool for the device's life, handed to one array at a time."""

    __slots__ = ("buffer", "stream", "device", "next_generation", "dead")

    def __init__(self, nbytes, stream):
        self.buffer = np.full(nbytes, _POISON, dtype=np.uint8)
        self.stream, self.device = stream, _device
        self.next_generation = 0
        self.dead = -1  # the last generation whose free the stream has reached


class _Allocation:
    """One array's hold on a chunk; every view of the array shares it. Freed when collected."""

    __slots__ = ("chunk", "generation", "__weakref__")

    def __init__(self, chunk):
        self.chunk, self.generation = chunk, chunk.next_generation
        chunk.next_generation += 1

    def __del__(self):
        chunk = self.chunk
        if chunk.device is not _device:  # a previous device (reset since): nothing to do
            return
        stream, generation, buffer = chunk.stream, self.generation, chunk.buffer

        def poison():
            buffer.fill(_POISON)
            chunk.dead = _max(chunk.dead, generation)

        if stream._capture is None:
            _before(stream)
        _push(stream, _Item("op", "free", poison))  # the host frees; the stream reaches it in order
        _device.free[(stream, chunk.buffer.size)].append(chunk)


def _malloc(nbytes):
    stream = _device.stack[-1]
    if stream._capture is not None:
        raise CaptureAllocationError(
            f"allocation of {nbytes} bytes on {stream!r}, which is capturing: CuPy allows it, but the graph "
            "would keep using memory that returns to the pool when the array is freed; allocate every "
            "buffer before begin_capture()")
    size = _max(_ROUND, -(-nbytes // _ROUND) * _ROUND)
    free = _device.free.get((stream, size))
    return _Allocation(free.pop() if free else _Chunk(size, stream))


# -- streams, events, graphs -------------------------------------------------------------------------


class Stream:
    """``cupy.cuda.Stream``: a queue of work on the stand-in device."""

    null = None

    def __new__(cls, null=False, non_blocking=False, ptds=False, priority=None):
        if null:
            return _device.null
        if ptds:
            raise NotImplementedError("the CuPy stand-in does not model the per-thread default stream")
        stream = super().__new__(cls)
        cls._setup(stream, _device, False, non_blocking, priority)
        return stream

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        pass  # set up by __new__ (Stream(null=True) is the null stream itself)

    @staticmethod
    def _setup(stream, device, null, non_blocking, priority):
        least, greatest = PRIORITY_RANGE
        stream.ptr = 0 if null else next(device.ids)
        stream.device_id = -1 if null else 0
        stream._null, stream._non_blocking = null, bool(non_blocking) and not null
        stream._priority = 0 if priority is None else _min(_max(int(priority), greatest), least)
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
        _device.stack.append(self)
        return self

    def __exit__(self, *exc):
        _device.stack.pop()

    def use(self):
        _device.stack[-1] = self
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
        return self._completed == self._enqueued

    def synchronize(self):
        self._refuse_if_capturing()
        _host_wait("stream.synchronize", self, _drained([self]))

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        _wait(self, event)

    def begin_capture(self, mode=None):
        if self._null:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if self._capture is not None:
            raise CUDARuntimeError("cudaErrorIllegalState", f"{self!r} is capturing already")
        self._capture, self._frontier = _Capture(self), set()

    def end_capture(self):
        capture = self._capture
        if capture is None or capture.origin is not self:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnmatched",
                                   f"the capture was not begun on {self!r}")
        joined = capture.ancestors(self._frontier) | self._frontier
        unjoined = [s for s in capture.streams if s is not self and not s._frontier <= joined]
        for stream in capture.streams:
            stream._capture = stream._frontier = None
        capture.ended = True
        if unjoined:
            raise CUDARuntimeError(
                "cudaErrorStreamCaptureUnjoined",
                f"capture sequence contains a fork that was not joined to the primary stream: {unjoined} "
                "(record an event on each, and make the capturing stream wait for it before end_capture)")
        return Graph._from(capture)

    def is_capturing(self):
        return self._capture is not None

    def _refuse_if_capturing(self):
        if self._capture is not None:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"operation not permitted when stream is capturing ({self!r})")


class Event:
    """``cupy.cuda.Event``: complete once its stream has reached its latest recording."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.ptr = next(_device.ids)
        self._timing = not disable_timing
        self._stream, self._seq, self._time = None, 0, None
        self._recording = 0
        self._captured = None  # (capture, nodes) when recorded on a capturing stream
        self._source = None  # the stream of its latest recording, captured or not (for trace())

    def __repr__(self):
        return f"<Event {self.ptr:#x}>"

    def record(self, stream=None):
        stream = _device.stack[-1] if stream is None else stream
        self._recording += 1
        self._source = stream
        _device.trace.append(("record", stream.ptr, self.ptr))
        if stream._capture is not None:
            self._captured = (stream._capture, frozenset(stream._frontier))
            self._stream = None
            return
        _before(stream)
        self._captured, self._stream, self._seq, self._time = None, stream, stream._enqueued, None
        if stream._completed >= self._seq:
            self._time = time.perf_counter()
        else:
            stream._stamps.setdefault(self._seq, []).append((self, self._recording))

    @property
    def done(self):
        self._refuse_if_captured()
        return self._stream is None or self._stream._completed >= self._seq

    def synchronize(self):
        self._refuse_if_captured()
        if self._stream is not None:
            stream, seq = self._stream, self._seq
            _host_wait("event.synchronize", stream, lambda: stream._completed >= seq)

    def _refuse_if_captured(self):
        if self._captured is not None:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"{self!r} was recorded during a capture; it cannot be queried or awaited")


def _wait(stream, event):
    _device.trace.append(("wait", stream.ptr, None if event._source is None else event._source.ptr))
    if event._captured is not None:
        capture, nodes = event._captured
        if capture.ended:
            raise CUDARuntimeError("cudaErrorStreamCaptureIsolation",
                                   f"{event!r} was last recorded in a capture that has ended; record it again")
        if stream._capture is None:  # the stream joins the capture
            capture.streams.add(stream)
            stream._capture, stream._frontier = capture, set(nodes)
        elif stream._capture is capture:
            stream._frontier |= nodes
        else:
            raise CUDARuntimeError("cudaErrorStreamCaptureIsolation",
                                   "the wait would merge two independent capture sequences")
        return
    if event._stream is None:
        return  # an event never recorded is complete
    if stream._capture is not None:
        raise RuntimeError(
            f"{stream!r} is capturing and waits on {event!r}, recorded outside the capture: the graph would "
            "not hold that dependency (refused by the stand-in)")
    _before(stream)
    _push(stream, _Item("wait", "wait_event", target=(event._stream, event._seq)))


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
    return _device.stack[-1]


class _Node:
    __slots__ = ("index", "name", "fn", "touches", "stream", "deps")

    def __init__(self, index, name, fn, touches, stream, deps):
        self.index, self.name, self.fn, self.touches = index, name, fn, touches
        self.stream, self.deps = stream, deps


class _Capture:
    """The graph a capture builds: nodes with the dependencies their streams had when captured."""

    def __init__(self, origin):
        self.origin, self.nodes, self.streams = origin, [], {origin}
        self.ended = False

    def add(self, stream, name, fn, touches):
        node = _Node(len(self.nodes), name, fn, touches, stream, frozenset(stream._frontier))
        self.nodes.append(node)
        stream._frontier = {node.index}

    def ancestors(self, indices):
        seen, todo = set(), list(indices)
        while todo:
            for dep in self.nodes[todo.pop()].deps:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen


class Graph:
    """``cupy.cuda.Graph``: made by ``Stream.end_capture()``; ``launch(stream)`` replays it."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("currently this class cannot be initiated by the user and must be created "
                                  "via stream capture")

    @classmethod
    def _from(cls, capture):
        graph = object.__new__(cls)
        graph._nodes = tuple(capture.nodes)
        return graph

    def launch(self, stream=None):
        stream = _device.stack[-1] if stream is None else stream
        _device.trace.append(("launch", stream.ptr, "graph"))
        if stream._capture is not None:
            stream._capture.add(stream, "graph", self._replay, ())
            return
        _before(stream)
        _push(stream, _Item("graph", "graph", self._replay))

    def upload(self, stream=None):
        pass

    def _replay(self):
        """Every node once its dependencies have run, the ready ones taken in the device's order."""
        done, remaining = set(), list(self._nodes)
        while remaining:
            ready = [node for node in remaining if node.deps <= done]
            lane = _pick({node.stream for node in ready})
            node = next(node for node in ready if node.stream is lane)
            _check_touches(node.name, f"a graph node captured on {lane!r}", node.touches)
            node.fn()
            done.add(node.index)
            remaining.remove(node)


class Device:
    """``cupy.cuda.Device`` (one device, id 0)."""

    def __init__(self, device=None):
        self.id = 0
        self.compute_capability = "90"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def use(self):
        return self

    def synchronize(self):
        capturing = [s for s in _device.streams if s._capture is not None]
        if capturing:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported",
                                   f"operation not permitted when stream is capturing ({capturing})")
        _host_wait("device.synchronize", None, _drained(_device.streams))


# -- pinned host memory ------------------------------------------------------------------------------


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory: ``numpy.frombuffer(alloc_pinned_memory(n), dtype, count)``."""

    @property
    def ptr(self):
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))


def alloc_pinned_memory(size):
    memory = PinnedMemoryPointer(_max(int(size), 1))
    start = memory.ptr
    _device.pinned.append((start, start + len(memory), weakref.ref(memory)))
    return memory


def _is_pinned(array):
    start, end = array.ctypes.data, array.ctypes.data + array.nbytes
    return _any(lo <= start and end <= hi and ref() is not None for lo, hi, ref in _device.pinned)


# -- arrays ------------------------------------------------------------------------------------------


def _shape(shape):
    return (int(shape),) if isinstance(shape, numbers.Integral) else tuple(int(n) for n in shape)


def _new(shape, dtype, order="C"):
    shape, dtype = _shape(shape), np.dtype(dtype)
    alloc = _malloc(_max(int(np.prod(shape, dtype=np.int64)), 1) * dtype.itemsize)
    return ndarray._wrap(np.ndarray(shape, dtype, buffer=alloc.chunk.buffer, order=order), alloc)


def _basic(key):
    key = key if isinstance(key, tuple) else (key,)
    for part in key:
        if not (part is None or part is Ellipsis or isinstance(part, (slice, numbers.Integral))):
            raise TypeError(f"the CuPy stand-in supports basic indexing only (ints, slices, None, ...); got {part!r}")
    return key


def _scalar_or_device(value, what):
    if isinstance(value, ndarray):
        return value
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)} in {what}: pass a cupy.ndarray (cupy.asarray) or a scalar")
    if isinstance(value, (numbers.Number, np.generic)):
        return value
    raise TypeError(f"Unsupported type {type(value)} in {what}")


def _view(value):
    return value._a if isinstance(value, ndarray) else value


class ndarray:  # noqa: N801 - CuPy's name
    """``cupy.ndarray``: a view of pool memory; every operation on it is enqueued."""

    __slots__ = ("_a", "_alloc", "__weakref__")
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("the CuPy stand-in allocates its own memory")
        array = _new(shape, dtype, order)
        self._a, self._alloc = array._a, array._alloc

    @classmethod
    def _wrap(cls, view, alloc):
        array = object.__new__(cls)
        array._a, array._alloc = view, alloc
        return array

    shape = property(lambda self: self._a.shape)
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.ctypes.data))  # the memory pointer
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: self.transpose())

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        function = _UFUNCS.get(ufunc.__name__)
        if method != "__call__" or function is None:
            return NotImplemented
        return function(*inputs, **kwargs)

    def __array_function__(self, function, types, args, kwargs):
        ours = globals().get(function.__name__)
        if ours is None or not callable(ours):
            return NotImplemented
        return ours(*args, **kwargs)

    def __repr__(self):
        return repr(self.get())

    # views
    def __getitem__(self, key):
        key = _basic(key)
        view = self._a[key]
        if not isinstance(view, np.ndarray):
            view = self._a[(*key, Ellipsis)]  # all ints: a 0-d device array, as in CuPy
        return ndarray._wrap(view, self._alloc)

    def transpose(self, *axes):
        return ndarray._wrap(self._a.transpose(*axes), self._alloc)

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape
        view = self._a.reshape(shape, order=order)
        if np.shares_memory(view, self._a) or view.size == 0:
            return ndarray._wrap(view, self._alloc)
        return self.copy(order).reshape(shape, order=order)

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    # host transfers
    def get(self, stream=None, order="C", out=None, blocking=True):
        stream = _device.stack[-1] if stream is None else stream
        if stream._capture is not None:
            raise RuntimeError("the current stream is capturing, so D2H transfers are disallowed")
        if out is None:
            out = np.empty(self.shape, self.dtype, order=order)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained fromcupy.ndarray")
            if out.dtype != self.dtype:
                raise TypeError(f"{out.dtype} array cannot be obtained from {self.dtype} array")
            if out.shape != self.shape:
                raise ValueError(f"Shape mismatch. Expected shape: {self.shape}, actual shape: {out.shape}")
        view, host = self._a, out
        _enqueue(stream, "get", lambda: np.copyto(host, view), [self])
        if blocking or not _is_pinned(out):  # a copy into pageable memory returns once it is done
            _host_wait("get", stream, _drained([stream]))
        return out

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if self.shape != arr.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if self._a.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        elif self._a.flags.f_contiguous:
            arr = np.asfortranarray(arr)
        else:
            raise RuntimeError("Cannot set to non-contiguous array")
        stream = _device.stack[-1] if stream is None else stream
        if stream._capture is not None:
            raise RuntimeError("the current stream is capturing, so H2D transfers are disallowed")
        source = arr if _is_pinned(arr) else arr.copy()  # pageable memory is staged at once
        view = self._a
        _enqueue(stream, "set", lambda: np.copyto(view, source), [self])

    def item(self):
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.get().item()

    def __bool__(self):
        return bool(self.get())

    def __float__(self):
        return float(self.get())

    def __int__(self):
        return int(self.get())

    # device work on the current stream
    def copy(self, order="C"):
        out = _new(self.shape, self.dtype, order)
        copyto(out, self)
        return out

    def astype(self, dtype, copy=True):
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        out = _new(self.shape, dtype)
        copyto(out, self, casting="unsafe")
        return out

    def fill(self, value):
        view = self._a
        _enqueue(_device.stack[-1], "fill", lambda: view.fill(value), [self])

    def __setitem__(self, key, value):
        target = self[key]
        if isinstance(value, (ndarray, np.ndarray)):
            copyto(target, asarray(value) if isinstance(value, np.ndarray) else value, casting="unsafe")
        else:
            target.fill(value)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        return sum(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims)

    def max(self, axis=None, out=None, keepdims=False):
        return max(self, axis=axis, out=out, keepdims=keepdims)

    def min(self, axis=None, out=None, keepdims=False):
        return min(self, axis=axis, out=out, keepdims=keepdims)

    def all(self, axis=None, out=None, keepdims=False):
        return all(self, axis=axis, out=out, keepdims=keepdims)

    def any(self, axis=None, out=None, keepdims=False):
        return any(self, axis=axis, out=out, keepdims=keepdims)


def _operator(name, reflected=False, inplace=False):
    def method(self, other=None):
        function = _UFUNCS[name]
        if other is None:
            return function(self)
        if inplace:
            return function(self, other, out=self)
        return function(other, self) if reflected else function(self, other)

    return method


for _name, _ufunc_name in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "true_divide"),
                           ("pow", "power")):
    setattr(ndarray, f"__{_name}__", _operator(_ufunc_name))
    setattr(ndarray, f"__r{_name}__", _operator(_ufunc_name, reflected=True))
    setattr(ndarray, f"__i{_name}__", _operator(_ufunc_name, inplace=True))
for _name, _ufunc_name in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                           ("eq", "equal"), ("ne", "not_equal")):
    setattr(ndarray, f"__{_name}__", _operator(_ufunc_name))
ndarray.__neg__ = _operator("negative")
ndarray.__abs__ = _operator("absolute")


def _make_ufunc(name):
    ufunc = getattr(np, name)

    def call(*args, out=None, dtype=None, casting="same_kind"):
        if len(args) > ufunc.nin:  # out given by position, as NumPy and CuPy accept
            args, (out,) = args[:ufunc.nin], args[ufunc.nin:]
        args = [_scalar_or_device(arg, name) for arg in args]
        devices = [arg for arg in args if isinstance(arg, ndarray)]
        if not devices:
            raise TypeError(f"{name}: no cupy.ndarray among the arguments")
        shape = np.broadcast_shapes(*(arg.shape for arg in devices))
        probe = [np.zeros(1, arg.dtype) if isinstance(arg, ndarray) else arg for arg in args]
        result_dtype = ufunc(*probe, dtype=dtype, casting=casting).dtype
        if out is None:
            out = _new(shape, result_dtype)
        elif not isinstance(out, ndarray):
            raise TypeError(f"{name}: out must be a cupy.ndarray; got {type(out)}")
        elif np.broadcast_shapes(shape, out.shape) != out.shape:
            raise ValueError(f"{name}: out has shape {out.shape}, the result {shape}")
        views, target = [_view(arg) for arg in args], out._a
        _enqueue(_device.stack[-1], name, lambda: ufunc(*views, out=target, dtype=dtype, casting=casting),
                 [*devices, out])
        return out

    call.__name__ = name
    return call


_UFUNCS = {name: _make_ufunc(name) for name in (
    "add", "subtract", "multiply", "true_divide", "divide", "power", "negative", "absolute", "square", "sqrt",
    "exp", "log", "tanh", "maximum", "minimum", "reciprocal", "sign", "isfinite", "isnan", "isinf",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and", "logical_or",
    "logical_not")}
_UFUNCS["abs"] = _UFUNCS["absolute"]
globals().update(_UFUNCS)


def _make_reduction(name):
    function = getattr(np, name)

    def reduce(a, axis=None, dtype=None, out=None, keepdims=False):
        if not isinstance(a, ndarray):
            raise TypeError(f"{name}: expected a cupy.ndarray; got {type(a)}")
        axes = tuple(range(a.ndim)) if axis is None else tuple(
            ax % a.ndim for ax in ((axis,) if isinstance(axis, numbers.Integral) else axis))
        shape = tuple(1 if i in axes else n for i, n in enumerate(a.shape) if keepdims or i not in axes)
        options = {} if dtype is None else {"dtype": dtype}
        result_dtype = function(np.zeros((1,) * a.ndim or 1, a.dtype), **options).dtype
        if out is None:
            out = _new(shape, result_dtype)
        elif not isinstance(out, ndarray) or out.shape != shape:
            raise ValueError(f"{name}: out must be a cupy.ndarray of shape {shape}")
        view, target = a._a, out._a
        _enqueue(_device.stack[-1], name,
                 lambda: function(view, axis=axes, out=target, keepdims=keepdims, **options), [a, out])
        return out

    reduce.__name__ = name
    return reduce


sum = _make_reduction("sum")  # noqa: A001 - CuPy's names
max = _make_reduction("max")  # noqa: A001
min = _make_reduction("min")  # noqa: A001
all = _make_reduction("all")  # noqa: A001
any = _make_reduction("any")  # noqa: A001


def _cublas(name):
    stream = _device.stack[-1]
    if stream._capture is not None:
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
    return stream


def matmul(a, b, out=None):
    """cuBLAS (GEMM, batched when a or b has more than two dimensions), on the current stream."""
    stream = _cublas("matmul")
    for operand in (a, b):
        if not isinstance(operand, ndarray):
            raise TypeError(f"matmul: expected cupy.ndarray operands; got {type(operand)}")
    (sa, sb) = a.shape, b.shape
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must not be scalars")
    inner_a, inner_b = sa[-1], (sb[0] if b.ndim == 1 else sb[-2])
    if inner_a != inner_b:
        raise ValueError(f"matmul: mismatch in its core dimension: {sa} and {sb}")
    if a.ndim == 1 and b.ndim == 1:
        shape = ()
    elif a.ndim == 1:
        shape = sb[:-2] + sb[-1:]
    elif b.ndim == 1:
        shape = sa[:-1]
    else:
        shape = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    if out is None:
        out = _new(shape, np.result_type(a.dtype, b.dtype))
    elif not isinstance(out, ndarray) or out.shape != shape:
        raise ValueError(f"matmul: out must be a cupy.ndarray of shape {shape}")
    va, vb, target = a._a, b._a, out._a
    _enqueue(stream, "matmul", lambda: np.matmul(va, vb, out=target), [a, b, out])
    return out


def dot(a, b, out=None):
    return matmul(a, b, out=out)


def copyto(dst, src, casting="same_kind", where=None):
    if where is not None:
        raise NotImplementedError("copyto(where=) is not modelled")
    if not isinstance(dst, ndarray):
        raise TypeError(f"copyto: dst must be a cupy.ndarray; got {type(dst)}")
    src = _scalar_or_device(src, "copyto")
    if isinstance(src, ndarray):
        if not np.can_cast(src.dtype, dst.dtype, casting):
            raise TypeError(f"Cannot cast array data from {src.dtype} to {dst.dtype} according to the rule "
                            f"'{casting}'")
        np.broadcast_shapes(src.shape, dst.shape)
    target, source = dst._a, _view(src)
    _enqueue(_device.stack[-1], "copyto", lambda: np.copyto(target, source, casting="unsafe"),
             [dst] + ([src] if isinstance(src, ndarray) else []))


# -- creation ----------------------------------------------------------------------------------------


def empty(shape, dtype=float, order="C"):
    return _new(shape, dtype, order)


def _filled(shape, value, dtype, order="C"):
    out = _new(shape, dtype, order)
    out.fill(value)
    return out


def zeros(shape, dtype=float, order="C"):
    return _filled(shape, 0, dtype, order)


def ones(shape, dtype=float, order="C"):
    return _filled(shape, 1, dtype, order)


def full(shape, fill_value, dtype=None, order="C"):
    return _filled(shape, fill_value, np.result_type(fill_value) if dtype is None else dtype, order)


def empty_like(a, dtype=None):
    return empty(a.shape, a.dtype if dtype is None else dtype)


def zeros_like(a, dtype=None):
    return zeros(a.shape, a.dtype if dtype is None else dtype)


def ones_like(a, dtype=None):
    return ones(a.shape, a.dtype if dtype is None else dtype)


def full_like(a, fill_value, dtype=None):
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype)


def array(obj, dtype=None, copy=True, order="K"):
    if isinstance(obj, ndarray):
        if not copy and (dtype is None or np.dtype(dtype) == obj.dtype):
            return obj
        return obj.astype(obj.dtype if dtype is None else dtype)
    stream = _device.stack[-1]
    if stream._capture is not None:
        raise RuntimeError("the current stream is capturing, so H2D transfers are disallowed")
    host = np.array(obj, dtype=dtype, copy=True, order="F" if order == "F" else "C")  # staged at once
    out = _new(host.shape, host.dtype, "F" if order == "F" else "C")
    target = out._a
    _enqueue(stream, "asarray", lambda: np.copyto(target, host), [out])
    return out


def asarray(a, dtype=None, order=None):
    return array(a, dtype=dtype, copy=False, order=order or "K")


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    return np.asarray(a, order=order)


# -- modules and kernels -----------------------------------------------------------------------------


class RawKernel:
    """One kernel of a ``RawModule``: ``kernel(grid, block, args, shared_mem=0, stream=None)``."""

    def __init__(self, function, name):
        self._function, self.name = function, name

    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        for arg in args:
            if isinstance(arg, np.ndarray) and arg.size != 1:
                raise TypeError(f"You are trying to pass a numpy.ndarray of shape {arg.shape} as a kernel "
                                "parameter. Only numpy.ndarrays of size one can be passed by value. If you meant "
                                "to pass a pointer to __global__ memory, you need to pass a cupy.ndarray instead.")
        stream = _device.stack[-1] if stream is None else stream
        function, values = self._function, tuple(_view(arg) for arg in args)
        grid, block = tuple(grid), tuple(block)
        _device.trace.append(("launch", stream.ptr, self.name))
        _enqueue(stream, self.name, lambda: function(grid, block, values),
                 [arg for arg in args if isinstance(arg, ndarray)])


class RawModule:
    """``cupy.RawModule(code=..., options=...)`` compiled for the CPU harness (g++, cached on disk).

    ``RawModule.calls`` counts ``"module"`` (modules built) and ``"get_function"`` (lookups) since reset.
    """

    calls = collections.Counter()

    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=False):
        if code is None or path is not None or name_expressions:
            raise NotImplementedError("the CuPy stand-in builds RawModule(code=..., options=...) only")
        self.code, self.options = code, tuple(options)
        self._module = cuda_cpu.RawModule(code, self.options)
        RawModule.calls["module"] += 1

    def get_function(self, name):
        RawModule.calls["get_function"] += 1
        return RawKernel(self._module.get_function(name), name)


# -- NCCL --------------------------------------------------------------------------------------------

_NCCL_TYPES = {7: ctypes.c_float, 8: ctypes.c_double}  # NCCL_FLOAT32, NCCL_FLOAT64


class NcclCommunicator:
    """``cupy.cuda.nccl.NcclCommunicator`` of rank ``rank`` among ``ndev``, whose other ranks hold the same
    buffers as this one (see the module docstring)."""

    def __init__(self, ndev, commId, rank):  # noqa: N803 - CuPy's names
        if commId != _NCCL_ID or not 0 <= rank < ndev:
            raise ValueError(f"NcclCommunicator wants an id from get_unique_id() and 0 <= rank < ndev; got "
                             f"{commId!r}, rank {rank} of {ndev}")
        self.ndev = ndev

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):  # noqa: N802 - CuPy's name
        current = _device.stack[-1]
        if sendbuf != recvbuf or op != nccl.NCCL_SUM or datatype not in _NCCL_TYPES:
            raise ValueError("the stand-in's allReduce sums float32 or float64 in place")
        if stream != current.ptr or current._null:
            raise CUDARuntimeError("cudaErrorInvalidValue", f"allReduce on stream {stream:#x}: the stand-in wants "
                                   f"the current stream ({current.ptr:#x}), and not the legacy default one")
        view = np.ctypeslib.as_array(ctypes.cast(recvbuf, ctypes.POINTER(_NCCL_TYPES[datatype])), (count,))
        ranks = self.ndev
        _device.trace.append(("launch", stream, "ncclAllReduce"))
        _enqueue(current, "ncclAllReduce", lambda: np.multiply(view, ranks, out=view))


_NCCL_ID = b"stand-in nccl id"
nccl = types.ModuleType("cupy.cuda.nccl")
nccl.__dict__.update(available=True, get_unique_id=lambda: _NCCL_ID, NcclCommunicator=NcclCommunicator,
                     NCCL_SUM=0, NCCL_FLOAT32=7, NCCL_FLOAT64=8)


# -- the namespaces CuPy code reaches ----------------------------------------------------------------


class _UnavailableModule:
    """What CuPy puts in ``cupy.cuda.nvtx`` when it was built without NVTX: no functions at all."""

    available = False

    def __init__(self, name):
        self.__name__ = name


nvtx = types.SimpleNamespace(available=True, RangePush=lambda message, id_color=-1: None,
                             RangePop=lambda: None, Mark=lambda message, id_color=-1: None)
runtime = types.SimpleNamespace(
    CUDARuntimeError=CUDARuntimeError, is_hip=False, getDevice=lambda: 0, getDeviceCount=lambda: 1,
    getDeviceProperties=lambda device: {"name": DEVICE_NAME.encode()},
    deviceSynchronize=lambda: Device().synchronize(), streamCaptureModeRelaxed=2,
)
profiler = types.SimpleNamespace(start=lambda: None, stop=lambda: None)
cuda = types.SimpleNamespace(
    Stream=Stream, Event=Event, Device=Device, Graph=Graph, get_current_stream=get_current_stream,
    get_elapsed_time=get_elapsed_time, alloc_pinned_memory=alloc_pinned_memory,
    PinnedMemoryPointer=PinnedMemoryPointer, runtime=runtime, nvtx=nvtx, profiler=profiler, nccl=nccl,
    is_available=lambda: True,
)


@contextlib.contextmanager
def _profile():
    yield


cupyx = types.SimpleNamespace(profiler=types.SimpleNamespace(profile=_profile))
"""``cupyx`` as far as the project uses it: ``cupyx.profiler.profile()``."""


def is_available():
    return True


def modules():
    """What ``sys.modules`` must hold for ``import cupy``, ``from cupy.cuda import ...`` and
    ``import cupyx.profiler`` to reach the stand-in."""
    import sys

    return {"cupy": sys.modules[__name__], "cupy.cuda": cuda, "cupy.cuda.nccl": nccl, "cupyx": cupyx,
            "cupyx.profiler": cupyx.profiler}


reset()
