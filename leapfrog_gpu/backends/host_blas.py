"""The NumPy backend's products: SciPy's BLAS, in place, with the GIL released for every product large
enough to run beside another stream.

SciPy's Python wrappers (``scipy.linalg.blas``) hold the GIL for the whole call, so two host streams
whose products went through them ran one after the other: a worker's (7) waited for the main stream's
(5) to return. Their dispatch is cheap (about 1 us), which matters for the small products of a narrow
network. So a product of at least ``RELEASE`` multiply-adds calls the same BLAS routine through its
C entry point (``scipy.linalg.cython_blas``) by ``ctypes``, which releases the GIL for the call (about
5 us to dispatch), and a smaller one the Python wrapper. Both paths run the one routine of one
library: the bits are the same either way.
"""

import ctypes
import functools

import numpy as np

RELEASE = 1 << 20
"""Multiply-adds from which a product runs with the GIL released: at least about 15 us of work (a
gemv of 4 MiB, a 128 x 128 x 64 GEMM), against its 5 us dispatch."""


def matmul(out, x, y, alpha=1.0, beta=0.0):
    """``out = alpha * (x @ y) + beta * out`` in place, by one BLAS call that allocates nothing: x (p, r),
    y (r, q), out (p, q), each a C-contiguous array or the transpose of one.

    ``gemv`` when q = 1, ``ger`` when r = 1 and beta = 1, ``gemm`` otherwise, on the arrays' Fortran
    views. Every product of the backend goes through SciPy's BLAS, which has the in-place forms NumPy
    lacks (beta = 1, ``ger``), and through it alone: NumPy's BLAS keeps a thread pool of its own, and
    the two pools' threads, which spin between calls, take the cores from each other when calls
    alternate (a forward pass on one and the sweep on the other run several times as slow on two cores).
    """
    if not out.flags.f_contiguous:  # out^T = y^T x^T, out^T Fortran-contiguous
        out, x, y = out.T, y.T, x.T
    if not out.flags.f_contiguous:
        raise ValueError(f"matmul writes into a C- or Fortran-contiguous array; got strides {out.strides}")
    (m, n), k = out.shape, x.shape[1]
    released = m * n * k >= RELEASE
    if n == 1:
        a, trans = _fortran(x)
        if released:
            _released(out.dtype).gemv(alpha, a, trans, y[:, 0], beta, out[:, 0])
        else:
            _wrappers(out.dtype)[0](alpha, a, y[:, 0], beta, out[:, 0], trans=trans, overwrite_y=True)
    elif k == 1 and beta == 1:
        if released:
            _released(out.dtype).ger(alpha, x[:, 0], y[0], out)
        else:
            _wrappers(out.dtype)[1](alpha, x[:, 0], y[0], a=out, overwrite_a=True)
    else:
        (a, trans_a), (b, trans_b) = _fortran(x), _fortran(y)
        if released:
            _released(out.dtype).gemm(alpha, a, trans_a, b, trans_b, beta, out)
        else:
            _wrappers(out.dtype)[2](alpha, a, b, beta, out, trans_a=trans_a, trans_b=trans_b, overwrite_c=True)


def _fortran(x):
    """x as BLAS takes it, without a copy: (x, 0) if Fortran-contiguous, else (x^T, 1)."""
    return (x, 0) if x.flags.f_contiguous else (x.T, 1)


@functools.cache
def load():
    """SciPy's BLAS, ``(scipy.linalg.blas, scipy.linalg.cython_blas)``, imported on first use:
    scipy.linalg takes 0.2 s to import, which a command's ``--help`` and the CuPy backend need not pay.
    ``NumpyBackend`` loads it as it starts, before it sets the BLAS thread count, which reaches only
    the libraries loaded by then."""
    from scipy.linalg import blas, cython_blas

    return blas, cython_blas


@functools.cache
def _wrappers(dtype):
    """SciPy's Python wrappers ``(gemv, ger, gemm)`` for ``dtype``."""
    _prefix(dtype)
    return load()[0].get_blas_funcs(("gemv", "ger", "gemm"), dtype=dtype)


def _prefix(dtype):
    """BLAS's letter for ``dtype``: ``s`` or ``d``; any other type cannot be written in place."""
    prefix = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}.get(np.dtype(dtype))
    if prefix is None:
        raise TypeError(f"the NumPy backend's products take float32 or float64 arrays; got {np.dtype(dtype)}")
    return prefix


@functools.cache
def _released(dtype):
    """The C entry points of ``dtype``'s gemv, ger and gemm (``_Released``)."""
    return _Released(np.dtype(dtype))


class _Released:
    """gemv, ger and gemm of SciPy's BLAS called through ``ctypes``, which releases the GIL for the call.

    Arguments as the Fortran routines take them (column-major, every scalar by reference), from
    Fortran-contiguous matrices and strided vectors; each call makes its own scalars, so that streams
    may call at once.
    """

    _CAPSULE_NAME = ctypes.pythonapi.PyCapsule_GetName
    _CAPSULE_NAME.restype, _CAPSULE_NAME.argtypes = ctypes.c_char_p, [ctypes.py_object]
    _CAPSULE_POINTER = ctypes.pythonapi.PyCapsule_GetPointer
    _CAPSULE_POINTER.restype, _CAPSULE_POINTER.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    _TRANS = tuple(ctypes.byref(ctypes.c_char(flag)) for flag in (b"N", b"T"))  # read only: shared by the streams

    def __init__(self, dtype):
        prefix = _prefix(dtype)
        self.scalar = ctypes.c_float if prefix == "s" else ctypes.c_double
        self.itemsize = dtype.itemsize
        capsules = load()[1].__pyx_capi__
        self._gemv, self._ger, self._gemm = (self._entry(capsules[prefix + name], count)
                                             for name, count in (("gemv", 11), ("ger", 9), ("gemm", 13)))

    @classmethod
    def _entry(cls, capsule, count):
        pointer = cls._CAPSULE_POINTER(capsule, cls._CAPSULE_NAME(capsule))
        return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * count)(pointer)

    def gemv(self, alpha, a, trans, x, beta, y):
        """``y = alpha op(a) x + beta y``: a (m, n) Fortran-contiguous, op transposes it if ``trans``."""
        m, n = a.shape
        self._gemv(self._TRANS[trans], _int(m), _int(n), self._scalar(alpha), a.ctypes.data, _int(max(1, m)),
                   x.ctypes.data, self._step(x), self._scalar(beta), y.ctypes.data, self._step(y))

    def ger(self, alpha, x, y, a):
        """``a += alpha x y^T``: a (m, n) Fortran-contiguous."""
        m, n = a.shape
        self._ger(_int(m), _int(n), self._scalar(alpha), x.ctypes.data, self._step(x), y.ctypes.data,
                  self._step(y), a.ctypes.data, _int(max(1, m)))

    def gemm(self, alpha, a, trans_a, b, trans_b, beta, c):
        """``c = alpha op(a) op(b) + beta c``: a, b, c Fortran-contiguous, c (m, n)."""
        (m, n), k = c.shape, a.shape[0] if trans_a else a.shape[1]
        self._gemm(self._TRANS[trans_a], self._TRANS[trans_b], _int(m), _int(n), _int(k), self._scalar(alpha),
                   a.ctypes.data, _int(max(1, a.shape[0])), b.ctypes.data, _int(max(1, b.shape[0])),
                   self._scalar(beta), c.ctypes.data, _int(max(1, m)))

    def _scalar(self, value):
        return ctypes.byref(self.scalar(value))

    def _step(self, vector):
        return _int(vector.strides[0] // self.itemsize)


def _int(value):
    return ctypes.byref(ctypes.c_int(value))
