"""CuPy on CUDA streams: cuBLAS for the chain (equations 2 and 5), our raw kernels for the rest.

Every stream is ``non_blocking`` (never the legacy null stream). ``launch`` enters the stream and calls
the function at once: what it enqueues (CuPy calls, raw kernels) goes on that stream, in order. An
exception it raises is kept and raised by the next ``synchronize()``, as on host streams; until then
``launch`` enqueues nothing more, so a failed step leaves the parameters alone.

``capture`` turns the work of a function into a CUDA graph (CuPy's stream capture, in thread-local
mode), the chain on cuBLAS through nvmath-python (``cublas``), or, without it, on our own kernels
(kernels/chain.cu), since CuPy refuses its own cuBLAS calls during a capture; the graph is
instantiated with node priorities (``cuda_graph``), or, without ``cuda.bindings``, launched by CuPy.

The main stream runs the critical path at the device's highest stream priority, the workers at the
lowest. CuPy 14 does not expose ``cudaDeviceGetStreamPriorityRange``; CUDA clamps a priority outside
the device's range to its nearest end, so asking for the extremes below gets both ends.
"""

import weakref

import numpy as np

from . import annotate, cublas
from . import cuda_graph
from .ops_cuda import CudaOps

MAIN_PRIORITY = -(2**31)
"""The main stream's priority: the device's highest (lower numbers are higher priorities)."""
WORKER_PRIORITY = 2**31 - 1
"""The worker streams' priority: the device's lowest."""
_abandoned = []  # per backend released unclosed, its cuBLAS library (or None): the next backend waits for the device


class CupyBackend:
    """CuPy arrays on the current device; one main stream and k worker streams created on demand.

    ``chain``: what runs (2) and (5), ``"cublas"`` (the default) or ``"kernels"`` (kernels/chain.cu).
    cuBLAS runs through one nvmath-python handle on the main stream (``cublas.Blas``; a worker's product on a
    handle of its stream) in eager and graph steps alike, so that they agree to the bit with either chain;
    without nvmath-python, eager steps call ``cupy.matmul`` and graph steps run the chain on our kernels
    (``CudaOps.capturable_chain``), so that they agree only to rounding.

    ``release()`` ends it without a host wait: what a network collected unclosed calls for a backend it made by
    name, on whatever thread collects it (perhaps inside a capture). The null stream, to whose pool its memory
    goes back as it is collected, waits for the work queued on its streams; its streams, events and graphs go
    with the objects that hold them; the next backend made or closed waits for the device (the pools of its
    streams' memory are kept by their handles, which a stream made later may be given), then destroys its
    cuBLAS handle (and frees its workspace).
    """

    name = "cupy"
    poisons = False
    batch_order = "C"
    """Memory order of the (n, B) arrays a plan allocates: row-major, as the kernels take them."""

    def __init__(self, chain="cublas"):
        import cupy

        if not cupy.is_available():
            raise RuntimeError("CuPy is installed but no CUDA device is usable; use backend='numpy'")
        if _abandoned:
            cupy.cuda.Device().synchronize()
            _bury()
        self.xp = cupy
        self.device_name = _device_name(cupy)
        self.main = cupy.cuda.Stream(non_blocking=True, priority=MAIN_PRIORITY)
        blas, why = cublas.open_blas(cupy, self.main) if chain == "cublas" else (None, "")
        self.ops = CudaOps(cupy, chain, blas, why)
        self._workers = []
        self._comm = None
        self._streams = [self.main]  # every stream it made, for release()
        self._stream_names = {self.main.ptr: "main"}  # a timeline's stream names
        self.timeline = None  # the timing.Timeline recording launches, if any
        self._staging = {}  # (shape, dtype) -> _Staging
        self._kept = {}  # id -> what enqueued work uses, until synchronize()
        self._error = None
        self.release = weakref.finalize(self, _release, cupy, self._streams, self.ops.blas)

    def __repr__(self):
        state = ", closed" if self.closed else ""
        blas = "nvmath" if self.ops.blas is not None else "cupy.matmul"
        chain = ", chain='kernels'" if self.ops.chain == "kernels" else f", chain='cublas' ({blas})"
        return f"CupyBackend(device={self.device_name!r}{chain}, workers={len(self._workers)}{state})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def workers(self, k):
        """The first ``k`` worker streams, created on first use and kept for the backend's life."""
        self._check_open()
        while len(self._workers) < k:
            stream = self.xp.cuda.Stream(non_blocking=True, priority=WORKER_PRIORITY)
            self._stream_names[stream.ptr] = f"worker{len(self._workers)}"
            self._workers.append(stream)
            self._streams.append(stream)
        return self._workers[:k]

    def comm_stream(self):
        """The communication stream (non-blocking), created on first use: NCCL calls go there alone."""
        self._check_open()
        if self._comm is None:
            self._comm = self.xp.cuda.Stream(non_blocking=True)
            self._stream_names[self._comm.ptr] = "comm"
            self._streams.append(self._comm)
        return self._comm

    def event(self, name=""):
        del name
        return self.xp.cuda.Event(block=False, disable_timing=True)

    def launch(self, stream, name, fn, *args):
        """Call ``fn(*args)`` with ``stream`` current, inside an NVTX range called ``name``; when a
        ``timing.Timeline`` is recording, between two timing events recorded on ``stream``."""
        self._check_open()
        if self._error is not None:
            return  # a failed step enqueues nothing more until synchronize() reports it
        try:
            with annotate.range(name), stream:
                if self.timeline is None:
                    fn(*args)
                    return
                stamp = self.timeline.stamp(self._stream_names.get(stream.ptr, f"stream {stream.ptr:#x}"), name)
                stamp.start = self.xp.cuda.Event()
                stamp.start.record(stream)
                fn(*args)
                stamp.end = self.xp.cuda.Event()
                stamp.end.record(stream)
        except Exception as error:  # noqa: BLE001 - raised by synchronize(), as on host streams
            self._error = error

    def elapsed_ns(self, start, end):
        """Nanoseconds between two recorded timing events (``cudaEventElapsedTime``, 0.5 us resolution)."""
        return round(self.xp.cuda.get_elapsed_time(start, end) * 1e6)

    def share(self, stream, streams, held=1):
        """Nothing: cuBLAS has no threads to share between streams."""

    def record(self, stream, event):
        event.record(stream)

    def wait(self, stream, event):
        stream.wait_event(event)

    def range(self, stream, name):
        del stream
        return annotate.range(name)

    def copy_in(self, stream, dst, src):
        """Copy ``src`` (NumPy or CuPy) into ``dst`` in stream order; ``src`` may be reused on return.

        A CuPy ``src`` belongs to the caller's current stream: ``stream`` waits for what that stream
        has enqueued (the work that produced ``src``), and the caller's stream waits for the copy, so
        that overwriting ``src`` afterwards is ordered after it. A NumPy ``src`` goes through pinned
        staging buffers (``_Staging``): the host blocks only to reuse one that a copy still reads.
        """
        if isinstance(src, self.xp.ndarray):
            caller = self.xp.cuda.get_current_stream()
            stream.wait_event(caller.record())
            with stream:
                self.xp.copyto(dst, src, casting="same_kind")
            caller.wait_event(stream.record())
        else:
            key = (dst.shape, dst.dtype.str)
            if key not in self._staging:
                self._staging[key] = _Staging(self.xp, dst.shape, dst.dtype)
            self._staging[key].copy(stream, dst, src)

    def capture(self, body):
        """Run ``body()`` now, eagerly: the work it enqueues is this call's, and what it creates on first
        use (compiled kernels, worker streams, events) then exists, outside any capture. Then capture a
        second call on the main stream into a CUDA graph: the workers join the capture by waiting on
        events recorded in it, and are joined back before it ends. Both calls run the chain on what a
        capture can hold (``CudaOps.capturable_chain``). Returns the graph, instantiated with node
        priorities (without ``cuda.bindings``, CuPy's, with a warning); ``launch()`` launches it on the main
        stream.

        The capture is in thread-local mode: a call from this thread that may synchronize (a host wait,
        a query, an allocation the pool cannot serve) fails, and invalidates the capture, instead of
        passing silently as CuPy's default relaxed mode lets it. When a launch has failed (in either
        call, or in a step before them) or the capture could not end (``cudaErrorStreamCaptureInvalidated``,
        ``...Unjoined``), capture returns None: the next ``synchronize()`` raises the first error, as
        after an eager step.
        """
        self._check_open()
        with self.ops.capturable_chain():
            body()
            if self._error is not None:
                return None
            self.main.begin_capture(mode=self.xp.cuda.runtime.streamCaptureModeThreadLocal)
            try:
                body()
            finally:
                graph = self._end_capture()
        if self._error is not None:
            return None
        try:
            return cuda_graph.instantiate(graph, self.main)
        except Exception as error:  # noqa: BLE001 - raised by synchronize(), as a failed launch is
            self._error = error
            return None

    def _end_capture(self):
        """End the main stream's capture: its graph, or None with the error kept for ``synchronize()``."""
        try:
            return self.main.end_capture()
        except self.xp.cuda.runtime.CUDARuntimeError as error:
            self._error = self._error or error
            return None

    def keep(self, *objects, reader=None):
        """Keep ``objects`` alive until the next ``synchronize()``: CuPy hands a collected array's
        memory back to its pool at once, for reuse on the stream that allocated it, while other streams
        may still be using it. ``reader`` is not held: a launch reads the network as it is enqueued."""
        for item in objects:
            self._kept[id(item)] = item

    def synchronize(self):
        """Wait for the whole device, the default stream (where CuPy allocates) included; raise the
        first exception a launch raised since the last call."""
        self._check_open()
        self.xp.cuda.Device().synchronize()
        self._kept.clear()
        error, self._error = self._error, None
        if error is not None:
            try:
                raise error
            finally:
                del error  # held here, it would hold its traceback's frames (``NumpyBackend._raise_error``)

    def close(self):
        """Wait for the device, ``release()`` and destroy the cuBLAS handle; an error no ``synchronize()``
        reported is dropped, as on host streams."""
        if not self.closed:
            self.xp.cuda.Device().synchronize()
            self._kept.clear()
            self.release()
            _bury()

    @property
    def closed(self):
        return not self.release.alive

    def _check_open(self):
        if self.closed:
            raise RuntimeError("this CupyBackend is closed; create a new one with get_backend('cupy')")


class _Staging:
    """Pinned host buffers of one shape and dtype, taken in turn by ``copy_in``: the batch is copied into
    one on the host, then to the device asynchronously (pinned memory makes that copy truly
    asynchronous). A buffer is reused only once the copy out of it has run (its event), so the host
    runs up to ``count`` copies ahead of the stream before it waits."""

    def __init__(self, cupy, shape, dtype, count=2):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        self.buffers = [np.ndarray(shape, dtype, buffer=cupy.cuda.alloc_pinned_memory(nbytes)) for _ in range(count)]
        self.copied = [cupy.cuda.Event(block=False, disable_timing=True) for _ in range(count)]
        self.turn = 0

    def copy(self, stream, dst, src):
        i, self.turn = self.turn, (self.turn + 1) % len(self.buffers)
        self.copied[i].synchronize()  # the copy out of this buffer two calls ago has run
        np.copyto(self.buffers[i], src, casting="same_kind")
        dst.set(self.buffers[i], stream=stream)
        self.copied[i].record(stream)


def _release(cupy, streams, blas):
    """``release()``: the null stream waits for what is queued on ``streams`` (memory freed later goes back to its
    pool, whose next allocations then come after that work); ``blas`` (None: none) is kept for ``_bury``. Memory
    that launches on ``streams`` freed goes back to pools of their own, kept by the streams' handles, which the
    driver may give a stream made later: the next backend made or closed waits for the device first, nvmath or
    not."""
    for stream in streams:
        cupy.cuda.Stream.null.wait_event(stream.record())
    _abandoned.append(blas)


def _bury():
    """Destroy the abandoned cuBLAS handles: the caller has waited for the device, so no queued call uses them."""
    while _abandoned:
        blas = _abandoned.pop()
        if blas is not None:
            blas.close()


def _device_name(cupy):
    device = cupy.cuda.Device()
    name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
