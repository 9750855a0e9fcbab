"""cuBLAS through ``nvmath-python``'s low-level bindings (``nvmath.bindings.cublas``): the products of the
chain, (2) ``z = w a_prev`` and (5) ``delta = (w^{l+1})^T delta^{l+1}``, in eager steps and inside a CUDA
graph alike.

CuPy refuses cuBLAS during stream capture (its wrapper calls ``cublasSetStream`` with the current stream
and raises when that stream is capturing); cuBLAS itself can be captured once the handle has a workspace
of its own (``cublasSetWorkspace``: it then allocates nothing) and runs on the capturing stream. So a
``Blas`` holds a handle for the backend's life: its stream set to the main stream once, then (in that
order: ``cublasSetStream`` resets the workspace to cuBLAS's default pool) its workspace, preallocated once
outside any capture; host-pointer scalars, the constants 1 and 0 only (alpha = 1; beta = 0, or 1 to add
into the output; read when the call is made, so a graph bakes them in). The same handle, workspace and
stream serve eager and graph steps, so cuBLAS picks the same algorithm for both and they agree to the bit.
A product that a worker makes (an RNN's nabla_u) runs on a handle of the worker's stream, made alike on
first use: cuBLAS promises the same bits only where a handle and its workspace serve one stream at a time.

Layout: our arrays are row-major, ``(n, B)``; cuBLAS is column-major. A row-major ``(r, c)`` array is the
column-major ``(c, r)`` matrix with leading dimension ``c`` (the stride between its rows, which is larger
for the columns of one time step of an ``(n, tau, B)`` array), its transpose. So ``z = w a_prev`` is computed
as ``z^T = a_prev^T w^T`` (a GEMM of column-major ``(B, m)`` by ``(m, n)``), and at B = 1 as the GEMV
``z = (w^T)^T a_prev`` of the column-major ``(m, n)`` matrix ``w^T``; ``delta = w^T delta_next`` as
``delta^T = delta_next^T w`` (``w`` read transposed), and at B = 1 as ``delta = (w^T) delta_next``.
"""

import functools

import numpy as np

WORKSPACE_BYTES = 32 * 2**20
"""The handle's workspace: 32 MiB, what cuBLAS recommends on Hopper (4 MiB suffices before it)."""


def bindings():
    """``(nvmath.bindings.cublas, "")``, or ``(None, why)`` when nvmath-python does not import."""
    try:
        from nvmath.bindings import cublas
    except Exception as error:  # noqa: BLE001 - a broken install counts as missing, and says why
        reason = "is not installed" if isinstance(error, ImportError) else f"does not import: {error}"
        return None, f"nvmath-python {reason} (pip install nvmath-python)"
    return cublas, ""


def open_blas(cupy, stream):
    """``(Blas on stream, "")``, or ``(None, why)`` when nvmath-python is missing or makes no handle."""
    cublas, why = bindings()
    if cublas is None:
        return None, why
    try:
        return Blas(cupy, cublas, stream), ""
    except Exception as error:  # noqa: BLE001 - no cuBLAS library, no driver: say what nvmath said
        return None, f"nvmath-python's cuBLAS makes no handle: {type(error).__name__}: {error}"


class Blas:
    """cuBLAS handles, each on one stream with a workspace of its own: the main stream's (``handle``), made now, and
    one for each other stream a product is bound on (``bind(..., stream)``), made then. ``matmul`` enqueues on the
    handle's stream, whichever stream is current. cuBLAS gives the same bits for the same product only while its
    handle and workspace serve one stream (its guide's "Results reproducibility"), hence a handle per stream."""

    def __init__(self, cupy, cublas, stream):
        self._cupy, self._cublas = cupy, cublas
        self._handles = {}  # stream ptr -> (handle, its workspace, kept for life)
        self.handle = self._open(stream)
        self._constants = [np.array([value], dtype) for dtype in (np.float32, np.float64) for value in (1, 0)]
        one32, zero32, one64, zero64 = (c.ctypes.data for c in self._constants)  # host memory, kept for life
        self._routines = {np.dtype(np.float32): (cublas.sgemm, cublas.sgemv, one32, zero32),
                          np.dtype(np.float64): (cublas.dgemm, cublas.dgemv, one64, zero64)}

    def _open(self, stream):
        """A handle on ``stream``: its stream set, then (``cublasSetStream`` resets it) its workspace, allocated now
        (outside any capture), host-pointer scalars."""
        cublas = self._cublas
        workspace = self._cupy.empty(WORKSPACE_BYTES, dtype=np.uint8)
        handle = cublas.create()
        self._handles[stream.ptr] = handle, workspace
        cublas.set_stream(handle, stream.ptr)
        cublas.set_workspace(handle, workspace.data.ptr, WORKSPACE_BYTES)  # after set_stream
        cublas.set_pointer_mode(handle, cublas.PointerMode.HOST)
        return handle

    def matmul(self, out, w, x, transpose=False):
        """``out = w x`` (``transpose``: ``out = w^T x``) on the main stream's handle; ``w`` is ``(n, m)``
        (``(m, n)`` when transposed), ``x`` ``(m, B)``, ``out`` ``(n, B)``, all C-contiguous, one dtype."""
        self.bind(out, w, x, transpose)()

    def bind(self, out, w, x, transpose=False, accumulate=False, stream=None):
        """``matmul(out, w, x, transpose)`` (with ``accumulate``, ``out += w x``: beta = 1) as a call of no
        argument on the arrays' pointers, fixed now, on the handle of ``stream`` (None: the main stream's). ``out``
        has a unit stride along its rows, ``w`` (or ``w^T``) and ``x`` each along its rows or its columns
        (``operand``): a C-contiguous array, its transpose, or the columns of one time step of an (n, tau, B)
        array; the other stride is the leading dimension."""
        (n, batch), m = out.shape, x.shape[0]
        gemm, gemv, one, zero = self._routines[out.dtype]
        handle = self.handle if stream is None else self._handles.get(stream.ptr, (None,))[0] or self._open(stream)
        beta = one if accumulate else zero
        op = self._cublas.Operation
        (rows_a, ld_a), ld_out = operand(w.T if transpose else w), operand(out)[1]
        if batch == 1:  # y = a x: a's memory is a^T column-major where its rows have the unit stride, else a
            trans, rows, cols = (op.T, m, n) if rows_a else (op.N, n, m)
            return functools.partial(gemv, handle, trans, rows, cols, one, w.data.ptr, ld_a, x.data.ptr,
                                     max(1, x.strides[0] // x.itemsize), beta, out.data.ptr, ld_out)
        rows_x, ld_x = operand(x)  # out^T = x^T a^T, column-major (B, n) = (B, m) (m, n)
        return functools.partial(gemm, handle, op.N if rows_x else op.T, op.N if rows_a else op.T, batch, n, m,
                                 one, x.data.ptr, ld_x, w.data.ptr, ld_a, beta, out.data.ptr, ld_out)

    def close(self):
        """Destroy the handles (the caller has synchronized: no queued call still uses their workspaces)."""
        for handle, _ in self._handles.values():
            self._cublas.destroy(handle)
        self._handles.clear()
        self.handle = 0


def takes(out, w, x, transpose=False):
    """Whether ``Blas.bind`` takes ``out = w x`` (``w^T x`` when ``transpose``): ``out`` with a unit stride along its
    rows, ``w`` (or ``w^T``) and ``x`` each along its rows or its columns (``operand``)."""
    rows = operand(out)
    return bool(operand(w.T if transpose else w) and operand(x) and rows and rows[0])


def operand(a):
    """``(True, ld)`` for a 2-D ``a`` with a unit stride along its rows, ``(False, ld)`` along its columns, None for
    neither: ``ld`` (at least the rows' or the columns' length) the stride between them, in elements."""
    (r, c), (s_r, s_c), size = a.shape, a.strides, a.itemsize
    if c == 1 or s_c == size:
        ld = s_r // size if r > 1 else c
        return (True, ld) if ld >= c and s_r > 0 else None
    if r == 1 or s_r == size:
        ld = s_c // size if c > 1 else r
        return (False, ld) if ld >= r and s_c > 0 else None
    return None
