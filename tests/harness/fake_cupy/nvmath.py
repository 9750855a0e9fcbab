"""``nvmath.bindings.cublas`` on the stand-in device: what the chain (2)(5) calls, modelled on nvmath-python
1.0's low-level bindings (``nvmath/bindings/cublas.pyx``: integer handles and raw pointers, column-major
operands, ``cuBLASError``) and on cuBLAS's documented rules. ``modules()`` says what ``sys.modules`` must
hold for ``from nvmath.bindings import cublas``.

- A routine runs its product on the handle's stream (``set_stream``; the legacy null stream until then),
  in that stream's queue, when the stand-in's order reaches it, reading its operands then; the memory it
  touches, the handle's workspace included, is checked as a kernel's is (freed while queued:
  ``UseAfterFreeError``; a workspace freed before the call: ``EXECUTION_FAILED``). On a capturing stream
  it becomes a node of the graph.
- ``set_stream`` resets the workspace to cuBLAS's default pool, as cuBLAS documents: set the workspace
  after the stream.
- Host-pointer scalars (``PointerMode.HOST``, the default) are read when the routine is called, so a
  capture bakes them in; beta = 0 does not read C (a NaN there stays out), as cuBLAS documents.
- Pointers must lie in pool memory held by a live array (``memory.resolve``); sizes and leading
  dimensions are checked as cuBLAS checks them (``INVALID_VALUE``).

Stricter than cuBLAS, on purpose: during a capture a routine is refused (``NOT_SUPPORTED``, saying why)
when its handle has no workspace of its own (cuBLAS would use its default pool, memory the graph does not
own), or when its handle's stream is not the capturing current stream (the product would run outside the
graph, or on the legacy stream); ``create`` is refused during a capture (it allocates). ``calls`` lists
``(routine, stream ptr, capturing)`` of every routine called since ``reset``.

Not modelled: device-pointer scalars, negative increments, conjugate operations, math and atomics modes,
routines other than these.
"""

import ctypes
import enum
import itertools
import sys
import types

import numpy as np

from . import memory, queues


class Status(enum.IntEnum):
    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 3
    INVALID_VALUE = 7
    EXECUTION_FAILED = 13
    NOT_SUPPORTED = 15


class Operation(enum.IntEnum):
    N = 0
    T = 1
    C = 2


class PointerMode(enum.IntEnum):
    HOST = 0
    DEVICE = 1


class cuBLASError(Exception):  # noqa: N801 - nvmath's name
    """What a failed cuBLAS call raises: ``status``, and here also why, in words."""

    def __init__(self, status, why=""):
        self.status = status
        super().__init__(f"{Status(status).name} ({int(status)}){': ' + why if why else ''}")


class _Handle:
    __slots__ = ("device", "stream", "workspace", "pointer_mode")

    def __init__(self):
        self.device, self.stream, self.workspace, self.pointer_mode = queues.device, 0, None, PointerMode.HOST


_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}
_handles = {}
_ids = itertools.count(0x7000_0000, 0x100)
calls = []


def create():
    if any(s._capture is not None for s in queues.device.streams):
        raise cuBLASError(Status.NOT_SUPPORTED, "cublasCreate allocates: create the handle before a capture")
    handle = next(_ids)
    _handles[handle] = _Handle()
    return handle


def destroy(handle):
    _handle(handle)
    del _handles[handle]


def set_stream(handle, stream_id):
    h = _handle(handle)
    _stream(stream_id)
    h.stream, h.workspace = stream_id, None  # cuBLAS: "unconditionally resets the workspace" to its pool


def get_stream(handle):
    return _handle(handle).stream


def set_workspace(handle, workspace, workspace_size_in_bytes):
    h = _handle(handle)
    try:
        chunk, _ = memory.resolve(workspace, workspace_size_in_bytes)
    except ValueError as error:
        raise cuBLASError(Status.INVALID_VALUE, f"workspace: {error}") from None
    h.workspace = (chunk, chunk.next_generation - 1)


def set_pointer_mode(handle, mode):
    _handle(handle).pointer_mode = PointerMode(mode)


def get_pointer_mode(handle):
    return int(_handle(handle).pointer_mode)


def _gemm(dtype):
    name = f"{_PREFIX[np.dtype(dtype)]}gemm"

    def gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        """``C = alpha op(A) op(B) + beta C``: column-major, ``op(A)`` m x k, ``op(B)`` k x n, C m x n."""
        h, stream = _call(name, handle)
        shape_a = (m, k) if Operation(transa) == Operation.N else (k, m)
        shape_b = (k, n) if Operation(transb) == Operation.N else (n, k)
        for what, value in (("m", m), ("n", n), ("k", k)):
            _check(value >= 0, f"{what} = {value} < 0")
        for what, ld, rows in (("lda", lda, shape_a[0]), ("ldb", ldb, shape_b[0]), ("ldc", ldc, m)):
            _check(ld >= max(1, rows), f"{what} = {ld} < max(1, {rows})")
        (va, ta), (vb, tb), (vc, tc) = (_matrix(p, rows, cols, ld, dtype) for p, (rows, cols), ld in
                                        ((a, shape_a, lda), (b, shape_b, ldb), (c, (m, n), ldc)))
        opa = va if Operation(transa) == Operation.N else va.T
        opb = vb if Operation(transb) == Operation.N else vb.T
        _enqueue(stream, name, _product(opa, opb, vc, _scalar(h, alpha, dtype), _scalar(h, beta, dtype)),
                 (ta, tb, tc, h.workspace), (va, vb), (vc,))

    return gemm


def _gemv(dtype):
    name = f"{_PREFIX[np.dtype(dtype)]}gemv"

    def gemv(handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy):
        """``y = alpha op(A) x + beta y``: A column-major m x n."""
        h, stream = _call(name, handle)
        _check(m >= 0 and n >= 0, f"m = {m}, n = {n}: not both >= 0")
        _check(lda >= max(1, m), f"lda = {lda} < max(1, {m})")
        _check(incx > 0 and incy > 0, f"incx = {incx}, incy = {incy}: only positive increments are modelled")
        size_x, size_y = (n, m) if Operation(trans) == Operation.N else (m, n)
        va, ta = _matrix(a, m, n, lda, dtype)
        (vx, tx), (vy, ty) = _vector(x, size_x, incx, dtype), _vector(y, size_y, incy, dtype)
        opa = va if Operation(trans) == Operation.N else va.T
        _enqueue(stream, name, _product(opa, vx, vy, _scalar(h, alpha, dtype), _scalar(h, beta, dtype)),
                 (ta, tx, ty, h.workspace), (va, vx), (vy,))

    return gemv


sgemm, dgemm = _gemm(np.float32), _gemm(np.float64)
sgemv, dgemv = _gemv(np.float32), _gemv(np.float64)


def _product(opa, opb, out, alpha, beta):
    def run():
        with np.errstate(all="ignore"):  # a GPU raises no floating-point warnings
            product = np.matmul(opa, opb)
            if alpha != 1:
                product *= alpha
            if beta != 0:  # beta = 0: C is not read
                product += beta * out
        out[...] = product

    return run


def _handle(handle):
    h = _handles.get(handle)
    if h is None or h.device is not queues.device:
        raise cuBLASError(Status.NOT_INITIALIZED, f"{handle:#x} is not a live handle of this device")
    return h


def _stream(stream_id):
    for stream in queues.device.streams:
        if stream.ptr == stream_id:
            return stream
    raise cuBLASError(Status.INVALID_VALUE, f"{stream_id:#x} is not a stream of this device")


def _call(name, handle):
    """The handle and its stream, once the capture rules (see the module's docstring) allow the call."""
    h = _handle(handle)
    stream, current = _stream(h.stream), queues.device.stack[-1]
    capturing = current._capture is not None or stream._capture is not None
    calls.append((name, stream.ptr, capturing))
    if current._capture is not None and stream is not current:
        raise cuBLASError(Status.NOT_SUPPORTED, (
            f"{name} during the capture on {current!r}, but the handle's stream is {stream!r}: the product "
            "would run outside the graph; set_stream(handle, stream.ptr) to the capturing stream"))
    if capturing and h.workspace is None:
        raise cuBLASError(Status.NOT_SUPPORTED, (
            f"{name} during a capture on a handle without a workspace of its own: cuBLAS would use its default "
            "pool, which the graph does not own; set_workspace(handle, ...) after set_stream, before the capture"))
    if h.workspace is not None:
        chunk, generation = h.workspace
        freed = any(free is chunk for free in queues.device.free.get((chunk.stream, chunk.buffer.size), ()))
        if freed or chunk.next_generation - 1 != generation:
            raise cuBLASError(Status.EXECUTION_FAILED, (
                f"{name} on a handle whose workspace was freed: keep the workspace's array alive as long as the "
                "handle"))
    return h, stream


def _check(ok, why):
    if not ok:
        raise cuBLASError(Status.INVALID_VALUE, why)


def _view(ptr, count, stride, dtype, what):
    """A NumPy view of ``count`` rows of a strided operand at ``ptr``, and the memory it touches."""
    itemsize = np.dtype(dtype).itemsize
    try:
        chunk, offset = memory.resolve(ptr, ((count[0] - 1) * stride[0] + (count[1] - 1) * stride[1] + 1) * itemsize)
    except ValueError as error:
        raise cuBLASError(Status.INVALID_VALUE, f"{what}: {error}") from None
    view = np.ndarray(count, dtype, buffer=chunk.buffer, offset=offset,
                      strides=tuple(s * itemsize for s in stride))
    return view, (chunk, chunk.next_generation - 1)


def _matrix(ptr, rows, cols, ld, dtype):
    """The column-major ``rows x cols`` matrix at ``ptr`` with leading dimension ``ld``."""
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), dtype), None
    return _view(ptr, (rows, cols), (1, ld), dtype, "matrix")


def _vector(ptr, size, inc, dtype):
    if size == 0:
        return np.zeros(0, dtype), None
    view, touches = _view(ptr, (size, 1), (inc, 1), dtype, "vector")
    return view[:, 0], touches


def _scalar(h, ptr, dtype):
    if h.pointer_mode != PointerMode.HOST:
        raise NotImplementedError("device-pointer scalars are not modelled by the stand-in")
    return np.frombuffer((ctypes.c_char * np.dtype(dtype).itemsize).from_address(ptr), dtype, 1)[0]


def _enqueue(stream, name, fn, touches, reads, writes):
    queues.enqueue_touching(stream, name, fn, tuple(t for t in touches if t is not None), reads, writes)


def reset():
    """Forget every handle and call (``fake_cupy.reset`` starts a fresh device)."""
    _handles.clear()
    calls.clear()


bindings = types.ModuleType("nvmath.bindings")
cublas = sys.modules[__name__]
bindings.cublas = cublas
package = types.ModuleType("nvmath")
package.bindings = bindings


def modules():
    """What ``sys.modules`` must hold for ``from nvmath.bindings import cublas`` to reach this module."""
    return {"nvmath": package, "nvmath.bindings": bindings, "nvmath.bindings.cublas": cublas}
