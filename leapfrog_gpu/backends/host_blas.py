"""The NumPy backend's products: OpenBLAS (the ``scipy-openblas32`` wheel) through its CBLAS interface, in
place, with the GIL released for every product long enough to run beside another stream.

Why this OpenBLAS and not NumPy's or SciPy's: NumPy has no in-place GEMM (beta = 1) and no ``ger``; SciPy's
wrappers have both, but hold the GIL for the whole call (two host streams' products ran one after the
other), and SciPy 1.17 bundles OpenBLAS 0.3.30, whose transposed-weight GEMM of (5) at B = 64 takes
1.4-1.8x the forward's time on a Zen 4 core, against 1.2-1.4x from 0.3.31 on. Every product goes through
the one library: two BLAS libraries' thread pools, whose threads spin between calls, take the cores from
each other when calls alternate.

The calls are made by ``ctypes``: through ``ctypes.CDLL``, which releases the GIL for the call, when the
product takes long enough (``RELEASE_MATRIX``, ``RELEASE_GEMM``), and through ``ctypes.PyDLL``, which
holds it, otherwise: a thread that gives the GIL up waits to take it back, which a narrow network's
microsecond products would pay at every call. Both run the one routine of one library, so the bits are
the same either way.
"""

import ctypes
import functools
import os

import numpy as np

RELEASE_MATRIX = 1 << 18
"""Elements of its matrix from which a gemv or a ger, bound by the bytes it moves, runs with the GIL
released: 1 MiB in float32, about 50 us on a server core."""
RELEASE_GEMM = 1 << 24
"""Multiply-adds from which a gemm, bound by its arithmetic, runs with the GIL released (a 1024 x 1024
x 16 product): about 100 us on a server core. At 256 x 256 x 64 the released call made a step 7%
slower, which no overlap repaid."""

_COLUMN_MAJOR, _TRANS = 102, (111, 112)  # CBLAS's CblasColMajor and (CblasNoTrans, CblasTrans)


def matmul(out, x, y, alpha=1.0, beta=0.0):
    """``out = alpha * (x @ y) + beta * out`` in place, by one BLAS call that allocates nothing: x (p, r),
    y (r, q), out (p, q); out C- or Fortran-contiguous, x and y with a unit stride along one axis (a
    C- or Fortran-contiguous array, a block of rows or columns of one, or its transpose).

    ``gemv`` when q = 1, ``ger`` when r = 1 and beta = 1, ``gemm`` otherwise, on the arrays' Fortran
    views. A call as long as ``RELEASE_MATRIX`` or ``RELEASE_GEMM`` says runs with the GIL released.
    """
    if not out.flags.f_contiguous:  # out^T = y^T x^T, out^T Fortran-contiguous
        out, x, y = out.T, y.T, x.T
    if not out.flags.f_contiguous:
        raise ValueError(f"matmul writes into a C- or Fortran-contiguous array; got strides {out.strides}")
    (m, n), k = out.shape, x.shape[1]
    if n == 1:
        a, trans, lda = _operand(x)
        blas = _routines(out.dtype, m * k >= RELEASE_MATRIX)
        blas.gemv(trans, a.shape[0], a.shape[1], alpha, a, lda, y[:, 0], beta, out[:, 0])
    elif k == 1 and beta == 1:
        blas = _routines(out.dtype, m * n >= RELEASE_MATRIX)
        blas.ger(m, n, alpha, x[:, 0], y[0], out, max(1, m))
    else:
        (a, trans_a, lda), (b, trans_b, ldb) = _operand(x), _operand(y)
        blas = _routines(out.dtype, m * n * k >= RELEASE_GEMM)
        blas.gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, out, max(1, m))


def _operand(x):
    """x as BLAS takes it, without a copy: ``(x, 0, ld)`` if its columns are contiguous, ``(x^T, 1, ld)`` if
    its rows are, ``ld`` the leading dimension of the Fortran-ordered matrix handed over."""
    rows, cols = x.shape
    for a, trans in ((x, 0), (x.T, 1)):
        (step, ld), (height, width) = (s // x.itemsize for s in a.strides), a.shape
        ld = ld if width > 1 else height
        if (step == 1 or height == 1) and ld >= max(1, height):
            return a, trans, max(1, ld)
    raise ValueError(f"matmul takes operands with a unit stride along one axis; got a {rows} x {cols} array "
                     f"with strides {x.strides} (np.ascontiguousarray makes one)")


@functools.cache
def load():
    """The OpenBLAS library of ``scipy-openblas32`` as ``(ctypes.CDLL, ctypes.PyDLL)``, loaded on first use.
    ``NumpyBackend`` loads it as it starts, before it sets the BLAS thread count, which reaches only
    the libraries loaded by then."""
    import scipy_openblas32

    path = os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))
    return ctypes.CDLL(path), ctypes.PyDLL(path)


def _prefix(dtype):
    """BLAS's letter for ``dtype``: ``s`` or ``d``; any other type cannot be written in place."""
    prefix = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}.get(np.dtype(dtype))
    if prefix is None:
        raise TypeError(f"the NumPy backend's products take float32 or float64 arrays; got {np.dtype(dtype)}")
    return prefix


@functools.cache
def _routines(dtype, release):
    """gemv, ger and gemm of ``dtype``, called with the GIL released if ``release`` (``_Routines``)."""
    return _Routines(np.dtype(dtype), load()[0 if release else 1])


class _Routines:
    """gemv, ger and gemm of one precision, column-major, through CBLAS by ``ctypes``.

    Arguments as CBLAS takes them: sizes and strides by value, scalars in the routine's precision, and
    pointers to the first elements; each call makes its own, so that streams may call at once. The
    entry points are called without ``argtypes``, whose checks cost more than a small product.
    """

    def __init__(self, dtype, library):
        prefix = _prefix(dtype)
        self.scalar, self.itemsize = (ctypes.c_float if prefix == "s" else ctypes.c_double), dtype.itemsize
        self._gemv, self._ger, self._gemm = (getattr(library, f"scipy_cblas_{prefix}{name}")
                                             for name in ("gemv", "ger", "gemm"))

    def gemv(self, trans, m, n, alpha, a, lda, x, beta, y):
        """``y = alpha op(a) x + beta y``: a (m, n) column-major, op transposes it if ``trans``."""
        scalar, step = self.scalar, self.itemsize
        self._gemv(_COLUMN_MAJOR, _TRANS[trans], m, n, scalar(alpha), _pointer(a), lda,
                   _pointer(x), x.strides[0] // step, scalar(beta), _pointer(y), y.strides[0] // step)

    def ger(self, m, n, alpha, x, y, a, lda):
        """``a += alpha x y^T``: a (m, n) column-major."""
        step = self.itemsize
        self._ger(_COLUMN_MAJOR, m, n, self.scalar(alpha), _pointer(x), x.strides[0] // step,
                  _pointer(y), y.strides[0] // step, _pointer(a), lda)

    def gemm(self, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        """``c = alpha op(a) op(b) + beta c``: c (m, n) column-major, op(a) (m, k), op(b) (k, n)."""
        scalar = self.scalar
        self._gemm(_COLUMN_MAJOR, _TRANS[trans_a], _TRANS[trans_b], m, n, k, scalar(alpha), _pointer(a), lda,
                   _pointer(b), ldb, scalar(beta), _pointer(c), ldc)


def _pointer(x):
    """A pointer to x's first element. Through the buffer of x (or of x^T, C-contiguous where x is
    Fortran-contiguous), five times as fast as ``x.ctypes.data``, which a read-only or strided x takes."""
    try:
        return ctypes.byref(ctypes.c_char.from_buffer(x.T if x.flags.f_contiguous and x.ndim > 1 else x))
    except (TypeError, ValueError, BufferError):
        return ctypes.c_void_p(x.ctypes.data)
