"""Host streams: CUDA's stream and event model on CPU threads, so one schedule runs on NumPy too.

A host stream is one worker thread draining a FIFO of operations; an event is set when its stream
reaches the ``record``; a ``wait`` holds its stream until the event's latest recording (as of the
moment the wait was enqueued, as in ``cudaStreamWaitEvent``) has been reached. NumPy's large ufuncs
and the backend's large products (``host_blas``) release the GIL, so k host streams really run on k
cores.

Modes: ``threads``, one thread per stream (the default); ``serial``, everything inline on the caller, in
program order, an error raised at once (debugging); ``deferred``, nothing run until ``synchronize()``, which then
interleaves the streams on the caller in a fixed order: ``main-first`` and ``workers-first`` starve one side for
as long as the events allow, ``random`` picks a ready stream with a seeded generator. A missing wait then shows
up deterministically as a wrong result.

Chaos (``chaos=seed``, any mode): a seeded random delay before every queued operation on every stream,
and ``poisons = True``, which asks the network to fill each buffer with NaN the moment the schedule says
it is dead. A missing wait then reads poison, or a value from the wrong step, under ever-changing timing.

Graphs (``capture``): the work a function enqueues, recorded once and replayed by ``launch()`` on the
same streams, in every mode (``leapfrog_gpu.backends.host_graph``).
"""

import contextlib
import random
import threading
import time
import weakref

import numpy as np

from . import annotate, host_blas, host_streams, ops_numpy
from .host_graph import CaptureError, HostCapture
from .host_streams import HostEvent, HostStream, Item, drain, stop

MODES = ("threads", "serial", "deferred")
ORDERS = ("main-first", "workers-first", "random")


class NumpyBackend:
    """NumPy arrays on host streams. ``with NumpyBackend() as backend: ...`` joins every thread on exit; ``release()``
    ends it without waiting (``host_streams.stop``), for a network collected unclosed, on the thread collecting it.

    Args:
        mode: one of ``MODES`` (see the module docstring).
        blas_threads: BLAS threads for the life of the backend (process-wide: ``blas_limits``, given back
            on ``close()`` or ``release()``); ``None`` leaves BLAS as it is.
        order: interleaving of the ``deferred`` mode, one of ``ORDERS``.
        seed: seed of the ``random`` order.
        trace: keep ``self.trace``, a list of ``(stream, what, name)`` in execution order, where what
            is ``start``/``end`` of an op, ``record`` or ``wait`` (appended once the wait is over).
        chaos: ``None``, or the seed of chaos mode (see the module docstring).
        max_delay: the longest chaos delay, in seconds.
    """

    name = "numpy"
    xp, ops = np, ops_numpy
    batch_order = "F"  # a plan's (n, B) arrays batch-major, where OpenBLAS runs (5) fastest (docs/design.md §3)

    def __init__(self, mode="threads", blas_threads=None, order="main-first", seed=0, trace=False,
                 chaos=None, max_delay=2e-4):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}; got {mode!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}; got {order!r}")
        if blas_threads is not None and (not isinstance(blas_threads, (int, np.integer)) or isinstance(
                blas_threads, bool) or blas_threads < 1):
            raise ValueError(f"blas_threads must be None or an integer >= 1; got {blas_threads!r}")
        self.mode, self.order, self.blas_threads = mode, order, None if blas_threads is None else int(blas_threads)
        if chaos is not None and (isinstance(chaos, bool) or not isinstance(chaos, int)):
            raise ValueError(f"chaos must be None or an integer seed; got {chaos!r}")
        if not (isinstance(max_delay, (int, float)) and 0 <= max_delay <= 1):
            raise ValueError(f"max_delay must be a number of seconds in [0, 1]; got {max_delay!r}")
        self.trace = [] if trace else None
        self.timeline = None  # the timing.Timeline recording launches, if any
        self.chaos, self.max_delay, self.poisons = chaos, max_delay, chaos is not None
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)  # notified when no operation is pending
        self._pending, self._error = 0, None
        self._readers = {}  # what keep() holds until nothing is queued
        host_blas.load()  # loaded before the limit, which reaches only the BLAS libraries loaded by then
        blas = None if blas_threads is None else host_blas.hold(blas_threads)
        self._queues = []  # those of the streams' threads
        self.release = weakref.finalize(self, stop, self._queues, blas)
        self._streams = []
        self.main = self._new_stream("main")
        self._workers, self._comm = [], None
        self._copied = self.event("copy_in")  # what copy_in waits for, recorded anew by every call
        self._capture = None  # the HostCapture in progress

    def __repr__(self):
        blas = "" if self.blas_threads is None else f", blas_threads={self.blas_threads}"
        chaos = "" if self.chaos is None else f", chaos={self.chaos}"
        state = ", closed" if self.closed else ""
        return (f"NumpyBackend(mode={self.mode!r}{blas}{chaos}, workers={len(self._workers)}{state}, "
                f"blas={host_blas.library()!r})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- streams and events -------------------------------------------------------------------------

    def _new_stream(self, name):
        self._check_open()
        stream = HostStream(name)
        if self.chaos is not None:
            stream.delays = random.Random(self.chaos * 1009 + len(self._streams))
        self._streams.append(stream)
        if self.mode == "threads":  # the queue is the backend's before its thread starts: release() stops it whatever
            self._queues.append(stream.queue)  # interrupts the start (Ctrl-C lands in Thread.start's wait)
            stream.thread = threading.Thread(target=drain, args=(stream,), name=f"leapfrog-{name}", daemon=True)
            stream.thread.start()
        return stream

    def workers(self, k):
        """The first ``k`` worker streams, created on first use and kept for the backend's life."""
        while len(self._workers) < k:
            self._workers.append(self._new_stream(f"worker{len(self._workers)}"))
        return self._workers[:k]

    def comm_stream(self):
        """The communication stream, created on first use: the one stream that calls the communicator,
        so that collectives leave in program order, the same on every rank."""
        if self._comm is None:
            self._comm = self._new_stream("comm")
        return self._comm

    def event(self, name=""):
        return HostEvent(name, self._lock)

    def launch(self, stream, name, fn, *args):
        """Enqueue ``fn(*args)`` on ``stream``; it runs inside an NVTX range called ``name`` (and is
        stamped when a ``timing.Timeline`` is recording)."""
        self._submit(stream, self._item(stream, name, fn, *args))

    def _item(self, stream, name, fn, *args):
        """The item of a launch, stamped when a timeline is recording."""
        if self.timeline is not None:
            fn = _stamped(self.timeline.stamp(stream.name, name), fn)
        return Item("op", name, fn, args)

    @staticmethod
    def elapsed_ns(start, end):
        """Nanoseconds between two marks of a timeline's clock (``perf_counter_ns`` values here)."""
        return end - start

    def share(self, stream, streams, held=1):
        """From here on in ``stream``'s order, ``streams`` streams run products at once, in place of the ``held``
        of the share this caller holds (``host_blas.share``)."""
        self._submit(stream, Item("blas", "share", host_blas.share, (streams, held)))

    def record(self, stream, event):
        if self._capture is not None:
            self._capture.record(stream, event)
            return
        event.recorded += 1
        self._submit(stream, Item("record", event.name, event=event, generation=event.recorded))

    def wait(self, stream, event):
        if self._capture is not None:
            self._capture.wait(stream, event)
            return
        self._submit(stream, Item("wait", event.name, event=event, generation=event.recorded))

    def capture(self, body):
        """Run ``body()`` now, eagerly: the work it enqueues is this call's, and whatever it creates on
        first use (buffers, streams, events) then exists. Then capture a second call of it: what it
        enqueues on the main stream and on the streams that join it (see ``host_graph``) is recorded,
        not run. Returns the ``HostGraph``, whose ``launch()`` enqueues that work again."""
        self._check_open()
        if self._capture is not None:
            raise CaptureError("a capture is already in progress on this backend")
        body()
        self._capture = HostCapture(self.main, Item)
        try:
            body()
            return self._capture.graph(self)
        finally:
            self._capture = None

    def replay(self, graph):
        """Enqueue a ``HostGraph``: each stream's items as one entry, the generations of its events
        offset past every recording so far, so that its waits match its own records."""
        self._check_open()
        if self._capture is not None:
            raise CaptureError("launching a graph inside a capture is not supported")
        bases = {}
        for event, count in graph.records.items():
            bases[event] = event.recorded
            event.recorded += count
        if self.mode == "serial":
            for stream, item in graph.order:
                self._run_now(stream, item, bases)
        elif self.mode == "deferred":
            for stream, items in graph.streams:
                stream.deferred.extend((item, bases) for item in items)
        else:
            with self._lock:
                self._pending += len(graph.streams)
            for stream, items in graph.streams:
                stream.queue.put((self._run, items, bases))

    def keep(self, *objects, reader=None):
        """Hold ``reader`` (the network whose step was queued) until nothing is queued: its operations may read it
        as they run, and its release must follow them; they hold ``objects``, their arguments, themselves."""
        with self._lock:
            if reader is not None and (self._pending or any(s.deferred for s in self._streams)):
                self._readers[id(reader)] = reader

    def range(self, stream, name):
        """Bracket what is enqueued on ``stream`` inside the ``with`` block with an NVTX range."""
        return self._stream_range(stream, name) if annotate.enabled else annotate.range(name)

    @contextlib.contextmanager
    def _stream_range(self, stream, name):
        """An NVTX range opened and closed by ``stream`` itself, around what is enqueued in between."""
        self._submit(stream, Item("mark", name, annotate.push, (name,)))
        try:
            yield
        finally:
            self._submit(stream, Item("mark", name, annotate.pop))

    def copy_in(self, stream, dst, src):
        """Copy host array ``src`` into ``dst`` in stream order; ``src`` may be reused once this returns. With
        threads, a copy made while nothing is queued on any stream runs on the caller (stream order holds, and
        the stream's thread is not woken for it); otherwise the caller waits until the stream has made it."""
        self._refuse_in_capture("copy_in")
        if self.mode == "deferred":
            src = np.array(src, copy=True)
        elif self.mode == "threads":
            with self._lock:
                idle = self._pending == 0
            if idle:
                self._execute(stream, self._item(stream, "copy_in", np.copyto, dst, src, "same_kind"))
                return
            done = self._copied
            self.launch(stream, "copy_in", np.copyto, dst, src, "same_kind")
            self.record(stream, done)
            with self._lock:
                done.reached.wait_for(lambda: done.completed >= done.recorded)
            return
        self.launch(stream, "copy_in", np.copyto, dst, src, "same_kind")

    def synchronize(self):
        """Wait for every stream to drain; re-raise the first exception an operation raised."""
        self._check_open()
        self._refuse_in_capture("synchronize")
        if self.mode == "deferred":
            self._run_deferred()
        with self._lock:
            self._idle.wait_for(lambda: self._pending == 0)
        self._raise_error()

    def close(self):
        """Let queued work finish, ``release()``, and wait for every thread to end. Safe to call twice."""
        if self.closed:
            return
        if self.mode == "threads":
            with self._lock:
                self._idle.wait_for(lambda: self._pending == 0)
        self.release()
        for stream in self._streams:
            if stream.thread is not None:
                stream.thread.join()

    closed = property(lambda self: not self.release.alive)
    stopped = property(lambda self: self.closed and not any(s.thread and s.thread.is_alive() for s in self._streams),
                       doc="Closed, and its threads ended: the work queued before a ``release()`` is done.")

    # -- execution ----------------------------------------------------------------------------------

    def _check_open(self):
        if self.closed:
            raise RuntimeError("this NumpyBackend is closed; create a new one with get_backend('numpy')")

    def _refuse_in_capture(self, what):
        if self._capture is not None:
            raise CaptureError(f"{what}() during a capture: a captured step cannot wait for or copy from the host")

    def _submit(self, stream, item):
        self._check_open()
        if self._capture is not None:
            self._capture.add(stream, item)
        elif self.mode == "serial":
            self._run_now(stream, item)
        elif self.mode == "deferred":
            stream.deferred.append((item, None))
        else:
            with self._lock:
                self._pending += 1
            stream.queue.put((self._run, (item,), None))

    @host_streams.quiet
    def _run_now(self, stream, item, bases=None):
        """Serial mode: run ``item`` on the caller; raise its error at once."""
        self._execute(stream, item, bases)
        self._raise_error()

    def _raise_error(self):
        """Raise the first exception an operation raised, if any, and forget it, holding it in no frame: its traceback
        holds the frames it went through (a network's), a cycle that would keep them, and the threads, until a
        collection."""
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            try:
                raise error
            finally:
                del error

    def _run(self, stream, items, bases):
        """Run one entry of ``stream``'s queue on its thread (``host_streams.drain``): one item, or a graph's
        items for this stream."""
        for item in items:
            self._execute(stream, item, bases)
        with self._lock:
            self._pending -= 1
            if self._pending == 0:
                self._readers.clear()  # a network freed here releases its backend on this thread, waiting for nothing
                self._idle.notify_all()

    def _execute(self, stream, item, bases=None):
        """Run one item; ``bases`` (a graph's launch) offsets the generations of its events."""
        if stream.delays is not None:
            time.sleep(stream.delays.uniform(0, self.max_delay))
        if item.kind == "op":
            if self._error is not None:
                return  # a failed step runs no further operation until synchronize() reports it
            self._log(stream, "start", item.name)
            try:
                with annotate.range(item.name):
                    item.fn(*item.args)
            except BaseException as error:  # noqa: BLE001 - re-raised on the caller by synchronize()
                with self._lock:
                    if self._error is None:
                        self._error = error
                return
            self._log(stream, "end", item.name)
        elif item.kind == "record":
            generation = item.generation + (bases[item.event] if bases else 0)
            with self._lock:
                item.event.completed = max(item.event.completed, generation)
                self._log(stream, "record", item.name)
                item.event.reached.notify_all()
        elif item.kind == "wait":
            generation = item.generation + (bases[item.event] if bases else 0)
            with self._lock:
                if self.mode == "threads":
                    item.event.reached.wait_for(lambda: item.event.completed >= generation)
                elif item.event.completed < generation:
                    raise RuntimeError(f"{stream.name} waits on {item.event!r}, which nothing earlier records")
                self._log(stream, "wait", item.name)
        else:
            item.fn(*item.args)

    def _log(self, stream, what, name):
        if self.trace is not None:
            with self._lock:
                self.trace.append((stream.name, what, name))

    @host_streams.quiet
    def _run_deferred(self):
        while True:
            ready = [s for s in self._streams if s.deferred and self._ready(s.deferred[0])]
            if not ready:
                stuck = [s.name for s in self._streams if s.deferred]
                if stuck:
                    raise RuntimeError(f"deadlock: streams {stuck} wait on events nothing will record")
                self._readers.clear()
                return
            stream = self._pick(ready)
            self._execute(stream, *stream.deferred.popleft())

    @staticmethod
    def _ready(entry):
        item, bases = entry
        return item.kind != "wait" or item.event.completed >= item.generation + (bases[item.event] if bases else 0)

    def _pick(self, ready):
        if self.order == "random":
            return self._rng.choice(ready)
        workers = [s for s in ready if s is not self.main]
        if self.order == "main-first":
            return self.main if self.main in ready else workers[0]
        return workers[0] if workers else self.main


def _stamped(stamp, fn):
    """``fn`` with the stream thread's clock read just before and after it, into ``stamp``."""

    def run(*args):
        stamp.start = time.perf_counter_ns()
        fn(*args)
        stamp.end = time.perf_counter_ns()

    return run

