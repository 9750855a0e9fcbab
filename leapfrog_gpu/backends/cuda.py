"""CuPy on CUDA streams: cuBLAS for the chain (equations 2 and 5), our raw kernels for the rest.

Every stream is ``non_blocking`` (never the legacy null stream). ``launch`` enters the stream and calls
the function at once: what it enqueues (CuPy calls, raw kernels) goes on that stream, in order.
"""

import numpy as np

from . import annotate
from .ops_cuda import CudaOps


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
        self.main = cupy.cuda.Stream(non_blocking=True)
        self._workers = []
        self._comm = None
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
            self._workers.append(self.xp.cuda.Stream(non_blocking=True))
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
        with annotate.range(name), stream:
            fn(*args)

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
            with stream:
                dst.set(np.ascontiguousarray(src, dtype=dst.dtype), stream=stream)
            stream.synchronize()  # the host buffer may be pageable or temporary

    def synchronize(self):
        """Wait for the whole device, the default stream (where CuPy allocates) included."""
        self._check_open()
        self.xp.cuda.Device().synchronize()

    def close(self):
        if not self._closed:
            self.synchronize()
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
