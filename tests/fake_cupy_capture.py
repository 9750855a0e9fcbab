"""The CuPy stand-in of ``fake_cupy`` with stream capture, at least as strict as CuPy 14 about it.

Kept apart from ``fake_cupy`` (which it extends, changing nothing there), for the graph tests:
``monkeypatch.setitem(sys.modules, "cupy", fake_cupy_capture)``.

``Stream.begin_capture()`` and ``end_capture()`` (cupy/cuda/stream.pyx) return a ``Graph`` whose
``launch(stream)`` (cupy/cuda/graph.pyx) runs what the capture recorded: the raw kernels launched on
the capturing stream and on the streams that joined it, in the order they were launched (the stand-in
runs everything at once, in program order, so any order that respects the capture's dependencies will
do). Nothing captured runs before a launch. While a capture is open:

- a cuBLAS-backed call (``matmul``, ``dot``, ...) raises ``NotImplementedError``, as CuPy's
  ``cublas.setStream`` does on a capturing stream;
- every other array operation raises ``RuntimeError``: allocations, copies, ufuncs, ``fill``,
  ``get``/``set`` (CuPy refuses host transfers on a capturing stream, and an allocation from its pool
  inside a graph is a buffer the pool may hand out again); the stand-in captures raw kernels only;
- a kernel launched on a stream that has not joined the capture raises (CUDA would run it at once,
  outside the graph), as does a wait, on a stream that has joined, on an event not recorded in it;
- ``end_capture`` raises if a stream that joined has work after its last join back into the origin
  (CUDA's ``cudaErrorStreamCaptureUnjoined``).

``counts`` tallies captures begun, graph launches, cuBLAS-backed calls outside captures and host
synchronizations (``Stream.synchronize``), so that tests can tell what happened.
"""

import collections

import numpy as np

import fake_cupy

CUBLAS = ("matmul", "dot", "vdot", "inner", "outer", "tensordot", "einsum")
"""The CuPy functions that call cuBLAS."""

counts = collections.Counter()
_capture = None  # the Capture in progress: CuPy's default (relaxed) mode is per stream, but a
# program that allocates while another thread captures is just as wrong, so this one is global


class CaptureRefused(RuntimeError):
    """Something CuPy (or this stand-in) cannot do during a stream capture."""


def reset():
    global _capture
    _capture = None
    counts.clear()
    fake_cupy.Stream.log.clear()


def _refuse(what):
    if _capture is not None:
        raise CaptureRefused(f"{what} during stream capture: the stand-in captures raw kernels only (CuPy would "
                             "allocate from its pool, or synchronize with the host)")


class ndarray(fake_cupy.ndarray):  # noqa: N801 - CuPy's name
    """A device array that refuses every operation during a capture."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse(f"the ufunc {ufunc.__name__}")
        inputs = [x.view(np.ndarray) if isinstance(x, ndarray) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, ndarray) else x for x in kwargs["out"])
        result = getattr(ufunc, method)(*inputs, **kwargs)
        return result.view(ndarray) if isinstance(result, np.ndarray) else result

    def __array_function__(self, func, types, args, kwargs):
        _refuse(f"numpy.{func.__name__} on a device array")
        return super().__array_function__(func, types, args, kwargs)

    def copy(self, order="C"):
        _refuse("ndarray.copy")
        return super().copy(order)

    def fill(self, value):
        _refuse("ndarray.fill")
        super().fill(value)

    def get(self):
        _refuse("ndarray.get")
        return super().get()

    def set(self, array, stream=None):
        _refuse("ndarray.set")
        if not isinstance(array, np.ndarray) or array.dtype != self.dtype or array.shape != self.shape:
            raise TypeError(f"set() takes a numpy array of {self.dtype} {self.shape}; got {array!r}")
        super().set(array, stream)

    def __setitem__(self, index, value):
        _refuse("ndarray.__setitem__")
        super().__setitem__(index, value)


def _device(array):
    return array.view(ndarray) if isinstance(array, np.ndarray) else array


def asarray(a, dtype=None):
    _refuse("cupy.asarray")
    return _device(fake_cupy.asarray(a, dtype))


def __getattr__(name):
    """Every other CuPy function: fake_cupy's, refused during a capture."""
    function = getattr(fake_cupy, name)
    if not callable(function) or isinstance(function, type):
        return function

    def call(*args, **kwargs):
        if name in CUBLAS:
            if _capture is not None:
                raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
            counts["cublas"] += 1
        _refuse(f"cupy.{name}")
        return _device(function(*args, **kwargs))

    return call


class Capture:
    """One capture: the streams that joined it with their items, and the kernels to replay."""

    def __init__(self, origin):
        self.origin = origin
        self.items = {origin: []}  # stream -> [(kind, event, count)]: "kernel", "record" or "wait"
        self.recorded = {}  # event -> its recordings in the capture so far
        self.kernels = []  # (kernel, grid, block, args) in launch order

    def joined(self, stream):
        return stream in self.items

    def add(self, stream, kind, what, event=None):
        if not self.joined(stream):
            raise CaptureRefused(f"{what} on a stream that has not joined the capture: CUDA would run it at once, "
                                 "outside the graph (a stream joins by waiting on an event recorded in the capture)")
        count = self.recorded.get(event, 0) + (kind == "record")
        if event is not None:
            self.recorded[event] = count
        self.items[stream].append((kind, event, count))

    def wait(self, stream, event):
        if self.recorded.get(event, 0):
            self.items.setdefault(stream, [])
            self.add(stream, "wait", "a wait", event)
        elif self.joined(stream):
            raise CaptureRefused("a capturing stream waits on an event not recorded in the capture")

    def graph(self):
        waited = {}
        for kind, event, count in self.items[self.origin]:
            if kind == "wait":
                waited[event] = max(waited.get(event, 0), count)
        for stream, items in self.items.items():
            kind, event, count = items[-1] if items else (None, None, 0)
            if stream is not self.origin and (kind != "record" or waited.get(event, 0) < count):
                raise CaptureRefused("a stream that joined the capture has work after its last join back into the "
                                     "origin stream (cudaErrorStreamCaptureUnjoined)")
        return Graph(self.kernels)


class Stream(fake_cupy.Stream):
    def begin_capture(self, mode=None):
        global _capture
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if _capture is not None:
            raise CaptureRefused("a capture is already in progress")
        counts["captures"] += 1
        _capture = Capture(self)

    def end_capture(self):
        global _capture
        capture, _capture = _capture, None
        if capture is None or capture.origin is not self:
            raise RuntimeError("end_capture() on a stream that is not capturing")
        return capture.graph()

    def is_capturing(self):
        return _capture is not None and _capture.joined(self)

    def synchronize(self):
        _refuse("Stream.synchronize")
        counts["synchronize"] += 1

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        if _capture is not None:
            _capture.wait(self, event)
        super().wait_event(event)


class Event(fake_cupy.Event):
    def record(self, stream=None):
        stream = stream or fake_cupy.get_current_stream()
        if _capture is not None:
            _capture.add(stream, "record", "an event recorded", self)
        super().record(stream)

    def synchronize(self):
        _refuse("Event.synchronize")


class Graph:
    """What a capture recorded; ``launch(stream)`` runs it (at once, as everything in the stand-in)."""

    def __init__(self, kernels):
        self.kernels = kernels

    def launch(self, stream=None):
        _refuse("a graph launch")
        counts["launches"] += 1
        for kernel, grid, block, args in self.kernels:
            kernel(grid, block, args)


class RawModule(fake_cupy.RawModule):
    """The CPU harness, its kernels recorded instead of run while their stream is capturing."""

    def get_function(self, name):
        kernel = super().get_function(name)

        def launch(grid, block, args):
            if _capture is None:
                kernel(grid, block, args)
                return
            _capture.add(fake_cupy.get_current_stream(), "kernel", f"the kernel {name}")
            _capture.kernels.append((kernel, grid, block, args))

        return launch


class Device(fake_cupy.Device):
    def synchronize(self):
        _refuse("Device.synchronize")
        counts["synchronize"] += 1


cuda = type(fake_cupy.cuda)(**{**vars(fake_cupy.cuda), "Stream": Stream, "Event": Event, "Device": Device})
is_available = fake_cupy.is_available
