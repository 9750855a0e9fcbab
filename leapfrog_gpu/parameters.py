"""Parameters given to a network: the checks ``MLP.set_parameters`` runs before it copies anything in.

They are a batch's checks (real numbers, finite, an array the backend can read), with shapes per layer;
every error names the layer as the book numbers it (2..L carry weights).
"""

import numpy as np


def check(weights, biases, sizes, dtype, xp):
    """``(weights, biases)`` as lists of w^l (n_l, n_{l-1}) and b^l (n_l,) for l = 2..L in ``dtype``, host
    arrays on the host and ``xp``'s device arrays on the device; or raise for the first one that is wrong.

    Each b^l may also be (n_l, 1), Nielsen's shape. NaN and Inf are looked for after the conversion to
    ``dtype``, so that a float64 value beyond float32's range is refused by a float32 network too.
    """
    layers = range(2, len(sizes) + 1)
    shapes = {"weights": [(sizes[l - 1], sizes[l - 2]) for l in layers], "biases": [(sizes[l - 1],) for l in layers]}
    checked = []
    for name, given in (("weights", weights), ("biases", biases)):
        if isinstance(given, np.ndarray) or not hasattr(given, "__len__"):
            raise TypeError(f"{name} must be a list of {len(layers)} arrays (layers 2..{len(sizes)}); "
                            f"got {type(given).__name__}")
        if len(given) != len(layers):
            raise ValueError(f"{name} must list {len(layers)} arrays (layers 2..{len(sizes)}); got {len(given)}")
        checked.append([_array(f"{name} of layer {l}", value, shape, dtype, xp)
                        for l, value, shape in zip(layers, given, shapes[name])])
    return checked


def read_only(name):
    """The error for an assignment to the network's ``name`` (``weights`` or ``biases``)."""
    return AttributeError(f"{name} cannot be assigned: each read of it is a copy; to load parameters call "
                          "net.set_parameters(weights, biases)")


def _array(what, value, shape, dtype, xp):
    """``value`` as an array of ``shape`` in ``dtype``: real, finite, on the host or on ``xp``'s device."""
    if xp is np and type(value).__module__.startswith("cupy"):
        raise TypeError(f"{what} is a CuPy array but the network runs on the numpy backend; pass it .get()")
    module = xp if xp is not np and isinstance(value, xp.ndarray) else np
    value = module.asarray(value)
    if value.dtype.kind not in "fiu":
        raise TypeError(f"{what} must hold real numbers (a float or integer dtype); got dtype {value.dtype}")
    if len(shape) == 1 and tuple(value.shape) == (*shape, 1):
        value = value.reshape(shape)  # Nielsen's column of biases
    if tuple(value.shape) != shape:
        nielsen = f" or ({shape[0]}, 1)" if len(shape) == 1 else ""
        raise ValueError(f"{what} must have shape {shape}{nielsen}; got {tuple(value.shape)}")
    with np.errstate(over="ignore"):  # a value beyond dtype's range becomes Inf, refused below
        value = module.asarray(value, dtype=dtype)
    if not bool(module.isfinite(value).all()):
        raise ValueError(f"{what} contains NaN or Inf (as {dtype}); every weight and bias must be finite")
    return value
