"""A plain float64 reference for the gated recurrent networks (``cells``: the GRU and the LSTM), written from
PyTorch's equations apart from the fast path: loops over t, no streams, no buffers.

Layer l = 2..L-1 of width N holds w (G·N, n_{l-1}), u (G·N, N), b (G·N,) in torch's gate order and, for the
GRU, b_hn (N,); h^0 = c^0 = 0. The output layer L is ``reference``'s, at every step or at the last. The
backward pass walks t = tau..1 with dh^t = (w^{l+1})^T delta^{l+1,t} + J_{t+1}^T dh^{t+1} + ..., by the
chain rule through each gate.

``x`` is (tau, n_1, B); ``y`` is (n_L, B) for ``output="last"``, (tau, n_L, B) for ``"every"``; ``b_hn[i]``
is that of layer i + 2 (None for an LSTM).
"""

import numpy as np

from ..reference import sigma, sigma_prime
from .reference import targets


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _step(cell, w, u, b, b_hn, x, h, c):
    """One step of a cell: ``(h', c', cache)`` from input x (n, B), state h (N, B) and c (the LSTM's)."""
    N = h.shape[0]
    gi, gh = w @ x + b[:, None], u @ h
    if cell == "gru":
        r = _sigmoid(gi[:N] + gh[:N])
        z = _sigmoid(gi[N:2 * N] + gh[N:2 * N])
        hn = gh[2 * N:] + b_hn[:, None]
        n = np.tanh(gi[2 * N:] + r * hn)
        return (1 - z) * n + z * h, None, (r, z, n, hn)
    pre = gi + gh
    i, f, g, o = _sigmoid(pre[:N]), _sigmoid(pre[N:2 * N]), np.tanh(pre[2 * N:3 * N]), _sigmoid(pre[3 * N:])
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new, (i, f, g, o)


def states(cell, weights, recurrent, biases, b_hn, x, output_activation="tanh", output="last"):
    """``(h, c, caches, z_out, a_out)``: dicts by (l, t) of every state, the gates of every step, and the
    output layer's z and a by t."""
    x = np.asarray(x, dtype=np.float64)
    tau, B, L = x.shape[0], x.shape[2], len(weights) + 1
    h, c, caches = {(1, t): x[t - 1] for t in range(1, tau + 1)}, {}, {}
    for l in range(2, L):
        N = recurrent[l - 2].shape[1]
        h[l, 0], c[l, 0] = np.zeros((N, B)), np.zeros((N, B))
        for t in range(1, tau + 1):
            h[l, t], c[l, t], caches[l, t] = _step(cell, weights[l - 2], recurrent[l - 2], biases[l - 2],
                                                  None if b_hn is None else b_hn[l - 2], h[l - 1, t], h[l, t - 1],
                                                  c[l, t - 1])
    times = range(1, tau + 1) if output == "every" else [tau]
    z_out = {t: weights[-1] @ h[L - 1, t] + biases[-1][:, None] for t in times}
    return h, c, caches, z_out, {t: sigma(output_activation, z) for t, z in z_out.items()}


def feedforward(cell, weights, recurrent, biases, b_hn, x, output_activation="tanh", output="last"):
    """a^{L,tau} (n_L, B) for ``output="last"``, every a^{L,t} as (tau, n_L, B) for ``"every"``."""
    *_, a_out = states(cell, weights, recurrent, biases, b_hn, x, output_activation, output)
    return a_out[len(x)] if output == "last" else np.stack([a_out[t] for t in sorted(a_out)])


def cost(cell, weights, recurrent, biases, b_hn, x, y, output_activation="tanh", output="last"):
    """The quadratic cost summed over the batch and the time steps with an output."""
    *_, a_out = states(cell, weights, recurrent, biases, b_hn, x, output_activation, output)
    return sum(0.5 * float(np.sum((a_out[t] - target) ** 2)) for t, target in targets(y, len(x), output).items())


def backprop(cell, weights, recurrent, biases, b_hn, x, y, output_activation="tanh", output="last"):
    """Gradients of the quadratic cost: ``{l: {"w", "u", "b"}}`` (and ``"b_hn"`` in a GRU's recurrent layers;
    no ``"u"`` at the output), float64."""
    weights = [np.asarray(w, dtype=np.float64) for w in weights]
    recurrent = [np.asarray(u, dtype=np.float64) for u in recurrent]
    biases = [np.asarray(b, dtype=np.float64) for b in biases]
    b_hn = None if b_hn is None else [np.asarray(b, dtype=np.float64) for b in b_hn]
    tau, L = len(x), len(weights) + 1
    h, c, caches, z_out, a_out = states(cell, weights, recurrent, biases, b_hn, x, output_activation, output)
    grads = {L: {"w": 0.0, "b": 0.0}}
    from_above = {}
    for t, target in targets(y, tau, output).items():
        delta = (a_out[t] - target) * sigma_prime(output_activation, z_out[t])
        grads[L]["w"] = grads[L]["w"] + delta @ h[L - 1, t].T
        grads[L]["b"] = grads[L]["b"] + delta.sum(axis=1)
        from_above[t] = weights[-1].T @ delta
    for l in range(L - 1, 1, -1):
        w, u, N = weights[l - 2], recurrent[l - 2], recurrent[l - 2].shape[1]
        g = {"w": np.zeros_like(w), "u": np.zeros_like(u), "b": np.zeros(w.shape[0])}
        if cell == "gru":
            g["b_hn"] = np.zeros(N)
        dh_next, dc_next, below = np.zeros_like(h[l, 0]), np.zeros_like(h[l, 0]), {}
        for t in range(tau, 0, -1):
            dh = from_above.get(t, 0.0) + dh_next
            if cell == "gru":
                r, z, n, hn = caches[l, t]
                d_n = dh * (1 - z) * (1 - n ** 2)
                d_z = dh * (h[l, t - 1] - n) * z * (1 - z)
                d_hn = d_n * r
                d_r = d_n * hn * r * (1 - r)
                d_in, d_h = np.concatenate([d_r, d_z, d_n]), np.concatenate([d_r, d_z, d_hn])
                g["b_hn"] += d_hn.sum(axis=1)
                dh_next = dh * z + u.T @ d_h
            else:
                i, f, gg, o = caches[l, t]
                dc = dc_next + dh * o * (1 - np.tanh(c[l, t]) ** 2)
                d_in = d_h = np.concatenate([dc * gg * i * (1 - i), dc * c[l, t - 1] * f * (1 - f),
                                             dc * i * (1 - gg ** 2), dh * np.tanh(c[l, t]) * o * (1 - o)])
                dc_next = dc * f
                dh_next = u.T @ d_h
            g["w"] += d_in @ h[l - 1, t].T
            g["u"] += d_h @ h[l, t - 1].T
            g["b"] += d_in.sum(axis=1)
            below[t] = w.T @ d_in
        grads[l], from_above = g, below
    return {l: grads[l] for l in sorted(grads)}
