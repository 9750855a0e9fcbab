"""The checks every network runs on what it is given: layer widths, a count, a flag, a dtype, a backend, a learning
rate, a batch of columns, targets given as class labels, an array on the host or the device, a memory limit.

One place for them, so that ``MLP``, ``RNN`` and ``DagNet`` refuse the same bad input in the same words.
"""

import itertools
import math
import numbers
import re

import numpy as np

from ..backends import get_backend, resolve
from .functions import ACTIVATIONS, DTYPES

LONG = 12
"""Widths that ``widths`` writes as a list; more are written by their runs."""
MEMORY_LIMIT = 2**30
"""Bytes the extra buffers of a solver (Naumov's, the scans over time, the DAG's block schedules, Newton's
blocks) may take for one network and batch size unless the user allows more."""


def check_sizes(sizes, least=2, example="[784, 30, 10]", layers="input and output"):
    """``sizes`` as a list of at least ``least`` integer widths >= 1, or a TypeError/ValueError saying why."""
    try:
        sizes = list(sizes)
    except TypeError:
        raise TypeError(f"sizes must be a list of layer widths such as {example}; got {shown(sizes)}") from None
    for width in sizes:
        if isinstance(width, bool) or not isinstance(width, numbers.Integral):
            raise TypeError(f"sizes must hold integers (layer widths); got {shown(sizes)}")
    if len(sizes) < least:
        raise ValueError(f"sizes must list at least {least} layers ({layers}), e.g. {example}; got {shown(sizes)}")
    if min(sizes) < 1:
        raise ValueError(f"every width in sizes must be >= 1; got {shown(sizes)}")
    return [int(width) for width in sizes]


def check_count(name, value, least=1, most=None, what=None):
    """``value`` as an int from ``least`` to ``most`` (``what``: its words), else a TypeError (not an integer) or a
    ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {least}; got {shown(value)}")
    if value < least or (most is not None and value > most):
        raise ValueError(f"{name} must be an integer >= {least}{'' if most is None else f', at most {what}'}; got "
                         f"{value!r}")
    return int(value)


def check_cap(name, value, none):
    """``value``, a cap on a solver's sweeps or iterations: None (``none`` says what that runs) or an int >= 1; else a
    TypeError (not an integer) or a ValueError, each ``{name} must be None ({none}) or an integer >= 1; got ...``."""
    if value is None:
        return None
    message = f"{name} must be None ({none}) or an integer >= 1; got {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(message)
    if value < 1:
        raise ValueError(message)
    return int(value)


def check_flag(name, value):
    """``value`` as a bool: True or False (or NumPy's), else a TypeError naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {shown(value)}")
    return bool(value)


def check_dtype(dtype):
    """The name of ``dtype``, one of ``DTYPES``, or a ValueError naming them."""
    try:
        name = None if dtype is None else np.dtype(dtype).name  # NumPy reads None as float64
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, DTYPES))}; got {shown(dtype)}")
    return name


def real_array(xp, name, value):
    """``value`` (an array, or anything ``numpy.asarray`` takes) as an array of real numbers that ``xp``'s
    backend can read: a host array, or a CuPy array on a GPU backend; else a TypeError saying what to pass."""
    if xp is np and type(value).__module__.startswith("cupy"):
        raise TypeError(f"{name} is a CuPy array but the network runs on the numpy backend; pass its host copy "
                        "(.get())")
    if isinstance(value, np.ma.MaskedArray):  # its checks would skip what is masked, which the network would read
        raise TypeError(f"{name} is a masked array, whose masked entries a network reads as they are; pass "
                        f"{name}.filled(value) with the value they stand for, or drop the masked samples")
    if isinstance(value, np.matrix):  # always 2-D, where a sequence's axes are added
        value = np.asarray(value)
    if not isinstance(value, (np.ndarray, xp.ndarray)):  # lists; another library's arrays (a tensor, a pandas Series)
        try:
            value = np.asarray(value)
        except ValueError as error:
            raise _unequal(name, error) from None
        except (TypeError, RuntimeError) as error:  # a tensor on a GPU, or one that requires grad
            raise TypeError(f"{name} cannot be read as a NumPy array ({error}); pass a NumPy array") from None
    if value.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers (a float or integer dtype); got dtype {value.dtype}")
    return value


def all_finite(xp, value):
    """Whether every element of ``value`` (a host or an ``xp`` array) is finite; integers always are."""
    if value.dtype.kind != "f":
        return True
    return bool((np if isinstance(value, np.ndarray) else xp).isfinite(value).all())


def check_finite_as(xp, name, value, dtype):
    """Raise a ValueError if ``value``, an input or target, holds a NaN or an Inf, or a number beyond the range of
    ``dtype``, the network's, into which it is cast (1e300 into float32: Inf)."""
    if not all_finite(xp, value):
        raise ValueError(f"{name} contains NaN or Inf; every input and target must be finite")
    largest = float(np.finfo(dtype).max)
    if value.dtype.kind == "f" and value.size and value.dtype.itemsize > np.dtype(dtype).itemsize \
            and max(float(value.max()), -float(value.min())) > largest:
        raise ValueError(f"{name} contains NaN or Inf as {np.dtype(dtype).name}, the network's dtype (a number "
                         f"beyond +-{largest:.4g}); every input and target must be finite: scale {name}, or build "
                         "the network with dtype='float64'")


def check_batch(xp, name, value, rows, dtype, sizes=None):
    """``value`` as a 2-D (rows, B) array of finite real numbers in ``dtype`` (``check_finite_as``), B >= 1, on a
    device ``xp`` can read; ``sizes``, when given, is named in a shape error."""
    value = real_array(xp, name, value)
    given = tuple(value.shape)
    if value.ndim == 1:
        value = value.reshape(-1, 1)
    if value.ndim != 2 or value.shape[0] != rows:
        network = "" if sizes is None else f" for sizes {widths(sizes)}"
        rows_given = value.ndim == 2 and value.shape[1] == rows  # samples as rows, as PyTorch has them
        raise ValueError(f"{name} must have shape ({rows}, B) or ({rows},){network}; got {given}"
                         + (f": samples are columns here, pass {name}.T" if rows_given else ""))
    if value.shape[1] == 0:
        raise ValueError(f"{name} holds an empty batch: shape {tuple(value.shape)}, need B >= 1")
    check_finite_as(xp, name, value, dtype)
    return value


def shape_of(name, a):
    """The shape of ``a``, an array on any device or nested lists (``np.shape``, which a device array may not
    dispatch); a ValueError naming it ``name`` for lists of unequal lengths."""
    if hasattr(a, "shape"):
        return tuple(a.shape)
    try:
        return np.shape(a)
    except ValueError as error:
        raise _unequal(name, error) from None


def _unequal(name, error):
    """The ValueError of ``name`` given as nested lists of unequal lengths, which NumPy's ``error`` refused."""
    return ValueError(f"{name} must be an array, or nested lists of equal lengths; got lists that NumPy reads as "
                      f"no array ({error})")


def targets(xp, y, shape, axis, outputs, activation, dtype, noun, cost):
    """The targets ``y`` stands for where it has ``shape``, the outputs' shape less their axis of ``outputs``
    units, which goes at ``axis`` (the samples' B, axis 0; or (tau, B) for an RNN's output at every step, axis
    1): for one output, its values with that axis put in; for two or more outputs of classes (their
    ``activation`` a hidden layer's, sigmoid, tanh or relu: not identity, a regression's), the one-hot targets of
    integer class labels in 0..outputs-1, in ``dtype``, on the device ``y`` is on. ``y`` as given where its shape
    is another; a ValueError with the hint to one-hot encode where it has that shape but cannot be class labels,
    and for a ``cost`` of cross-entropy where a target is no probability (``check_probabilities``)."""
    y = _targets(xp, y, shape, axis, outputs, activation, dtype, noun)
    if cost == "cross_entropy" and shape_of("y", y) == (*shape[:axis], outputs, *shape[axis:]):  # else: its shape's
        check_probabilities(xp, y, outputs)
    return y


def _targets(xp, y, shape, axis, outputs, activation, dtype, noun):
    given = shape_of("y", y)
    if given != tuple(shape):
        if len(given) == len(shape) and outputs > 1 and real_array(xp, "y", y).dtype.kind in "iu":
            if given[axis:axis + 1] != (outputs,):  # no targets' shape: labels, as many as samples
                raise ValueError(f"y holds class labels of shape {given}; x's batch needs one per sample, shape "
                                 f"{tuple(shape)}")
            if shape[axis] != 1:  # as many as the outputs: labels, or one sample's targets; x holds more samples
                raise ValueError(f"y of shape {given} is neither class labels for x's batch of {shape[axis]} samples, "
                                 f"shape {tuple(shape)}, nor its targets, shape "
                                 f"{(*shape[:axis], outputs, *shape[axis:])}")
        if not shape and given == (1,) and outputs > 1 and activation in ACTIVATIONS and \
                real_array(xp, "y", y).dtype.kind in "iu":  # x of shape (n,), one sample, its label of shape ()
            raise ValueError("y holds class labels of shape (1,), a batch of one sample's, and x is one sample with "
                             "no batch axis, whose label is an int, shape (): give y of that shape, or x with its "
                             "batch axis")
        return y
    y = real_array(xp, "y", y)
    target = (*shape[:axis], outputs, *shape[axis:])
    if outputs == 1:
        return y.reshape(target)
    if activation not in ACTIVATIONS:
        raise ValueError(f"y must have shape {target} for {noun} of {activation} outputs: class labels of shape "
                         f"{tuple(shape)} are one-hot encoded for outputs of classes (sigmoid, tanh or relu) only; "
                         "pass targets")
    if y.dtype.kind not in "iu":
        raise ValueError(f"y must be integer class labels or targets of shape {target}; got shape {tuple(shape)} of "
                         f"dtype {y.dtype}: for class labels, pass y.astype(int)")
    xp = np if isinstance(y, np.ndarray) else xp
    bad = (y < 0) | (y >= outputs)
    if bad.any():
        flat = int(xp.argmax(bad.reshape(-1)))
        index = tuple(int(i) for i in np.unravel_index(flat, shape))
        at = f" at index {index[0] if len(index) == 1 else index}" if shape else ""
        raise ValueError(f"y holds class label {int(y.reshape(-1)[flat])}{at}; labels must lie in 0..{outputs - 1} "
                         f"({noun}'s {outputs} outputs, one per class): one-hot encode other targets as shape {target}")
    one_hot = (y[..., None] == xp.arange(outputs)).astype(dtype)
    return xp.ascontiguousarray(xp.moveaxis(one_hot, -1, axis))


def check_probabilities(xp, y, outputs):
    """Raise a ValueError where targets ``y`` of a cross-entropy cost (on the host or ``xp``'s device; NaN and Inf
    left to ``check_finite_as``) hold a value outside [0, 1], the probability of each of the ``outputs`` units: the
    cost of such a target has no minimum, and training drives it below 0."""
    y = real_array(xp, "y", y)
    xp = np if isinstance(y, np.ndarray) else xp
    bad = ((y < 0) | (y > 1)) & xp.isfinite(y)
    if bad.any():
        value = y.reshape(-1)[int(xp.argmax(bad.reshape(-1)))].item()
        labels = " (integer class labels need one output unit per class)" if outputs == 1 and value > 1 \
            and float(value).is_integer() else ""
        raise ValueError(f"y holds {value}: the targets of a cross-entropy cost are probabilities in [0, 1]{labels}; "
                         "scale them, or build the network with cost='quadratic'")


def finite(value):
    """``math.isfinite`` of a real number, an int too large for a float being no finite float (not an
    OverflowError)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


SHOWN = 200
"""The most characters of a value that a message quotes (``shown``)."""


def widths(sizes):
    """Layer widths as a message, a header or a repr writes them: the list, or where it holds more than ``LONG``
    widths, its runs of one width as Python builds them: ``[4] + [1] * 2000 + [2]``; what is no list of integers (a
    damaged file's) as ``shown`` quotes it."""
    if not isinstance(sizes, (list, tuple)) or not all(isinstance(width, numbers.Integral) and
                                                       not isinstance(width, bool) for width in sizes):
        return shown(sizes)
    sizes = [int(width) for width in sizes]
    if len(sizes) <= LONG:
        return str(sizes)
    parts, loose = [], []
    for width, run in ((width, len(list(run))) for width, run in itertools.groupby(sizes)):
        if run < 3:
            loose += [width] * run
            continue
        parts += [str(loose)] * bool(loose) + [f"[{width}] * {run}"]
        loose = []
    return " + ".join(parts + [str(loose)] * bool(loose))


def shown(value):
    """``repr(value)`` for a one-line message: on one line, cut to ``SHOWN`` characters; an integer of more than 40
    digits by its sign and its count of digits."""
    digits = len(str(abs(value))) if isinstance(value, numbers.Integral) else 0
    if digits > 40:
        return f"{'a negative' if value < 0 else 'an'} integer of {digits} digits"
    text = re.sub(r"\s*\n\s*", " ", repr(value))
    return text if len(text) <= SHOWN else f"{text[:SHOWN - 3]}..."


def check_real(name, value, what=None, least=0, strict=False, most=math.inf):
    """``value`` as a float: a real number (not a bool), finite, >= ``least`` (> ``least`` where ``strict``) and <=
    ``most``; else a TypeError (not a real number) or a ValueError, each ``{name} must be {what}; got ...``
    (``what`` by default: ``a finite number >= {least}``, or ``>``)."""
    what = what or f"a finite number {'>' if strict else '>='} {least:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}; got {shown(value)} ({type(value).__name__})")
    if not (finite(value) and (value > least if strict else value >= least) and value <= most):
        raise ValueError(f"{name} must be {what}; got {shown(value)}")
    return float(value)


def check_eta(eta):
    """``eta``, the learning rate, as a float: a finite real number >= 0 (``check_real``)."""
    return check_real("eta (the learning rate)", eta)


def check_memory_limit(memory_limit):
    """``memory_limit`` as an int of bytes >= 1: what a solver's buffers may take before it refuses."""
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, numbers.Integral):
        raise TypeError(f"memory_limit must be an integer number of bytes >= 1; got {shown(memory_limit)}")
    if memory_limit < 1:
        raise ValueError(f"memory_limit must be an integer number of bytes >= 1; got {shown(memory_limit)}")
    return int(memory_limit)


BLAS_THREADS = 1
"""The BLAS threads of a NumPy backend that a network makes for itself, as ``leapfrog-train``'s default: one,
each stream's products on one core, the forward pass's too."""


def check_backend(backend):
    """``backend`` as a network takes it: a name (``"auto"``, ``"numpy"``, ``"cupy"``) as the backend it stands for
    here, ``"numpy"`` or ``"cupy"``, or a backend object as it is; a TypeError or ValueError for anything else."""
    if isinstance(backend, str):
        return resolve(backend)
    if hasattr(backend, "launch") and hasattr(backend, "xp"):
        return backend
    raise TypeError(f"backend must be 'auto', 'numpy', 'cupy' or a backend object; got {shown(backend)}")


def open_backend(backend):
    """``(backend, owned)``: a backend made by name (``check_backend``; NumPy's with ``BLAS_THREADS``), which the
    network then owns and closes, or a backend object given, which it does not."""
    backend = check_backend(backend)
    if isinstance(backend, str):
        return get_backend(backend, **({"blas_threads": BLAS_THREADS} if backend == "numpy" else {})), True
    return backend, False
