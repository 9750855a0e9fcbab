"""Arrays of the stand-in: ``cupy.ndarray``, its creation functions, ufuncs, reductions and ``matmul``.

Every creation (``asarray``, ``array``, ``empty``, ``zeros``, ``ones``, ``full``, ``eye``, the ``*_like``s,
``copy``, ``astype``, ``concatenate``), ufunc, reduction, ``copyto``, ``fill``, slice assignment and
``matmul``/``dot``/``@`` is enqueued on the *current* stream and allocates from the pool on the current stream.
``transpose``, ``swapaxes``, ``reshape`` (where it can) and basic indexing give views. ``get(stream=None)`` copies on
the current (or given) stream and synchronizes that stream only; ``bool``/``float``/``int``/``item``/
``repr`` go through it. ``set(arr, stream=None)`` wants the same dtype (``TypeError``) and shape
(``ValueError``); it reads a pinned source (``cuda.alloc_pinned_memory``) when the copy runs and a
pageable one at once, as ``cudaMemcpyAsync`` does. ``asarray`` of a host array takes its copy at once.
``numpy`` calls on a device array are refused (``TypeError``, as CuPy's ``__array__``); ufuncs with a
NumPy array operand too. Only basic indexing (ints, slices, ``None``, ``...``) gives views. During a
capture, as in CuPy, ``matmul``/``dot`` (cuBLAS) raise ``NotImplementedError``, ``set``/``asarray`` of
host data (H2D) and ``get`` (D2H) ``RuntimeError``.
"""

import builtins
import numbers
import sys
import types

import numpy as np

from . import memory, queues

_max = builtins.max  # this module defines cupy.min, max, all, any and sum


def _shape(shape):
    return (int(shape),) if isinstance(shape, numbers.Integral) else tuple(int(n) for n in shape)


def _new(shape, dtype, order="C", strides=None):
    shape, dtype = _shape(shape), np.dtype(dtype)
    alloc = memory.malloc(_max(int(np.prod(shape, dtype=np.int64)), 1) * dtype.itemsize)
    return ndarray._wrap(np.ndarray(shape, dtype, buffer=alloc.chunk.buffer, order=order, strides=strides), alloc)


def _basic(key):
    key = key if isinstance(key, tuple) else (key,)
    for part in key:
        if not (part is None or part is Ellipsis or isinstance(part, (slice, numbers.Integral))):
            raise TypeError(f"the CuPy stand-in supports basic indexing only (ints, slices, None, ...); got {part!r}")
    return key


def _scalar_or_device(value, what):
    if isinstance(value, ndarray):
        return value
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)} in {what}: pass a cupy.ndarray (cupy.asarray) or a scalar")
    if isinstance(value, (numbers.Number, np.generic)):
        return value
    raise TypeError(f"Unsupported type {type(value)} in {what}")


def numpy_view(value):
    return value._a if isinstance(value, ndarray) else value


class ndarray:  # noqa: N801 - CuPy's name
    """``cupy.ndarray``: a view of pool memory; every operation on it is enqueued."""

    __slots__ = ("_a", "_alloc", "__weakref__")
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("the CuPy stand-in allocates its own memory")
        array = _new(shape, dtype, order)
        self._a, self._alloc = array._a, array._alloc

    @classmethod
    def _wrap(cls, view, alloc):
        array = object.__new__(cls)
        array._a, array._alloc = view, alloc
        return array

    shape = property(lambda self: self._a.shape)
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.ctypes.data))  # the memory pointer
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: self.transpose())

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        function = UFUNCS.get(ufunc.__name__)
        if method != "__call__" or function is None:
            return NotImplemented
        return function(*inputs, **kwargs)

    def __array_function__(self, function, types, args, kwargs):
        ours = getattr(sys.modules[__package__], function.__name__, None)  # numpy.f runs cupy.f
        if ours is None or not callable(ours):
            return NotImplemented
        return ours(*args, **kwargs)

    def __repr__(self):
        return repr(self.get())

    # views
    def __getitem__(self, key):
        key = _basic(key)
        view = self._a[key]
        if not isinstance(view, np.ndarray):
            view = self._a[(*key, Ellipsis)]  # all ints: a 0-d device array, as in CuPy
        return ndarray._wrap(view, self._alloc)

    def transpose(self, *axes):
        return ndarray._wrap(self._a.transpose(*axes), self._alloc)

    def swapaxes(self, axis1, axis2):
        return ndarray._wrap(self._a.swapaxes(axis1, axis2), self._alloc)

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape
        view = self._a.reshape(shape, order=order)
        if np.shares_memory(view, self._a) or view.size == 0:
            return ndarray._wrap(view, self._alloc)
        return self.copy(order).reshape(shape, order=order)

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    # host transfers
    def get(self, stream=None, order="C", out=None, blocking=True):
        stream = queues.device.stack[-1] if stream is None else stream
        if stream._capture is not None:
            raise RuntimeError("the current stream is capturing, so D2H transfers are disallowed")
        if out is None:
            out = np.empty(self.shape, self.dtype, order=order)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained fromcupy.ndarray")
            if out.dtype != self.dtype:
                raise TypeError(f"{out.dtype} array cannot be obtained from {self.dtype} array")
            if out.shape != self.shape:
                raise ValueError(f"Shape mismatch. Expected shape: {self.shape}, actual shape: {out.shape}")
        view, host = self._a, out
        queues.enqueue(stream, "get", lambda: np.copyto(host, view), reads=[self])
        if blocking or not memory.is_pinned(out):  # a copy into pageable memory returns once it is done
            queues.host_wait("get", stream, queues.drained([stream]))
        return out

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if self.shape != arr.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if self._a.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        elif self._a.flags.f_contiguous:
            arr = np.asfortranarray(arr)
        else:
            raise RuntimeError("Cannot set to non-contiguous array")
        stream = queues.device.stack[-1] if stream is None else stream
        if stream._capture is not None:
            raise RuntimeError("the current stream is capturing, so H2D transfers are disallowed")
        source = arr if memory.is_pinned(arr) else arr.copy()  # pageable memory is staged at once
        view = self._a
        queues.enqueue(stream, "set", lambda: np.copyto(view, source), writes=[self])

    def item(self):
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.get().item()

    def __bool__(self):
        return bool(self.get())

    def __float__(self):
        return float(self.get())

    def __int__(self):
        return int(self.get())

    # device work on the current stream
    def copy(self, order="C"):
        out = _new(self.shape, self.dtype, order)
        copyto(out, self)
        return out

    def astype(self, dtype, order="K", copy=True):
        if order not in ("C", "F", "A", "K"):
            raise ValueError(f"astype: order must be 'C', 'F', 'A' or 'K'; got {order!r}")
        layout = np.empty_like(self._a, dtype, order)  # NumPy's layout for ``order`` (K: the strides' order)
        if not copy and np.dtype(dtype) == self.dtype and layout.strides == self._a.strides:
            return self
        out = _new(self.shape, dtype, strides=layout.strides)
        copyto(out, self, casting="unsafe")
        return out

    def fill(self, value):
        view = self._a
        queues.enqueue(queues.device.stack[-1], "fill", lambda: view.fill(value), writes=[self])

    def __setitem__(self, key, value):
        target = self[key]
        if isinstance(value, (ndarray, np.ndarray)):
            copyto(target, asarray(value) if isinstance(value, np.ndarray) else value, casting="unsafe")
        else:
            target.fill(value)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        return sum(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims)

    def max(self, axis=None, out=None, keepdims=False):
        return max(self, axis=axis, out=out, keepdims=keepdims)

    def min(self, axis=None, out=None, keepdims=False):
        return min(self, axis=axis, out=out, keepdims=keepdims)

    def all(self, axis=None, out=None, keepdims=False):
        return all(self, axis=axis, out=out, keepdims=keepdims)

    def any(self, axis=None, out=None, keepdims=False):
        return any(self, axis=axis, out=out, keepdims=keepdims)


def _operator(name, reflected=False, inplace=False):
    def method(self, other=None):
        function = UFUNCS[name]
        if other is None:
            return function(self)
        if inplace:
            return function(self, other, out=self)
        return function(other, self) if reflected else function(self, other)

    return method


for _name, _ufunc_name in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "true_divide"),
                           ("pow", "power")):
    setattr(ndarray, f"__{_name}__", _operator(_ufunc_name))
    setattr(ndarray, f"__r{_name}__", _operator(_ufunc_name, reflected=True))
    setattr(ndarray, f"__i{_name}__", _operator(_ufunc_name, inplace=True))
for _name, _ufunc_name in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                           ("eq", "equal"), ("ne", "not_equal")):
    setattr(ndarray, f"__{_name}__", _operator(_ufunc_name))
ndarray.__matmul__ = lambda self, other: matmul(self, other)
ndarray.__rmatmul__ = lambda self, other: matmul(other, self)
for _name, _ufunc_name in (("and", "bitwise_and"), ("or", "bitwise_or")):
    setattr(ndarray, f"__{_name}__", _operator(_ufunc_name))
ndarray.__invert__ = _operator("invert")
ndarray.__neg__ = _operator("negative")
ndarray.__abs__ = _operator("absolute")


def _make_ufunc(name):
    ufunc = getattr(np, name)

    def call(*args, out=None, dtype=None, casting="same_kind"):
        if len(args) > ufunc.nin:  # out given by position, as NumPy and CuPy accept
            args, (out,) = args[:ufunc.nin], args[ufunc.nin:]
        args = [_scalar_or_device(arg, name) for arg in args]
        devices = [arg for arg in args if isinstance(arg, ndarray)]
        if not devices:
            raise TypeError(f"{name}: no cupy.ndarray among the arguments")
        shape = np.broadcast_shapes(*(arg.shape for arg in devices))
        probe = [np.zeros(1, arg.dtype) if isinstance(arg, ndarray) else arg for arg in args]
        with np.errstate(all="ignore"):  # zeros stand for the values: only the dtype is asked for (1 / 0 warns)
            result_dtype = ufunc(*probe, dtype=dtype, casting=casting).dtype
        if out is None:
            out = _new(shape, result_dtype)
        elif not isinstance(out, ndarray):
            raise TypeError(f"{name}: out must be a cupy.ndarray; got {type(out)}")
        elif np.broadcast_shapes(shape, out.shape) != out.shape:
            raise ValueError(f"{name}: out has shape {out.shape}, the result {shape}")
        views, target = [numpy_view(arg) for arg in args], out._a
        queues.enqueue(queues.device.stack[-1], name,
                       lambda: ufunc(*views, out=target, dtype=dtype, casting=casting), devices, [out])
        return out

    call.__name__ = name
    return call


UFUNCS = {name: _make_ufunc(name) for name in (
    "add", "subtract", "multiply", "true_divide", "divide", "power", "negative", "absolute", "square", "sqrt",
    "exp", "log", "tanh", "maximum", "minimum", "reciprocal", "sign", "isfinite", "isnan", "isinf",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and", "logical_or",
    "logical_not", "bitwise_and", "bitwise_or", "invert")}
UFUNCS["abs"] = UFUNCS["absolute"]
"""The ufuncs, by CuPy's names (the package holds each as ``cupy.<name>``)."""


def _make_reduction(name):
    function = getattr(np, name)

    def reduce(a, axis=None, dtype=None, out=None, keepdims=False):
        if not isinstance(a, ndarray):
            raise TypeError(f"{name}: expected a cupy.ndarray; got {type(a)}")
        axes = tuple(range(a.ndim)) if axis is None else tuple(
            ax % a.ndim for ax in ((axis,) if isinstance(axis, numbers.Integral) else axis))
        shape = tuple(1 if i in axes else n for i, n in enumerate(a.shape) if keepdims or i not in axes)
        options = {} if dtype is None else {"dtype": dtype}
        result_dtype = function(np.zeros((1,) * a.ndim or 1, a.dtype), **options).dtype
        if out is None:
            out = _new(shape, result_dtype)
        elif not isinstance(out, ndarray) or out.shape != shape:
            raise ValueError(f"{name}: out must be a cupy.ndarray of shape {shape}")
        view, target = a._a, out._a
        queues.enqueue(queues.device.stack[-1], name,
                       lambda: function(view, axis=axes, out=target, keepdims=keepdims, **options), [a], [out])
        return out

    reduce.__name__ = name
    return reduce


sum = _make_reduction("sum")  # noqa: A001 - CuPy's names
max = _make_reduction("max")  # noqa: A001
min = _make_reduction("min")  # noqa: A001
all = _make_reduction("all")  # noqa: A001
any = _make_reduction("any")  # noqa: A001


def argmax(a, axis=None):
    """``cupy.argmax``: int64 indices of the flattened array's largest element (``axis`` None) or along ``axis``."""
    if not isinstance(a, ndarray):
        raise TypeError(f"argmax: expected a cupy.ndarray; got {type(a)}")
    shape = () if axis is None else tuple(n for i, n in enumerate(a.shape) if i != axis % a.ndim)
    out = _new(shape, np.int64)
    view, target = a._a, out._a
    queues.enqueue(queues.device.stack[-1], "argmax", lambda: np.copyto(target, np.argmax(view, axis=axis)), [a], [out])
    return out


def _cublas(name):
    stream = queues.device.stack[-1]
    if stream._capture is not None:
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
    return stream


def matmul(a, b, out=None):
    """cuBLAS (GEMM, batched when a or b has more than two dimensions), on the current stream."""
    stream = _cublas("matmul")
    for operand in (a, b):
        if not isinstance(operand, ndarray):
            raise TypeError(f"matmul: expected cupy.ndarray operands; got {type(operand)}")
    (sa, sb) = a.shape, b.shape
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must not be scalars")
    inner_a, inner_b = sa[-1], (sb[0] if b.ndim == 1 else sb[-2])
    if inner_a != inner_b:
        raise ValueError(f"matmul: mismatch in its core dimension: {sa} and {sb}")
    if a.ndim == 1 and b.ndim == 1:
        shape = ()
    elif a.ndim == 1:
        shape = sb[:-2] + sb[-1:]
    elif b.ndim == 1:
        shape = sa[:-1]
    else:
        shape = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    if out is None:
        out = _new(shape, np.result_type(a.dtype, b.dtype))
    elif not isinstance(out, ndarray) or out.shape != shape:
        raise ValueError(f"matmul: out must be a cupy.ndarray of shape {shape}")
    va, vb, target = a._a, b._a, out._a
    queues.enqueue(stream, "matmul", lambda: np.matmul(va, vb, out=target), [a, b], [out])
    return out


def concatenate(tup, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """The arrays of ``tup`` joined along ``axis`` (None: flattened first), one copy of each into ``out``."""
    parts = [part.ravel() if axis is None else part for part in tup]
    for part in parts:
        if not isinstance(part, ndarray):
            raise TypeError(f"concatenate: expected cupy.ndarray operands; got {type(part)}")
    if out is not None and dtype is not None:
        raise TypeError("concatenate() only takes `out` or `dtype` as an argument, but both were provided.")
    axis = 0 if axis is None else axis % parts[0].ndim
    shape = np.concatenate([np.empty(part.shape, np.int8) for part in parts], axis).shape  # checks the shapes
    if out is None:
        out = _new(shape, np.result_type(*(part.dtype for part in parts)) if dtype is None else dtype)
    elif not isinstance(out, ndarray) or out.shape != shape:
        raise ValueError(f"concatenate: out must be a cupy.ndarray of shape {shape}")
    start = 0
    for part in parts:
        copyto(out[(slice(None),) * axis + (slice(start, start + part.shape[axis]),)], part, casting=casting)
        start += part.shape[axis]
    return out


def dot(a, b, out=None):
    return matmul(a, b, out=out)


def copyto(dst, src, casting="same_kind", where=None):
    if where is not None:
        raise NotImplementedError("copyto(where=) is not modelled")
    if not isinstance(dst, ndarray):
        raise TypeError(f"copyto: dst must be a cupy.ndarray; got {type(dst)}")
    src = _scalar_or_device(src, "copyto")
    if isinstance(src, ndarray):
        if not np.can_cast(src.dtype, dst.dtype, casting):
            raise TypeError(f"Cannot cast array data from {src.dtype} to {dst.dtype} according to the rule "
                            f"'{casting}'")
        np.broadcast_shapes(src.shape, dst.shape)
    target, source = dst._a, numpy_view(src)
    queues.enqueue(queues.device.stack[-1], "copyto", lambda: np.copyto(target, source, casting="unsafe"),
                   [src] if isinstance(src, ndarray) else [], [dst])


# -- creation ----------------------------------------------------------------------------------------


def arange(start, stop=None, step=1, dtype=None):
    """``cupy.arange``: ``numpy.arange``'s values, copied to the device."""
    return array(np.arange(start, stop, step, dtype=dtype))


def moveaxis(a, source, destination):
    """``cupy.moveaxis``: a view, as NumPy's."""
    return ndarray._wrap(np.moveaxis(a._a, source, destination), a._alloc)


def ascontiguousarray(a, dtype=None):
    """``cupy.ascontiguousarray``: ``a`` itself where it is C-contiguous in ``dtype``, else a C-ordered copy."""
    if a._a.flags.c_contiguous and (dtype is None or np.dtype(dtype) == a.dtype):
        return a
    return a.astype(a.dtype if dtype is None else dtype)


def empty(shape, dtype=float, order="C"):
    return _new(shape, dtype, order)


def _filled(shape, value, dtype, order="C"):
    out = _new(shape, dtype, order)
    out.fill(value)
    return out


def zeros(shape, dtype=float, order="C"):
    return _filled(shape, 0, dtype, order)


def ones(shape, dtype=float, order="C"):
    return _filled(shape, 1, dtype, order)


def full(shape, fill_value, dtype=None, order="C"):
    return _filled(shape, fill_value, np.result_type(fill_value) if dtype is None else dtype, order)


def eye(N, M=None, k=0, dtype=float, order="C"):
    out = _new((N, N if M is None else M), dtype, order)
    target = out._a
    queues.enqueue(queues.device.stack[-1], "eye", lambda: np.copyto(target, np.eye(N, M, k, target.dtype)),
                   writes=[out])
    return out


def empty_like(a, dtype=None):
    return empty(a.shape, a.dtype if dtype is None else dtype)


def zeros_like(a, dtype=None):
    return zeros(a.shape, a.dtype if dtype is None else dtype)


def ones_like(a, dtype=None):
    return ones(a.shape, a.dtype if dtype is None else dtype)


def full_like(a, fill_value, dtype=None):
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype)


def array(obj, dtype=None, copy=True, order="K"):
    if isinstance(obj, ndarray):
        if not copy and (dtype is None or np.dtype(dtype) == obj.dtype):
            return obj
        return obj.astype(obj.dtype if dtype is None else dtype)
    stream = queues.device.stack[-1]
    if stream._capture is not None:
        raise RuntimeError("the current stream is capturing, so H2D transfers are disallowed")
    host = np.array(obj, dtype=dtype, copy=True, order="F" if order == "F" else "C")  # staged at once
    out = _new(host.shape, host.dtype, "F" if order == "F" else "C")
    target = out._a
    queues.enqueue(stream, "asarray", lambda: np.copyto(target, host), writes=[out])
    return out


def asarray(a, dtype=None, order=None):
    return array(a, dtype=dtype, copy=False, order=order or "K")


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    return np.asarray(a, order=order)
