"""A layer of one's own checked against the derivatives of its own forward pass (``check_layer``).

A ``DagNet`` trusts what a ``Layer`` says of itself: its ``error`` and ``vjp_inputs`` (what ``Sequential``,
``Leapfrog`` and ``LevelSets`` read), its ``vjp_params``, its ``jacobian`` blocks (what ``DagJacobi``,
``DagDoubling`` and ``ForwardNewton`` read). One that is wrong trains on wrong gradients, and the schedules
disagree. ``check_layer`` compares each with central differences of ``forward``, in float64 on the host.
"""

import numbers
import warnings
from collections.abc import Mapping, Set

import numpy as np

from ..backends.host import NumpyBackend
from ..core.checks import check_count, check_real, shown
from .layers import Layer, drawn_params, input_products, layer_output, output_width, param_products, undefined

STEP = 1e-6
"""The central differences' step, times 1 + |x|: truncation O(h^2), about 1e-10; rounding O(eps |a| / h), about 1e-10
for outputs a of order 1, and allowed for (``ROUNDING``) where they are larger."""

ROUNDING = 4 * np.finfo(np.float64).eps
"""What each output of ``forward`` may be off by, relative to it (a few roundings): a difference quotient of outputs
a may be off by ROUNDING (|a(x + h)| + |a(x - h)|) / 2h, about 4 eps |a| / h, which a check allows for beyond
``rtol`` (and says so where it passes ``rtol``)."""

def check_layer(layer, sizes, batch=3, seed=0, rtol=1e-6):
    """Check ``layer`` on random inputs of widths ``sizes`` (one per input, at least one; widths its ``size``
    refuses, its ValueError) and ``batch`` samples, with the parameters its ``init`` draws (by ``seed``), in
    float64: its ``vjp_inputs`` (of the ``error`` of a random adjoint), its ``vjp_params`` and each input's
    ``jacobian`` block against central differences of its ``forward`` (the outputs differenced before they are
    contracted with the adjoint, their rounding allowed for: ``ROUNDING``). A ValueError names a method that changes
    what it is given, a forward that gives another output for the same arguments or mixes the samples beyond
    roundings, or the first that differs by more than ``rtol``, relative to 1 + the largest difference quotient; a
    TypeError a layer that defines no forward. Returns None where all agree."""
    if not isinstance(layer, Layer):
        raise TypeError(f"check_layer checks a leapfrog_gpu.dag.Layer; got {type(layer).__name__}")
    try:
        widths = None if isinstance(sizes, (Set, Mapping)) else list(sizes)  # an iterator's, read once; no set's order
    except TypeError:  # not iterable: a number, None, a 0-d array
        widths = None
    if widths is None or not all(isinstance(n, numbers.Integral) for n in widths):
        raise TypeError(f"sizes must be a list of input widths, such as [4] or [4, 3]; got {shown(sizes)}")
    sizes = [check_count("an input width", n) for n in widths]
    if not sizes:
        raise ValueError("sizes must list the width of every input, at least one (a layer reads one input or more), "
                         "such as [4] or [4, 3]; got []")
    batch, rtol = check_count("batch", batch), check_real("rtol", rtol, "a number > 0", strict=True)
    if type(layer).forward is Layer.forward:  # as a DagNet refuses it
        raise undefined(layer, "forward(backend, params, inputs)")
    n = output_width(layer, sizes, layer.size(sizes))  # its ValueError, before init reads widths unfit
    rng = np.random.default_rng(seed)
    params = {name: np.array(value, dtype=np.float64) for name, value in drawn_params(layer, rng, sizes).items()}
    inputs = [rng.uniform(-1, 1, (n_i, batch)) for n_i in sizes]
    abar = rng.standard_normal((n, batch))
    with NumpyBackend(mode="serial") as backend:
        def output():
            return np.asarray(layer_output(layer, backend, params, inputs)[0], dtype=np.float64)

        a, saved = _untouched(layer, "forward", lambda: layer_output(layer, backend, params, inputs), inputs=inputs,
                              params=params)
        if np.shape(a) != (n, batch):
            raise ValueError(f"{layer!r}: forward gave an output of shape {np.shape(a)}; size() says ({n}, {batch})")
        dtype = getattr(a, "dtype", None)
        if dtype != np.float64:
            raise ValueError(f"{layer!r}: forward gave an output of dtype {dtype} for inputs of float64: make it "
                             "compute in its inputs' dtype (a DagNet refuses an output of another dtype than its own)")
        if not np.array_equal(output(), a, equal_nan=True):
            raise ValueError(f"{layer!r}: forward gave another output for the same inputs and parameters: a layer's "
                             "forward is a function of them alone")
        given = {"params": params, "saved": saved}
        g = _untouched(layer, "error", lambda: layer.error(backend, params, saved, abar), abar=abar, **given)
        given.update(inputs=inputs, g=g)
        products = _untouched(layer, "vjp_params", lambda: param_products(layer, backend, params, inputs, saved, g),
                              **given)
        for i, x in enumerate(inputs):
            _alone(layer, i, output, x)
        to_inputs = _untouched(layer, "vjp_inputs", lambda: input_products(layer, backend, params, inputs, saved, g),
                               **given)
        blocks = [_untouched(layer, "jacobian", lambda i=i: layer.jacobian(backend, params, inputs, saved, i).dense(),
                             **given) for i in range(len(inputs))]
        checks = [(f"vjp_inputs(...)[{i}]", to_inputs[i], *_gradient(output, abar, x)) for i, x in enumerate(inputs)]
        checks += [(f"vjp_params(...)[{name!r}]", products[name], *_gradient(output, abar, p))
                   for name, p in params.items()]
        checks += [(f"jacobian(..., i={i}).dense()", blocks[i], *_jacobian(output, x)) for i, x in enumerate(inputs)]
    _compare(layer, checks, rtol)


def _untouched(layer, method, call, **given):
    """``call()``, which runs ``method`` of ``layer``; a ValueError where it wrote into one of the arrays it was
    ``given`` (by name: an array, or a list, tuple or dict of them; anything else is not compared). A schedule may
    hand one array to several layers (``Add`` does) and read it after, in an order of its own: a layer that writes
    into one trains on gradients that differ from schedule to schedule."""
    before = {name: _copied(value) for name, value in given.items()}
    result = call()
    for name, value in given.items():
        if not _same(before[name], value):
            raise ValueError(f"{layer!r}: {method} changed {name}, which it is given: a layer must not write into "
                             "or change its inputs, parameters, what forward saved, abar or g; make new ones")
    return result


def _copied(value):
    """``value`` with every NumPy array in it copied (in lists, tuples and dicts)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return [_copied(item) for item in value]
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    return value


def _same(before, now):
    """Whether the arrays in ``now`` hold what ``_copied`` kept of them in ``before``, NaN as NaN."""
    if isinstance(now, np.ndarray):
        return isinstance(before, np.ndarray) and before.shape == now.shape and np.array_equal(
            before, now, equal_nan=now.dtype.kind in "fc")
    if isinstance(now, (list, tuple)):
        return len(before) == len(now) and all(_same(b, v) for b, v in zip(before, now))
    if isinstance(now, dict):
        return before.keys() == now.keys() and all(_same(before[key], now[key]) for key in now)
    return True


def _compare(layer, checks, rtol):
    """Raise a ValueError for the first of ``checks``, ``(what, given, want, rounding)``, whose ``given`` is not of the
    shape of ``want``, or differs from it by more than ``rtol`` (1 + max |want|) beyond ``rounding``; warn, once, where
    that rounding passes ``rtol`` (1 + max |want|): a difference that small is then not seen."""
    warned = False
    for what, given, want, rounding in checks:
        if given is None or np.shape(given) != want.shape:
            raise ValueError(f"{layer!r}: {what} has shape {np.shape(given)}; the derivatives' is {want.shape}")
        scale = 1 + np.max(np.abs(want), initial=0)
        if np.max(rounding, initial=0) > rtol * scale and not warned:
            warned = True
            warnings.warn(f"check_layer({layer!r}): the central differences of {what} round by up to "
                          f"{np.max(rounding) / scale:.2g} relative to 1 + the largest, above rtol={rtol:g} (outputs "
                          f"large against the step h = {STEP:g} (1 + |x|)): a difference below that is not seen",
                          RuntimeWarning, stacklevel=3)
        beyond = np.maximum(np.abs(np.asarray(given) - want) - rounding, 0)  # NaN stays NaN
        error = float(np.max(beyond, initial=0) / scale)
        if not error <= rtol:
            raise ValueError(f"{layer!r}: {what} differs from the central differences of its forward by {error:.3g} "
                             f"beyond their rounding, relative to 1 + the largest, above rtol={rtol:g}")


def _moved(output, x, index):
    """``(up, down, step)``: ``output()`` with ``x[index]`` moved up and down by h = ``STEP`` (1 + |x[index]|), in place
    then restored, and the step between the two, (x + h) - (x - h) as rounded."""
    keep = x[index].copy()
    h = STEP * (1 + np.abs(keep))
    x[index] = keep + h
    up, step = output(), x[index].copy()
    x[index] = keep - h
    down, step = output(), step - x[index]
    x[index] = keep
    return up, down, step


def _rounding(up, down):
    """What a difference of the outputs ``up`` and ``down`` may be off by (``ROUNDING``); 0 where they are equal: an
    output that does not move contributes nothing (one too large to move at the step is not told from a constant)."""
    return np.where(_differ(up, down), ROUNDING * (np.abs(up) + np.abs(down)), 0)


def _differ(up, down):
    """Where ``up`` and ``down`` differ, NaN and NaN alike (a forward that gives NaN moves nothing by it)."""
    return (up != down) & ~(np.isnan(up) & np.isnan(down))


def _gradient(output, abar, x):
    """``(grad, rounding)``: dC/dx of C = sum(abar a), a = ``output()``, by central differences in every element of
    ``x``, each sum(abar (a(x + h) - a(x - h))) / 2h, and what each may be off by, its outputs' rounding."""
    grad, rounding = np.empty_like(x), np.empty_like(x)
    for index in np.ndindex(x.shape):
        up, down, step = _moved(output, x, index)
        grad[index] = (abar * (up - down)).sum() / step
        rounding[index] = (np.abs(abar) * _rounding(up, down)).sum() / step
    return grad, rounding


def _jacobian(output, x):
    """``(J, rounding)``: (B, n, n_i), d a / d x of every sample, ``output()`` a (n, B) and x (n_i, B), by central
    differences in each row of ``x`` (every sample's at once: a layer maps each sample alone, ``_alone``), and what
    each may be off by."""
    columns, rounding = [], []
    for j in range(x.shape[0]):
        up, down, step = _moved(output, x, j)
        columns.append(((up - down) / step).T)
        rounding.append((_rounding(up, down) / step).T)
    return np.stack(columns, axis=2), np.stack(rounding, axis=2)


def _alone(layer, i, output, x):
    """Raise a ValueError where moving one sample of input ``i``, ``x``, moves the output of another: a DagNet's
    Jacobian blocks, and its samples shared across ranks, are each sample's alone."""
    for k in range(x.shape[1]):
        up, down, _ = _moved(output, x, (slice(None), k))
        moved = _differ(up, down) & ~(np.abs(up - down) <= ROUNDING * (np.abs(up) + np.abs(down)))  # beyond rounding:
        others = np.flatnonzero(moved.any(axis=0) & (np.arange(x.shape[1]) != k))  # a max over the batch moves it
        if others.size:
            raise ValueError(f"{layer!r}: forward mixes the samples: moving sample {k} of input {i} moved the output "
                             f"of sample {others[0]}; a layer maps each sample (column) alone")
