"""Host arrays that say what touches them: the NumPy backend's half of the race detector (``races``).

``NUMPY`` is NumPy as a backend's ``xp`` whose every array is ``Tracked``, and every array computed from a
``Tracked`` one is one too. While ``listen(listener)`` holds, each ufunc, array function and method that reads
or writes a tracked array tells ``listener.touch(view, writes)``, with the plain view it touches, and each new
array ``listener.born(array)``; the library's BLAS products (``host_blas.matmul``, into which NumPy cannot see)
are replaced by ``matmul``, which says that it reads its operands and writes its output, and the products
bound once and called later (``host_blas.bind``) by ``bind``, whose calls say the same; the compiled optimizer
updates (``host_updates``) by ``compiled``, which says what each reads and writes (``host_updates.WRITES``).
"""

import sys
import types

import numpy as np

from leapfrog_gpu.backends import host_blas, host_updates

_listener = None  # what listen() was given, while it holds
_MATMUL = host_blas.matmul
_BIND = host_blas.bind
_UPDATES = {name: getattr(host_updates, name) for name in host_updates.WRITES}


def listen(listener):
    """Tell ``listener`` of every access to a tracked array from now on, the library's BLAS products
    included; returns the function that stops it."""
    global _listener
    modules = [module for module in list(sys.modules.values()) if getattr(module, "__name__", "").startswith(
        "leapfrog_gpu") and getattr(module, "matmul", None) is _MATMUL]
    for module in modules:
        module.matmul = matmul
    host_blas.bind = bind
    for update, fn in _UPDATES.items():
        setattr(host_updates, update, compiled(fn, host_updates.WRITES[update]))
    _listener = listener

    def stop():
        global _listener
        for module in modules:
            module.matmul = _MATMUL
        host_blas.bind = _BIND
        for update, fn in _UPDATES.items():
            setattr(host_updates, update, fn)
        _listener = None

    return stop


def _touch(value, writes):
    """Tell the listener that ``value``, if a tracked array, is read (or written)."""
    if isinstance(value, Tracked):
        _tell(value.view(np.ndarray), writes)


def _tell(view, writes):
    if _listener is not None:
        _listener.touch(view, writes)


def _plain(value):
    """``value`` with every ``Tracked`` array in it (also in a list or a tuple) as a plain view."""
    if isinstance(value, Tracked):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    return value


def _arrays(values):
    for value in values:
        if isinstance(value, Tracked):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _arrays(value)


def _wrap(result):
    """A result as ``Tracked``: what is computed from a tracked array is tracked too."""
    if isinstance(result, np.ndarray) and not isinstance(result, Tracked):
        if _listener is not None and result.flags.owndata:
            _listener.born(result)
        return result.view(Tracked)
    if isinstance(result, tuple):
        return tuple(_wrap(item) for item in result)
    return result


VIEWS = {np.transpose, np.reshape, np.ravel, np.squeeze, np.expand_dims, np.moveaxis, np.swapaxes, np.atleast_1d,
         np.atleast_2d, np.broadcast_to, np.shape, np.ndim, np.size, np.result_type, np.shares_memory,
         np.may_share_memory, np.can_cast, np.min_scalar_type}
"""Array functions that read no element of their arguments."""


WRITE_FIRST = {np.copyto, np.put, np.place, np.putmask, np.put_along_axis, np.fill_diagonal}
"""Array functions that write their first argument."""


class Tracked(np.ndarray):
    """A host array whose every read and write the listener is told of."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out") or ()
        others = [value for key, value in kwargs.items() if key != "out"]  # where=, initial=
        for value in _arrays((*(inputs[1:] if method == "at" else inputs), *others)):
            _touch(value, False)
        for value in (*out, *(inputs[:1] if method == "at" else ())):
            _touch(value, True)
        result = getattr(ufunc, method)(*_plain(inputs), **{key: _plain(value) for key, value in kwargs.items()})
        return (out[0] if len(out) == 1 else out) if out else _wrap(result)

    def __array_function__(self, function, types, args, kwargs):
        written = [args[0] if args else kwargs["dst"]] if function in WRITE_FIRST else []
        if isinstance(kwargs.get("out"), Tracked):
            written.append(kwargs["out"])
        if function not in VIEWS:
            for value in _arrays((*args, *kwargs.values())):
                _touch(value, any(value is w for w in written))
        result = function(*_plain(args), **{key: _plain(value) for key, value in kwargs.items()})
        return kwargs["out"] if written and "out" in kwargs else _wrap(result)

    def __getitem__(self, key):
        item = np.ndarray.__getitem__(self, key)
        if not isinstance(item, np.ndarray):  # an element: read
            _touch(self, False)
        return item

    def __setitem__(self, key, value):
        plain = self.view(np.ndarray)
        region = plain[key]  # the view written, or, where the key makes no view, the whole array
        _tell(region if isinstance(region, np.ndarray) and np.may_share_memory(region, plain) else plain, True)
        for array in _arrays((value,)):
            _touch(array, False)
        plain[key] = _plain(value)

    def fill(self, value):
        _touch(self, True)
        self.view(np.ndarray).fill(value)

    def copy(self, order="C"):
        _touch(self, False)
        return _wrap(self.view(np.ndarray).copy(order))

    def astype(self, *args, **kwargs):
        _touch(self, False)
        return _wrap(self.view(np.ndarray).astype(*args, **kwargs))



def _reading(method):
    """The ndarray method ``method``, which reads the array and is no ufunc, telling the listener so."""
    def read(self, *args, **kwargs):
        _touch(self, False)
        return getattr(self.view(np.ndarray), method)(*args, **kwargs)

    read.__name__ = method
    return read


for _method in ("item", "tolist", "tobytes", "__float__", "__int__", "__bool__"):
    setattr(Tracked, _method, _reading(_method))


def matmul(out, x, y, alpha=1.0, beta=0.0):
    """``host_blas.matmul``, which reads x and y and writes out (reads it too when beta is not 0)."""
    for value, writes in ((x, False), (y, False), (out, True)):
        _touch(value, writes)
    _MATMUL(*_plain((out, x, y)), alpha, beta)


def compiled(update, writes):
    """A ``host_updates`` loop that says it reads each array it takes and writes those at positions ``writes``
    (which it reads first)."""
    def run(*args):
        for position, value in enumerate(args):
            _touch(value, False)
            if position in writes:
                _touch(value, True)
        update(*_plain(args))

    return run


def bind(out, x, y, alpha=1.0, beta=0.0):
    """``host_blas.bind``, whose call reads x and y and writes out (reads it too when beta is not 0) each
    time it is made; with ``alpha`` None the call takes alpha, as the library's does."""
    call = _BIND(*_plain((out, x, y)), alpha, beta)

    def bound(*alpha):
        for value, writes in ((x, False), (y, False), *(((out, False),) if beta else ()), (out, True)):
            _touch(value, writes)
        call(*alpha)

    return bound


def _made(function):
    def make(*args, **kwargs):
        return _wrap(function(*args, **kwargs))

    return make


NUMPY = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
"""NumPy as a host backend's ``xp``, whose arrays are ``Tracked``."""
for _function in ("zeros", "empty", "full", "ones", "asarray", "array", "ascontiguousarray", "zeros_like",
                  "empty_like", "full_like", "ones_like"):
    setattr(NUMPY, _function, _made(getattr(np, _function)))
