"""A layer of one's own checked against the derivatives of its own forward pass (``check_layer``).

A ``DagNet`` trusts what a ``Layer`` says of itself: its ``error`` and ``vjp_inputs`` (what ``Sequential``,
``Leapfrog`` and ``LevelSets`` read), its ``vjp_params``, its ``jacobian`` blocks (what ``DagJacobi``,
``DagDoubling`` and ``ForwardNewton`` read). One that is wrong trains on wrong gradients, and the schedules
disagree. ``check_layer`` compares each with central differences of ``forward``, in float64 on the host.
"""

import numbers

import numpy as np

from ..backends.host import NumpyBackend
from ..core.checks import check_count, check_real, shown
from .layers import Layer, drawn_params, input_products, layer_output, output_width, param_products

STEP = 1e-6
"""The central differences' step, times 1 + |x|: truncation O(h^2), rounding O(eps / h), about 1e-10 each."""


def check_layer(layer, sizes, batch=3, seed=0, rtol=1e-6):
    """Check ``layer`` on random inputs of widths ``sizes`` (one per input, at least one; widths its ``size``
    refuses, its ValueError) and ``batch`` samples, with the parameters its ``init`` draws (by ``seed``), in
    float64: its ``vjp_inputs`` (of the ``error`` of a random adjoint), its ``vjp_params`` and each input's
    ``jacobian`` block against central differences of its ``forward``. A ValueError names the first that differs
    by more than ``rtol``, relative to 1 + the largest difference quotient; returns None where all agree."""
    if not isinstance(layer, Layer):
        raise TypeError(f"check_layer checks a leapfrog_gpu.dag.Layer; got {type(layer).__name__}")
    if isinstance(sizes, numbers.Number) or not all(isinstance(n, numbers.Integral) for n in sizes):
        raise TypeError(f"sizes must be a list of input widths, such as [4] or [4, 3]; got {shown(sizes)}")
    sizes = [check_count("an input width", n) for n in sizes]
    if not sizes:
        raise ValueError("sizes must list the width of every input, at least one (a layer reads one input or more), "
                         "such as [4] or [4, 3]; got []")
    batch, rtol = check_count("batch", batch), check_real("rtol", rtol, "a number > 0", strict=True)
    n = output_width(layer, sizes, layer.size(sizes))  # its ValueError, before init reads widths unfit
    rng = np.random.default_rng(seed)
    params = {name: np.array(value, dtype=np.float64) for name, value in drawn_params(layer, rng, sizes).items()}
    inputs = [rng.uniform(-1, 1, (n_i, batch)) for n_i in sizes]
    abar = rng.standard_normal((n, batch))
    with NumpyBackend(mode="serial") as backend:
        def output():
            return np.asarray(layer_output(layer, backend, params, inputs)[0], dtype=np.float64)

        def cost():  # the cost whose adjoint is abar
            return (abar * output()).sum()

        a, saved = layer_output(layer, backend, params, inputs)
        if np.shape(a) != (n, batch):
            raise ValueError(f"{layer!r}: forward gave an output of shape {np.shape(a)}; size() says ({n}, {batch})")
        dtype = getattr(a, "dtype", None)
        if dtype != np.float64:
            raise ValueError(f"{layer!r}: forward gave an output of dtype {dtype} for inputs of float64: make it "
                             "compute in its inputs' dtype (a DagNet refuses an output of another dtype than its own)")
        g = layer.error(backend, params, saved, abar)
        products = param_products(layer, backend, params, inputs, saved, g)
        checks = [(f"vjp_inputs(...)[{i}]", given, _gradient(cost, x))
                  for i, (given, x) in enumerate(zip(input_products(layer, backend, params, inputs, saved, g), inputs))]
        checks += [(f"vjp_params(...)[{name!r}]", products[name], _gradient(cost, p))
                   for name, p in params.items()]
        checks += [(f"jacobian(..., i={i}).dense()", layer.jacobian(backend, params, inputs, saved, i).dense(),
                    _jacobian(output, x)) for i, x in enumerate(inputs)]
    for what, given, want in checks:
        if given is None or np.shape(given) != want.shape:
            raise ValueError(f"{layer!r}: {what} has shape {np.shape(given)}; the derivatives' is {want.shape}")
        error = float(np.max(np.abs(np.asarray(given) - want), initial=0) / (1 + np.max(np.abs(want), initial=0)))
        if not error <= rtol:
            raise ValueError(f"{layer!r}: {what} differs from the central differences of its forward by {error:.3g}, "
                             f"relative to 1 + the largest, above rtol={rtol:g}")


def _gradient(f, x):
    """d f / d x, f() a number, by central differences in every element of ``x`` (moved in place, then restored)."""
    grad = np.empty_like(x)
    for index in np.ndindex(x.shape):
        keep, h = x[index], STEP * (1 + abs(x[index]))
        x[index] = keep + h
        up = f()
        x[index] = keep - h
        grad[index] = (up - f()) / (2 * h)
        x[index] = keep
    return grad


def _jacobian(output, x):
    """(B, n, n_i): d a / d x of every sample, ``output()`` a (n, B) and x (n_i, B), by central differences in each
    row of ``x`` (every sample's at once: a layer maps each sample alone)."""
    columns = []
    for j in range(x.shape[0]):
        keep = x[j].copy()
        h = STEP * (1 + np.abs(keep))
        x[j] = keep + h
        up = output()
        x[j] = keep - h
        columns.append(((up - output()) / (2 * h)).T)
        x[j] = keep
    return np.stack(columns, axis=2)
