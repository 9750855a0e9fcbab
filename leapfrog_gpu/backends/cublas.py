"""cuBLAS through ``nvmath-python``'s low-level bindings (``nvmath.bindings.cublas``): the products of the
chain, (2) ``z = w a_prev`` and (5) ``delta = (w^{l+1})^T delta^{l+1}``, in eager steps and inside a CUDA
graph alike.

CuPy refuses cuBLAS during stream capture (its wrapper calls ``cublasSetStream`` with the current stream
and raises when that stream is capturing); cuBLAS itself can be captured once the handle has a workspace
of its own (``cublasSetWorkspace``: it then allocates nothing) and runs on the capturing stream. So a
``Blas`` holds one handle for the backend's life: its stream set to the main stream once, then (in that
order: ``cublasSetStream`` resets the workspace to cuBLAS's default pool) its workspace, preallocated once
outside any capture; host-pointer scalars, the constants 1 and 0 only (alpha = 1; beta = 0, or 1 to add
into the output; read when the call is made, so a graph bakes them in). The same handle, workspace and
stream serve eager and graph steps, so cuBLAS picks the same algorithm for both and they agree to the bit.

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
    """One cuBLAS handle on ``stream`` with its own workspace; ``matmul`` enqueues on that stream, whichever
    stream is current."""

    def __init__(self, cupy, cublas, stream):
        self._cublas = cublas
        self.workspace = cupy.empty(WORKSPACE_BYTES, dtype=np.uint8)  # outside any capture, kept for life
        self.handle = cublas.create()
        cublas.set_stream(self.handle, stream.ptr)
        cublas.set_workspace(self.handle, self.workspace.data.ptr, WORKSPACE_BYTES)  # after set_stream
        cublas.set_pointer_mode(self.handle, cublas.PointerMode.HOST)
        self._constants = [np.array([value], dtype) for dtype in (np.float32, np.float64) for value in (1, 0)]
        one32, zero32, one64, zero64 = (c.ctypes.data for c in self._constants)  # host memory, kept for life
        self._routines = {np.dtype(np.float32): (cublas.sgemm, cublas.sgemv, one32, zero32),
                          np.dtype(np.float64): (cublas.dgemm, cublas.dgemv, one64, zero64)}

    def matmul(self, out, w, x, transpose=False):
        """``out = w x`` (``transpose``: ``out = w^T x``) on the handle's stream; ``w`` is ``(n, m)``
        (``(m, n)`` when transposed), ``x`` ``(m, B)``, ``out`` ``(n, B)``, all C-contiguous, one dtype."""
        self.bind(out, w, x, transpose)()

    def bind(self, out, w, x, transpose=False, accumulate=False):
        """``matmul(out, w, x, transpose)`` (with ``accumulate``, ``out += w x``: beta = 1) as a call of no
        argument on the arrays' pointers, fixed now; ``w`` C-contiguous, ``x`` and ``out`` with a unit
        stride along their rows (C-contiguous, or the columns of one time step of an (n, tau, B) array):
        the stride between rows is their leading dimension."""
        (n, batch), m = out.shape, x.shape[0]
        gemm, gemv, one, zero = self._routines[out.dtype]
        beta = one if accumulate else zero
        op = self._cublas.Operation
        rows = n if transpose else m  # of w^T's column-major storage: the leading dimension
        ld_x, ld_out = (max(1, a.strides[0] // a.itemsize) for a in (x, out))
        if batch == 1:
            return functools.partial(gemv, self.handle, op.N if transpose else op.T, rows, m if transpose else n,
                                     one, w.data.ptr, rows, x.data.ptr, ld_x, beta, out.data.ptr, ld_out)
        return functools.partial(gemm, self.handle, op.N, op.T if transpose else op.N, batch, n, m, one,
                                 x.data.ptr, ld_x, w.data.ptr, rows, beta, out.data.ptr, ld_out)

    def close(self):
        """Destroy the handle (the caller has synchronized: no queued call still uses the workspace)."""
        if self.handle:
            self._cublas.destroy(self.handle)
            self.handle = 0
