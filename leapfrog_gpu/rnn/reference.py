"""A plain float64 reference for the recurrent network: backpropagation through time in the book's
notation, no streams, no buffers, no tricks, written apart from the fast path (``rnn.plan``).

Layer 1 is the input, layers 2..L-1 are recurrent, layer L is the output. For t = 1..tau:

    z^{l,t} = w^l a^{l-1,t} + u^l a^{l,t-1} + b^l,   a^{l,t} = sigma(z^{l,t}),   a^{l,0} = 0,   a^{1,t} = x^t
    z^{L,t} = w^L a^{L-1,t} + b^L                    (at every t, or at t = tau only)

Backward: delta^{L,t} is the output error (4) where there is an output, and for l = L-1..2, t = tau..1,

    delta^{l,t} = sigma'(z^{l,t}) * ((w^{l+1})^T delta^{l+1,t} + (u^l)^T delta^{l,t+1})

with delta^{l,tau+1} = 0 (and delta^{L,t} = 0 where there is no output), then
nabla_w^l = sum_t delta^{l,t} (a^{l-1,t})^T, nabla_u^l = sum_t delta^{l,t} (a^{l,t-1})^T,
nabla_b^l = sum_t delta^{l,t}, each summed over the batch too.

``x`` is (tau, n_1, B); ``y`` is (n_L, B) for ``output="last"``, (tau, n_L, B) for ``"every"``.
``weights[i]``, ``biases[i]`` are w^{i+2}, b^{i+2} (l = 2..L); ``recurrent[i]`` is u^{i+2} (l = 2..L-1).
"""

import numpy as np

from ..reference import output_error, sigma, sigma_prime, total_cost


def states(weights, recurrent, biases, x, activation, output_activation, output):
    """Every z^{l,t} and a^{l,t}: dicts keyed by (l, t), a^{1,t} = x^t, a^{l,0} = 0."""
    x = np.asarray(x, dtype=np.float64)
    tau, B = x.shape[0], x.shape[2]
    L = len(weights) + 1
    z, a = {}, {}
    for t in range(1, tau + 1):
        a[1, t] = x[t - 1]
    for l in range(2, L):
        a[l, 0] = np.zeros((weights[l - 2].shape[0], B))
        for t in range(1, tau + 1):
            z[l, t] = weights[l - 2] @ a[l - 1, t] + recurrent[l - 2] @ a[l, t - 1] + biases[l - 2][:, None]
            a[l, t] = sigma(activation, z[l, t])
    for t in _output_times(tau, output):
        z[L, t] = weights[-1] @ a[L - 1, t] + biases[-1][:, None]
        a[L, t] = sigma(output_activation, z[L, t])
    return z, a


def _output_times(tau, output):
    return range(1, tau + 1) if output == "every" else [tau]


def targets(y, tau, output):
    """y^t by time step t, for the time steps that have an output."""
    y = np.asarray(y, dtype=np.float64)
    return {t: (y[t - 1] if output == "every" else y) for t in _output_times(tau, output)}


def feedforward(weights, recurrent, biases, x, activation="tanh", output_activation="tanh", output="last"):
    """a^{L,tau} (n_L, B) for ``output="last"``, every a^{L,t} stacked as (tau, n_L, B) for ``"every"``."""
    tau = len(x)
    _, a = states(weights, recurrent, biases, x, activation, output_activation, output)
    L = len(weights) + 1
    if output == "last":
        return a[L, tau]
    return np.stack([a[L, t] for t in range(1, tau + 1)])


def cost(weights, recurrent, biases, x, y, activation="tanh", cost="quadratic", output_activation="tanh",
         output="last"):
    """C summed over the batch and the time steps with an output (quadratic or cross-entropy, as the MLP's)."""
    tau, L = len(x), len(weights) + 1
    _, a = states(weights, recurrent, biases, x, activation, output_activation, output)
    total = 0.0
    for t, target in targets(y, tau, output).items():
        total += total_cost(cost, a[L, t], target)
    return total


def backprop(weights, recurrent, biases, x, y, activation="tanh", cost="quadratic", output_activation="tanh",
             output="last"):
    """BPTT: return ``(nabla_b, nabla_w, nabla_u)`` in float64, in the order of ``biases``, ``weights``,
    ``recurrent``."""
    weights = [np.asarray(w, dtype=np.float64) for w in weights]
    recurrent = [np.asarray(u, dtype=np.float64) for u in recurrent]
    biases = [np.asarray(b, dtype=np.float64) for b in biases]
    tau, L = len(x), len(weights) + 1
    z, a = states(weights, recurrent, biases, x, activation, output_activation, output)
    delta = {}
    for t, target in targets(y, tau, output).items():
        delta[L, t] = output_error(cost, output_activation, a[L, t], target, z[L, t])  # (4)
    for l in range(L - 1, 1, -1):
        after = np.zeros_like(a[l, 0])  # delta^{l,tau+1} = 0
        for t in range(tau, 0, -1):
            from_above = weights[l - 1].T @ delta[l + 1, t] if (l + 1, t) in delta else 0.0
            delta[l, t] = sigma_prime(activation, z[l, t]) * (from_above + recurrent[l - 2].T @ after)
            after = delta[l, t]
    nabla_b = [sum(delta[l, t].sum(axis=1) for t in range(1, tau + 1) if (l, t) in delta) for l in range(2, L + 1)]
    nabla_w = [sum(delta[l, t] @ a[l - 1, t].T for t in range(1, tau + 1) if (l, t) in delta)
               for l in range(2, L + 1)]
    nabla_u = [sum(delta[l, t] @ a[l, t - 1].T for t in range(1, tau + 1)) for l in range(2, L)]
    return nabla_b, nabla_w, nabla_u
