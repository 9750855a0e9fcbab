"""A plain NumPy reference in the book's notation: no streams, no buffers, no tricks.

Follows Nielsen's ``network.py`` with minibatches as columns: ``x`` is (n_1, B), ``y`` is (n_L, B),
``weights[i]`` is w^{i+2} with shape (n_l, n_{l-1}), ``biases[i]`` is b^{i+2} with shape (n_l,).
Gradients are summed over the batch. Equation numbers are those of docs/design.md §1.
"""

import numpy as np

ACTIVATIONS = ("sigmoid", "tanh", "relu", "identity")
COSTS = ("quadratic", "cross_entropy")


def sigma(name, z):
    _check("activation", name, ACTIVATIONS)
    if name == "sigmoid":
        with np.errstate(over="ignore"):  # exp(-z) = inf gives sigma = 0, as it should
            return 1.0 / (1.0 + np.exp(-z))
    if name == "tanh":
        return np.tanh(z)
    if name == "relu":
        return np.maximum(z, 0.0)
    return z.copy()


def sigma_prime(name, z):
    _check("activation", name, ACTIVATIONS)
    if name == "sigmoid":
        s = sigma("sigmoid", z)
        return s * (1.0 - s)
    if name == "tanh":
        return 1.0 - np.tanh(z) ** 2
    if name == "relu":
        return (z > 0).astype(z.dtype)
    return np.ones_like(z)


def _check(what, name, names):
    """A ValueError where ``name`` is not one of ``names``: a misspelt activation is no identity."""
    if name not in names:
        raise ValueError(f"unknown {what} {name!r}: give one of {', '.join(names)}")


def total_cost(cost, a, y):
    """C of outputs ``a`` against ``y``, summed: quadratic 0.5 ||a - y||^2, or cross-entropy -y ln a - (1-y) ln(1-a)."""
    _check("cost", cost, COSTS)
    if cost == "quadratic":
        return 0.5 * float(np.sum((a - y) ** 2))
    return float(np.sum(-y * np.log(a) - (1.0 - y) * np.log(1.0 - a)))


def output_error(cost, name, a, y, z):
    """(4): delta^L = dC/da^L * sigma'(z^L). Quadratic: (a - y) * sigma'(z). Cross-entropy: dC/da =
    (a - y) / (a (1 - a)), so a - y with a sigmoid output (whose sigma' is a (1 - a))."""
    _check("cost", cost, COSTS)
    if cost == "quadratic":
        return (a - y) * sigma_prime(name, z)
    if name == "sigmoid":
        return a - y
    return (a - y) / (a * (1.0 - a)) * sigma_prime(name, z)


def activations_of(weights, activation, output_activation):
    """The activation of each layer 2..L: the hidden one, then the output one."""
    return [activation] * (len(weights) - 1) + [output_activation]


def feedforward(weights, biases, x, activation="sigmoid", output_activation="sigmoid"):
    """Equations (1)-(3): return a^L."""
    a = x
    for w, b, name in zip(weights, biases, activations_of(weights, activation, output_activation)):
        a = sigma(name, w @ a + b[:, None])
    return a


def cost(weights, biases, x, y, activation="sigmoid", cost="quadratic", output_activation="sigmoid"):
    """C summed over the batch: quadratic 0.5 ||a - y||^2, or cross-entropy -y ln a - (1-y) ln(1-a)."""
    return total_cost(cost, feedforward(weights, biases, x, activation, output_activation), y)


def backprop(weights, biases, x, y, activation="sigmoid", cost="quadratic", output_activation="sigmoid"):
    """Equations (1)-(7): return ``(nabla_b, nabla_w)``, lists in the order of ``biases``/``weights``."""
    names = activations_of(weights, activation, output_activation)
    a, zs, activations = x, [], [x]
    for w, b, name in zip(weights, biases, names):
        z = w @ a + b[:, None]  # (2)
        a = sigma(name, z)  # (3)
        zs.append(z)
        activations.append(a)
    delta = output_error(cost, names[-1], activations[-1], y, zs[-1])  # (4)
    nabla_b = [None] * len(weights)
    nabla_w = [None] * len(weights)
    nabla_b[-1] = delta.sum(axis=1)  # (6)
    nabla_w[-1] = delta @ activations[-2].T  # (7)
    for i in range(2, len(weights) + 1):
        delta = (weights[-i + 1].T @ delta) * sigma_prime(names[-i], zs[-i])  # (5)
        nabla_b[-i] = delta.sum(axis=1)
        nabla_w[-i] = delta @ activations[-i - 1].T
    return nabla_b, nabla_w
