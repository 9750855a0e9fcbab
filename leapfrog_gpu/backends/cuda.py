"""CuPy on CUDA streams: cuBLAS for the chain (equations 2 and 5), our raw kernels for the rest.

Every stream is ``non_blocking`` (never the legacy null stream). ``launch`` enters the stream and calls
the function at once: what it enqueues (CuPy calls, raw kernels) goes on that stream, in order. An
exception it raises is kept and raised by the next ``synchronize()``, as on host streams; until then
``launch`` enqueues nothing more, so a failed step leaves the parameters alone.

The main stream runs the critical path at the device's highest stream priority, the workers at the
lowest. CuPy 14 does not expose ``cudaDeviceGetStreamPriorityRange``; CUDA clamps a priority outside
the device's range to its nearest end, so asking for the extremes below gets both ends.
"""

import numpy as np

from . import annotate
from .ops_cuda import CudaOps

MAIN_PRIORITY = -(2**31)
"""The main stream's priority: the device's highest (lower numbers are higher priorities)."""
WORKER_PRIORITY = 2**31 - 1
"""The worker streams' priority: the device's lowest."""


class CupyBackend:
    """CuPy arrays on the current device; one main stream and k worker streams created on demand."""

    name = "cupy"
    poisons = False

    def __init__(self):
        import cupy

        if not cupy.is_available():
            raise RuntimeError("CuPy is installed but no CUDA device is usable; use backend='numpy'")
        self.xp = cupy
        self.ops = CudaOps(cupy)
        self.device_name = _device_name(cupy)
        self.main = cupy.cuda.Stream(non_blocking=True, priority=MAIN_PRIORITY)
        self._workers = []
        self._comm = None
        self._staging = {}  # id(dst) -> (dst, pinned host buffer, event after the copy out of it)
        self._kept = {}  # id -> what enqueued work uses, until synchronize()
        self._error = None
        self._closed = False

    def __repr__(self):
        state = ", closed" if self._closed else ""
        return f"CupyBackend(device={self.device_name!r}, workers={len(self._workers)}{state})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def workers(self, k):
        """The first ``k`` worker streams, created on first use and kept for the backend's life."""
        self._check_open()
        while len(self._workers) < k:
            self._workers.append(self.xp.cuda.Stream(non_blocking=True, priority=WORKER_PRIORITY))
        return self._workers[:k]

    def comm_stream(self):
        """The communication stream (non-blocking), created on first use: NCCL calls go there alone."""
        self._check_open()
        if self._comm is None:
            self._comm = self.xp.cuda.Stream(non_blocking=True)
        return self._comm

    def event(self, name=""):
        del name
        return self.xp.cuda.Event(block=False, disable_timing=True)

    def launch(self, stream, name, fn, *args):
        self._check_open()
        if self._error is not None:
            return  # a failed step enqueues nothing more until synchronize() reports it
        try:
            with annotate.range(name), stream:
                fn(*args)
        except Exception as error:  # noqa: BLE001 - raised by synchronize(), as on host streams
            self._error = error

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
        that overwriting ``src`` afterwards is ordered after it.
        """
        if isinstance(src, self.xp.ndarray):
            caller = self.xp.cuda.get_current_stream()
            stream.wait_event(caller.record())
            with stream:
                self.xp.copyto(dst, src, casting="same_kind")
            caller.wait_event(stream.record())
        else:
            staging, copied = self._staged(dst)
            copied.synchronize()  # the previous copy out of this buffer has run: the host may overwrite it
            np.copyto(staging, src, casting="same_kind")
            dst.set(staging, stream=stream)  # from pinned memory: asynchronous, the host goes on
            copied.record(stream)

    def _staged(self, dst):
        """A pinned host buffer shaped like ``dst`` for ``copy_in``, and the event recorded after the
        last copy out of it (on first use: never recorded, so complete)."""
        entry = self._staging.get(id(dst))
        if entry is None:
            memory = self.xp.cuda.alloc_pinned_memory(dst.nbytes)
            staging = np.frombuffer(memory, dst.dtype, dst.size).reshape(dst.shape)
            entry = self._staging[id(dst)] = (dst, staging, self.event("copy_in"))
        return entry[1], entry[2]

    def keep(self, *objects):
        """Keep ``objects`` alive until the next ``synchronize()``: CuPy hands a collected array's
        memory back to its pool at once, for reuse on the stream that allocated it, while other streams
        may still be using it."""
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
            raise error

    def close(self):
        """Wait for the device and close; an error no ``synchronize()`` reported is dropped, as on host
        streams."""
        if not self._closed:
            self.xp.cuda.Device().synchronize()
            self._kept.clear()
            self._closed = True

    @property
    def closed(self):
        return self._closed

    def _check_open(self):
        if self._closed:
            raise RuntimeError("this CupyBackend is closed; create a new one with get_backend('cupy')")


def _device_name(cupy):
    device = cupy.cuda.Device()
    name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
