"""The NumPy backend's products: OpenBLAS (the ``scipy-openblas32`` wheel) through its CBLAS interface, in
place, with the GIL released for every product long enough to run beside another stream.

Why this OpenBLAS and not NumPy's or SciPy's: NumPy has no in-place GEMM (beta = 1) and no ``ger``; SciPy's
wrappers have both, but hold the GIL for the whole call (two host streams' products ran one after the
other), and the OpenBLAS SciPy bundles may be a release older than the one ``pyproject.toml`` asks
for, on which the transposed-weight GEMM of (5) at B > 1 runs markedly slower than the forward's
(docs/performance.md has the measurements). Every product goes through the one library: two BLAS
libraries' thread pools, whose threads spin between calls, take the cores from each other when calls
alternate.

The calls are made by ``ctypes``: through ``ctypes.CDLL``, which releases the GIL for the call, when the
product takes long enough (``RELEASE_MATRIX``, ``RELEASE_GEMM``), and through ``ctypes.PyDLL``, which
holds it, otherwise: a thread that gives the GIL up waits to take it back, which a narrow network's
microsecond products would pay at every call. Both run the one routine of one library, so the bits are
the same either way.

Without ``scipy-openblas32`` (a machine that cannot install it) the products run on NumPy's own BLAS
through ``np.matmul``, with one warning: slower (a product with beta = 1 or a ``ger`` allocates its
result first, and the GIL stays held as NumPy's matmul holds it), within the float32 and float64
tolerances of the references, not bitwise the OpenBLAS products.
"""

import ctypes
import functools
import os
import re
import threading
import warnings

import numpy as np

from . import blas_limits

RELEASE_MATRIX = 1 << 18
"""Elements of its matrix from which a gemv or a ger, bound by the bytes it moves, runs with the GIL
released: 1 MiB in float32, long enough that the dispatch of a released call is small beside it
(docs/performance.md, products with the GIL released)."""
RELEASE_GEMM = 1 << 24
"""Multiply-adds from which a gemm, bound by its arithmetic, runs with the GIL released (a 1024 x 1024
x 16 product). Below it the released call's dispatch costs a step more than the overlap it allows
repays, as at 256 x 256 x 64 (docs/performance.md, products with the GIL released)."""

SPIN = 20
"""OpenBLAS's threads, done with a product, spin for 2**SPIN cycles (about 0.4 ms) before they sleep. At OpenBLAS's
own default, 2**28 cycles (about 0.1 s), the threads of a pass's last product spun on through the next and took
a core from its host streams: a leapfrog step at N = 1024, B = 64 ran 1.1-1.5x slower (docs/performance.md).
``load`` sets it as the library loads (``OPENBLAS_THREAD_TIMEOUT``), unless the environment sets it already."""

_COLUMN_MAJOR, _TRANS = 102, (111, 112)  # CBLAS's CblasColMajor and (CblasNoTrans, CblasTrans)


def matmul(out, x, y, alpha=1.0, beta=0.0):
    """``out = alpha * (x @ y) + beta * out`` in place, by one BLAS call that allocates nothing: x (p, r),
    y (r, q), out (p, q), all of one dtype; out writable and C- or Fortran-contiguous, x and y with a
    unit stride along one axis (a C- or Fortran-contiguous array, a block of rows or columns of one, or
    its transpose) or a single row or column of any positive stride.

    ``gemv`` when q = 1, ``ger`` when r = 1 and beta = 1, ``gemm`` otherwise, on the arrays' Fortran
    views. A call as long as ``RELEASE_MATRIX`` or ``RELEASE_GEMM`` says runs with the GIL released.
    """
    _product(out, x, y, alpha, beta, False)


def bind(out, x, y, alpha=1.0, beta=0.0):
    """``matmul(out, x, y, alpha, beta)`` as a call of no argument, its routine and arguments fixed now:
    each call is the one BLAS call, on what the arrays hold then, with no Python before it. With ``alpha``
    None the call takes alpha as its one argument, ``call(alpha)``, for a scale read as it runs (a learning
    rate in device memory). The call holds the three arrays (``operands``), whose memory it reads and writes."""
    call = _product(out, x, y, alpha, beta, True)
    call.operands = (out, x, y)
    return call


def _product(out, x, y, alpha, beta, bound):
    """The BLAS call of ``matmul``: made now, or, if ``bound``, returned as a ``functools.partial``."""
    if x.dtype != out.dtype or y.dtype != out.dtype:
        raise TypeError(f"matmul takes operands of its output's dtype, {out.dtype}; got {x.dtype} and "
                        f"{y.dtype}")
    flags = out.flags
    if not flags.writeable or not (flags.f_contiguous or flags.c_contiguous):
        raise ValueError(f"matmul writes into a writable C- or Fortran-contiguous array; got strides "
                         f"{out.strides}, writeable={flags.writeable}")
    if alpha is None and not bound:
        raise TypeError("matmul takes a number for alpha; alpha=None is bind's, whose call then takes it")
    if load() is None:
        _prefix(out.dtype)
        call = functools.partial(_numpy_product, out, x, y, beta, *(() if alpha is None else (alpha,)))
        return call if bound else call()
    if not flags.f_contiguous:  # out^T = y^T x^T, out^T Fortran-contiguous
        out, x, y = out.T, y.T, x.T
    c = _address(out.T)
    (m, n), k = out.shape, x.shape[1]
    if n == 1:
        (a, trans, lda), (b, inc) = _operand(x), _vector(y, 0)
        blas = _routines(out.dtype, m * k >= RELEASE_MATRIX)
        return blas.gemv(trans, *((k, m) if trans else (m, k)), alpha, a, lda, b, inc, beta, c, 1, bound)
    if k == 1 and beta == 1:
        (a, inc_a), (b, inc_b) = _vector(x, 0), _vector(y, 1)
        blas = _routines(out.dtype, m * n >= RELEASE_MATRIX)
        return blas.ger(m, n, alpha, a, inc_a, b, inc_b, c, max(1, m), bound)
    (a, trans_a, lda), (b, trans_b, ldb) = _operand(x), _operand(y)
    blas = _routines(out.dtype, m * n * k >= RELEASE_GEMM)
    return blas.gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, max(1, m), bound)


def _operand(x):
    """x (rows, cols) as BLAS takes it, without a copy: ``(pointer, 0, ld)`` if its columns are contiguous,
    ``(pointer, 1, ld)`` if its rows are, ``ld`` the leading dimension of the Fortran-ordered matrix
    (x, or x^T) handed over. The stride of an axis of one element steps nowhere: a single row or column
    of any positive stride is taken as it is."""
    rows, cols = x.shape
    if x.flags.f_contiguous:
        return _address(x.T), 0, max(1, rows)
    if x.flags.c_contiguous:
        return _address(x), 1, max(1, cols)
    for a, trans in ((x, 0), (x.T, 1)):  # a block of columns or rows of a wider matrix, or a strided vector
        (step, ld), (height, width) = (s // x.itemsize for s in a.strides), a.shape
        if width == 1:
            ld = max(1, height)  # one column: no next column for a leading dimension to reach
        if (step == 1 or height == 1) and ld >= max(1, height):
            return _address(x), trans, ld
    raise ValueError(f"matmul takes operands with a unit stride along one axis; got a {rows} x {cols} array "
                     f"with strides {x.strides} (np.ascontiguousarray makes one)")


def _vector(v, axis):
    """v, an (n, 1) array (axis 0) or a (1, n) one (axis 1), as BLAS takes a vector: ``(pointer, inc)``."""
    if v.shape[axis] < 2:  # one element, or none: contiguous
        return _address(v), 1
    inc = v.strides[axis] // v.itemsize
    if inc < 1 or inc * v.itemsize != v.strides[axis]:
        raise ValueError(f"matmul takes vectors with a positive stride; got strides {v.strides} "
                         f"(np.ascontiguousarray makes one)")
    return _address(v), inc


def _numpy_product(out, x, y, beta, alpha):
    """``out = alpha * (x @ y) + beta * out`` through ``np.matmul``: the products without OpenBLAS."""
    if alpha == 1 and beta == 0:
        np.matmul(x, y, out=out)
        return
    product = np.matmul(x, y)
    if alpha != 1:
        product *= out.dtype.type(alpha)
    if beta == 0:
        out[...] = product
    else:
        if beta != 1:
            out *= out.dtype.type(beta)
        out += product


def library():
    """Which BLAS runs the products, in words (for a backend's repr and the result records)."""
    return "OpenBLAS (scipy-openblas32)" if load() is not None else "NumPy's BLAS (np.matmul; no scipy-openblas32)"


@functools.cache
def load():
    """The OpenBLAS library of ``scipy-openblas32`` as ``(ctypes.CDLL, ctypes.PyDLL)``, loaded on first use;
    ``None``, with one ``RuntimeWarning``, where it is not installed (the products then go through NumPy).
    ``NumpyBackend`` loads it as it starts, before it sets the BLAS thread count, which reaches only
    the libraries loaded by then."""
    given = "OPENBLAS_THREAD_TIMEOUT" in os.environ
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(SPIN))  # read as the library loads, on its import
    try:
        import scipy_openblas32
    except ImportError as error:
        warnings.warn(f"scipy-openblas32 does not import ({error}): the NumPy backend's products run on NumPy's "
                      "own BLAS (np.matmul), slower: products into an output allocate and hold the GIL, so host "
                      "streams overlap less (pip install scipy-openblas32)", RuntimeWarning, stacklevel=2)
        return None
    finally:
        if not given:
            os.environ.pop("OPENBLAS_THREAD_TIMEOUT", None)

    path = os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))
    return ctypes.CDLL(path), ctypes.PyDLL(path)


def threads():
    """The threads each product runs on: OpenBLAS's setting, or None without ``scipy-openblas32``."""
    library = load()
    return None if library is None else library[1].scipy_openblas_get_num_threads()


@functools.cache
def most_threads():
    """The most threads OpenBLAS runs a product on, its build's ``MAX_THREADS`` (it cuts a larger setting to that
    without a word), read from its configuration; None where that does not say, or without ``scipy-openblas32``."""
    library = load()
    if library is None:
        return None
    config = library[1].scipy_openblas_get_config
    config.restype = ctypes.c_char_p
    found = re.search(rb"MAX_THREADS=(\d+)", config())
    return int(found.group(1)) if found else None


def all_threads():
    """The threads a product may take here: the cores this process may run on, at most ``most_threads()``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, most_threads() or cores)


def check_threads(threads, given=None):
    """``threads`` (an int >= 1) where OpenBLAS runs that many, else a ValueError that names it as ``given`` (default
    the number alone): a count above ``most_threads()`` would run fewer than said."""
    most = most_threads()
    if most is not None and threads > most:
        raise ValueError(f"{given or threads} is more threads than this OpenBLAS runs (at most {most}, its build's "
                         f"MAX_THREADS: it would run {most}); give at most {most}")
    return threads


def hold(threads):
    """``blas_limits.hold(threads)`` for a backend's ``blas_threads``, refused where OpenBLAS would run fewer
    (``check_threads``) before anything is set."""
    return blas_limits.hold(check_threads(threads, f"blas_threads={threads}"))


_shared = {"whole": None, "shares": 0, "changes": 0}  # the threads in force before the shares now held, how many
# are held, and blas_limits.changes() when the first began
_shared_lock = threading.Lock()


def share(streams, held=1):
    """From now on ``streams`` streams run products: each takes an equal part (at least one) of the BLAS threads in
    force before the first share, so that together they ask for no more cores than those stand for. ``held``: the
    streams of the share the caller holds now (1: none), which this one replaces; ``streams`` 1 ends it. Once the
    last share held ends, the threads in force before the first come back (the shares of two backends' hand-offs
    may overlap), unless a backend has set or given back its threads meanwhile (``blas_limits``: one closed, or
    collected, during a hand-off): that setting stays. Nothing without ``scipy-openblas32``."""
    library = load()
    if library is None:
        return
    with _shared_lock:
        if held == 1 and streams > 1:  # a share begins
            if not _shared["shares"]:
                _shared["whole"], _shared["changes"] = threads(), blas_limits.changes()
            _shared["shares"] += 1
        elif held > 1 and streams == 1:  # one ends
            _shared["shares"] -= 1
            if _shared["shares"] or blas_limits.changes() != _shared["changes"]:
                return  # another still holds its part, or the threads in force are a backend's since
        elif streams == 1:
            return  # none held, none begun
        library[1].scipy_openblas_set_num_threads(max(1, _shared["whole"] // streams))


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
        self.scalar = ctypes.c_float if prefix == "s" else ctypes.c_double
        self._gemv, self._ger, self._gemm = (getattr(library, f"scipy_cblas_{prefix}{name}")
                                             for name in ("gemv", "ger", "gemm"))

    def gemv(self, trans, m, n, alpha, a, lda, x, inc_x, beta, y, inc_y, bound=False):
        """``y = alpha op(a) x + beta y``: a (m, n) column-major, op transposes it if ``trans``."""
        return self._call(bound, self._gemv, (_COLUMN_MAJOR, _TRANS[trans], m, n), alpha,
                          (a, lda, x, inc_x, self.scalar(beta), y, inc_y))

    def ger(self, m, n, alpha, x, inc_x, y, inc_y, a, lda, bound=False):
        """``a += alpha x y^T``: a (m, n) column-major."""
        return self._call(bound, self._ger, (_COLUMN_MAJOR, m, n), alpha, (x, inc_x, y, inc_y, a, lda))

    def gemm(self, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bound=False):
        """``c = alpha op(a) op(b) + beta c``: c (m, n) column-major, op(a) (m, k), op(b) (k, n)."""
        return self._call(bound, self._gemm, (_COLUMN_MAJOR, _TRANS[trans_a], _TRANS[trans_b], m, n, k), alpha,
                          (a, lda, b, ldb, self.scalar(beta), c, ldc))

    def _call(self, bound, routine, head, alpha, tail):
        """``routine(*head, alpha, *tail)`` now, or, if ``bound``, that call for later (``_Scaled``, taking
        alpha, where ``alpha`` is None)."""
        if alpha is None:
            return _Scaled(functools.partial(routine, *head), self.scalar, tail)
        args = (*head, self.scalar(alpha), *tail)
        if bound:
            return functools.partial(routine, *args)
        routine(*args)
        return None


class _Scaled:
    """A bound BLAS call that takes its alpha as it runs: ``call(alpha)`` is ``head(scalar(alpha), *tail)``."""

    __slots__ = ("head", "scalar", "tail", "operands")

    def __init__(self, head, scalar, tail):
        self.head, self.scalar, self.tail = head, scalar, tail

    def __call__(self, alpha):
        self.head(self.scalar(alpha), *self.tail)


_BYTES = ctypes.c_char * 0
"""A ctypes array over an array's buffer is passed as a pointer to its first byte."""


def _address(x):
    """A pointer to the first element of x. Through its buffer where x is C-contiguous and writable,
    without the helper object ``x.ctypes`` builds at every use, which any other x takes."""
    try:
        return _BYTES.from_buffer(x)
    except TypeError:  # read-only, or not C-contiguous
        return ctypes.c_void_p(x.ctypes.data)
