"""A CuPy stand-in on the CPU, so that the CuPy backend's own code (``backends/cuda.py``,
``backends/ops_cuda.py`` and the ``cupy`` branches of the network) runs in CI.

Arrays are NumPy arrays of a subclass with ``get()`` and ``set()``; ``RawModule`` is the CPU harness
(``cuda_cpu``), so the real kernels run; streams and events keep CuPy's interface and record what is
called on them, but run everything at once, in program order. It checks the glue, not concurrency:
the host-stream backend and the GPU tests do that.
"""

import types

import numpy as np

import cuda_cpu


class ndarray(np.ndarray):  # noqa: N801 - CuPy's name
    def get(self):
        return np.array(self, copy=True).view(np.ndarray)

    def set(self, array, stream=None):
        np.copyto(self, array)


def _device(array):
    return array.view(ndarray) if isinstance(array, np.ndarray) else array


def _wrap(function):
    def call(*args, **kwargs):
        return _device(function(*args, **kwargs))

    return call


def asarray(a, dtype=None):
    if type(a).__module__.startswith("numpy") and not isinstance(a, ndarray):
        a = np.array(a, dtype=dtype, copy=True)  # a host array becomes a device copy, as in CuPy
    return _device(np.asarray(a, dtype=dtype))


class Stream:
    current = None
    log = []  # (what, stream ptr) of every wait_event and record, in order

    def __init__(self, non_blocking=False, null=False):
        self.non_blocking, self.ptr = non_blocking, 0 if null else id(self)
        self._outer = []

    def __enter__(self):
        self._outer.append(Stream.current)
        Stream.current = self
        return self

    def __exit__(self, *exc):
        Stream.current = self._outer.pop()

    def synchronize(self):
        pass

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        Stream.log.append(("wait", self.ptr, event.stream_ptr))


class Event:
    def __init__(self, block=False, disable_timing=False):
        self.stream_ptr = None

    def record(self, stream=None):
        self.stream_ptr = (stream or get_current_stream()).ptr
        Stream.log.append(("record", self.stream_ptr, self.stream_ptr))

    def synchronize(self):
        pass


Stream.current = Stream(null=True)


def get_current_stream():
    return Stream.current


class Device:
    id = 0

    def synchronize(self):
        pass


cuda = types.SimpleNamespace(
    Stream=Stream, Event=Event, Device=Device, get_current_stream=get_current_stream,
    runtime=types.SimpleNamespace(getDeviceProperties=lambda device: {"name": b"CPU harness"}),
    alloc_pinned_memory=bytearray,  # host memory that np.ndarray(buffer=...) can wrap, as CuPy's can
)
RawModule = cuda_cpu.RawModule


def is_available():
    return True


def __getattr__(name):
    """Everything else is NumPy's, returning device arrays."""
    return _wrap(getattr(np, name))
