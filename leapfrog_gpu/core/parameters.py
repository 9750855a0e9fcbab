"""Parameters in and out of a network, one protocol for the three: ``{unit: {name: array}}``.

A unit is what carries parameters: a layer number l for ``MLP`` and ``RNN`` (``{2: {"w": ..., "b": ...}}``,
the RNN's recurrent layers with ``"u"`` too), a node name for ``DagNet`` (``{"h": {"w": ..., "b": ...}}``).
``check`` is the one path a network's ``set_parameters`` takes: every given array is checked (a real array
on the host or on the backend's device, of the shape the network holds, finite once in the network's
dtype) before any is copied, and an error names the parameter and changes nothing. Each b may also be
given as Nielsen's column, (n, 1). Nested Python lists are arrays too.
"""

import hashlib
import numbers
from collections.abc import Mapping

import numpy as np

from ..backends import to_host
from .checks import all_finite, real_array, shown


def check(params, live, dtype, xp, label, what="parameters"):
    """``[(target, value)]``: each array of ``params`` (``{unit: {name: value}}``, any subset of the units
    and names of ``live``, the network's own arrays) paired with the array it replaces, as an array of
    ``dtype`` on the host or on ``xp``'s device; or raise for the first that is wrong. ``label(unit, name)``
    names a parameter in an error, ``what`` the whole (an optimizer's slot: ``exp_avg``)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"{what} must be a dict {{unit: {{name: array}}}} as parameters() gives; "
                        f"got {type(params).__name__}")
    checked = []
    for unit, named in params.items():
        if unit not in live:
            raise ValueError(f"no unit {unit!r} carries parameters; those that do are {_listing(live)}")
        if not isinstance(named, Mapping):
            raise TypeError(f"the {what} of {unit!r} must be a dict {{name: array}}; got {type(named).__name__}")
        for name, value in named.items():
            if name not in live[unit]:
                raise ValueError(f"unit {unit!r} has no parameter {name!r}; it has {_listing(live[unit])}")
            shape = tuple(live[unit][name].shape)
            checked.append((live[unit][name], array(label(unit, name), value, shape, dtype, xp)))
    return checked


def from_lists(groups):
    """``{unit: {name: value}}`` from lists given by position: ``groups`` holds ``(what, given, name,
    units)``, e.g. ``("weights", weights, "w", range(2, L + 1))``; a TypeError or ValueError when a list is
    not one or has not one array per unit."""
    params = {}
    for what, given, name, units in groups:
        span = f"layers {units[0]}..{units[-1]}"
        if isinstance(given, (np.ndarray, Mapping)) or not hasattr(given, "__len__"):
            raise TypeError(f"{what} must be a list of {len(units)} arrays ({span}); got {type(given).__name__}")
        if len(given) != len(units):
            raise ValueError(f"{what} must list {len(units)} arrays ({span}); got {len(given)}")
        for unit, value in zip(units, given):
            params.setdefault(unit, {})[name] = value
    return params


def array(what, value, shape, dtype, xp):
    """``value`` as an array of ``shape`` (None: its own) in ``dtype``: real, finite, on the host or on ``xp``'s
    device."""
    value = real_array(xp, what, value)
    if shape is not None and len(shape) == 1 and tuple(value.shape) == (*shape, 1):
        value = value.reshape(shape)  # Nielsen's column of biases
    if shape is not None and tuple(value.shape) != shape:
        nielsen = f" or ({shape[0]}, 1)" if len(shape) == 1 else ""
        raise ValueError(f"{what} must have shape {shape}{nielsen}; got {tuple(value.shape)}")
    module = np if isinstance(value, np.ndarray) else xp
    with np.errstate(over="ignore"):  # a value beyond dtype's range becomes Inf, refused below
        given, value = value, module.asarray(value, dtype=dtype)
    if not all_finite(xp, value):
        with np.errstate(over="ignore"):  # finite as given and in float64, not in float32
            beyond = np.dtype(dtype) == np.float32 and all_finite(xp, module.asarray(given, dtype=np.float64))
        raise ValueError(f"{what} contains NaN or Inf (as {dtype}); every parameter must be finite" +
                         (f": a number beyond +-{float(np.finfo(dtype).max):.4g}, which float64 holds; build the "
                          "network with dtype='float64'" if beyond else ""))
    return value


def generator(seed):
    """``numpy.random.default_rng(seed)``, for ``seed`` an integer >= 0 or None (fresh entropy from the system),
    the parameters' (or ``fit``'s batches'); a TypeError or ValueError naming ``seed`` for any other."""
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer >= 0 or None; got {shown(seed)}")
    if seed < 0:
        raise ValueError(f"seed must be an integer >= 0 or None; got {shown(seed)}")
    return np.random.default_rng(int(seed))


def took_state(order, state):
    """Whether the generator ``order`` took ``state`` as its bit generator's (``bit_generator.state``, a state of
    ``Fitting.state()``'s ``rng``): False for one of another bit generator, malformed, or of integers beyond 64 bits
    or below 0."""
    try:
        order.bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError):
        return False
    return True


def read_only(name, call):
    """The error for an assignment to the network's ``name`` (``weights``, ``biases``, ...); ``call`` is how
    to load parameters instead."""
    return AttributeError(f"{name} cannot be assigned: each read of it is a copy; to load parameters call {call}")


def copies(arrays):
    """A copy of ``arrays``: an array, or dicts, lists and tuples of them (tuples become lists)."""
    if isinstance(arrays, dict):
        return {key: copies(value) for key, value in arrays.items()}
    if isinstance(arrays, (list, tuple)):
        return [copies(value) for value in arrays]
    return arrays.copy()


def _listing(names):
    return ", ".join(repr(name) for name in names)


def digest(arrays):
    """The SHA-256 of ``arrays`` (each one's dtype, shape and bytes; a CuPy array's copied to the host), in hex."""
    sha = hashlib.sha256()
    for array in arrays:
        array = to_host(array)
        sha.update(f"{array.dtype.str}{array.shape}".encode())
        sha.update(np.ascontiguousarray(array).data)
    return sha.hexdigest()
