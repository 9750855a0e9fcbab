"""The NumPy backend's products: SciPy's BLAS, in place, with the GIL released for every product large
enough to run beside another stream.

SciPy's Python wrappers (``scipy.linalg.blas``) hold the GIL for the whole call, so two host streams
whose products went through them ran one after the other: a worker's (7) waited for the main stream's
(5) to return. Their dispatch is cheap (about 1 us), which matters for the small products of a narrow
network. So a product that takes long enough (``RELEASE_MATRIX``, ``RELEASE_GEMM``) calls the same BLAS
routine through its C entry point (``scipy.linalg.cython_blas``) by ``ctypes``, which releases the GIL
for the call (about 5 us to dispatch), and a shorter one the Python wrapper. Both paths run the one
routine of one library: the bits are the same either way.
"""

import ctypes
import functools

import numpy as np

RELEASE_MATRIX = 1 << 18
"""Elements of its matrix from which a gemv or a ger, bound by the bytes it moves, runs with the GIL
released: 1 MiB in float32, about 50 us on a server core, ten times the dispatch."""
RELEASE_GEMM = 1 << 24
"""Multiply-adds from which a gemm, bound by its arithmetic, runs with the GIL released (a 1024 x 1024
x 16 product): about 100 us on a server core. At 256 x 256 x 64 the released call's dispatch made a
step 7% slower, which no overlap repaid."""


def matmul(out, x, y, alpha=1.0, beta=0.0):
    """``out = alpha * (x @ y) + beta * out`` in place, by one BLAS call that allocates nothing: x (p, r),
    y (r, q), out (p, q), each a C-contiguous array or the transpose of one.

    ``gemv`` when q = 1, ``ger`` when r = 1 and beta = 1, ``gemm`` otherwise, on the arrays' Fortran
    views. Every product of the backend goes through SciPy's BLAS, which has the in-place forms NumPy
    lacks (beta = 1, ``ger``), and through it alone: NumPy's BLAS keeps a thread pool of its own, and
    the two pools' threads, which spin between calls, take the cores from each other when calls
    alternate (a forward pass on one and the sweep on the other run several times as slow on two cores).
    A call as long as ``RELEASE_MATRIX`` or ``RELEASE_GEMM`` says runs with the GIL released.
    """
    if not out.flags.f_contiguous:  # out^T = y^T x^T, out^T Fortran-contiguous
        out, x, y = out.T, y.T, x.T
    if not out.flags.f_contiguous:
        raise ValueError(f"matmul writes into a C- or Fortran-contiguous array; got strides {out.strides}")
    (m, n), k = out.shape, x.shape[1]
    if n == 1:
        a, trans = _fortran(x)
        if m * k >= RELEASE_MATRIX:
            _released(out.dtype).gemv(alpha, a, trans, y[:, 0], beta, out[:, 0])
        else:
            _wrappers(out.dtype)[0](alpha, a, y[:, 0], beta, out[:, 0], trans=trans, overwrite_y=True)
    elif k == 1 and beta == 1:
        if m * n >= RELEASE_MATRIX:
            _released(out.dtype).ger(alpha, x[:, 0], y[0], out)
        else:
            _wrappers(out.dtype)[1](alpha, x[:, 0], y[0], a=out, overwrite_a=True)
    else:
        (a, trans_a), (b, trans_b) = _fortran(x), _fortran(y)
        if m * n * k >= RELEASE_GEMM:
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

    Arguments as the Fortran routines take them (column-major, every scalar and array by reference),
    from Fortran-contiguous matrices and strided vectors; each call makes its own scalars, so that
    streams may call at once. The entry points are called without ``argtypes``, and every argument is
    made a pointer here: the checks ``argtypes`` would add cost more than the BLAS call of a small
    product.
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
        self._gemv, self._ger, self._gemm = (self._entry(capsules[prefix + name]) for name in ("gemv", "ger", "gemm"))

    @classmethod
    def _entry(cls, capsule):
        return ctypes.CFUNCTYPE(None)(cls._CAPSULE_POINTER(capsule, cls._CAPSULE_NAME(capsule)))

    def gemv(self, alpha, a, trans, x, beta, y):
        """``y = alpha op(a) x + beta y``: a (m, n) Fortran-contiguous, op transposes it if ``trans``."""
        m, n = a.shape
        scalar, step = self.scalar, self.itemsize
        self._gemv(self._TRANS[trans], _int(m), _int(n), _ref(scalar(alpha)), _pointer(a), _int(max(1, m)),
                   _pointer(x), _int(x.strides[0] // step), _ref(scalar(beta)), _pointer(y), _int(y.strides[0] // step))

    def ger(self, alpha, x, y, a):
        """``a += alpha x y^T``: a (m, n) Fortran-contiguous."""
        m, n = a.shape
        step = self.itemsize
        self._ger(_int(m), _int(n), _ref(self.scalar(alpha)), _pointer(x), _int(x.strides[0] // step), _pointer(y),
                  _int(y.strides[0] // step), _pointer(a), _int(max(1, m)))

    def gemm(self, alpha, a, trans_a, b, trans_b, beta, c):
        """``c = alpha op(a) op(b) + beta c``: a, b, c Fortran-contiguous, c (m, n)."""
        (m, n), k = c.shape, a.shape[0] if trans_a else a.shape[1]
        scalar = self.scalar
        self._gemm(self._TRANS[trans_a], self._TRANS[trans_b], _int(m), _int(n), _int(k), _ref(scalar(alpha)),
                   _pointer(a), _int(max(1, a.shape[0])), _pointer(b), _int(max(1, b.shape[0])),
                   _ref(scalar(beta)), _pointer(c), _int(max(1, m)))


_ref = ctypes.byref


def _int(value):
    return ctypes.byref(ctypes.c_int(value))


def _pointer(x):
    """A pointer to x's first element. Through the buffer of x (or of x^T, C-contiguous where x is
    Fortran-contiguous), five times as fast as ``x.ctypes.data``, which a read-only or strided x takes."""
    try:
        return ctypes.byref(ctypes.c_char.from_buffer(x.T if x.flags.f_contiguous and x.ndim > 1 else x))
    except (TypeError, ValueError, BufferError):
        return ctypes.c_void_p(x.ctypes.data)
