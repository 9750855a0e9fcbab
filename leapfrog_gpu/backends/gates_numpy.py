"""NumPy twins of the gated cells' steps of kernels/gates.cu, on whole (rows, tau, B) sequences and a step t:
``ops_numpy`` holds them among the NumPy backend's ops. Unlike the other ops they allocate their temporaries:
they are the kernels' twins for the tests, and the host backend runs the cells' own ufuncs into preallocated
buffers (leapfrog_gpu/rnn/cells.py).
"""

import numpy as np


def _sigmoid(x):
    """``1 / (1 + exp(-x))``, an overflowing ``exp`` giving 0."""
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _before(sequence, t):
    """Step t - 1 of the (n, tau, B) ``sequence``, zero before the first step."""
    return sequence[:, t - 1] if t else np.zeros_like(sequence[:, 0])


def gru_forward(z, gates, hn, h, uh, b_hn, t):
    """The GRU's step t (kernels/gates.cu): r = sig(z_r + uh_r), u = sig(z_z + uh_z), hn = uh_n + b_hn,
    n = tanh(z_n + r hn), h^t = (h^{t-1} - n) u + n; z, gates (3N, tau, B), hn and h (N, tau, B), uh (3N, B)."""
    N = hn.shape[0]
    r, u = _sigmoid(z[:N, t] + uh[:N]), _sigmoid(z[N: 2 * N, t] + uh[N: 2 * N])
    hidden = uh[2 * N:] + b_hn[:, None]
    candidate = np.tanh(z[2 * N:, t] + r * hidden)
    h[:, t] = (_before(h, t) - candidate) * u + candidate
    gates[:N, t], gates[N: 2 * N, t], gates[2 * N:, t], hn[:, t] = r, u, candidate, hidden


def gru_backward(delta, delta_u, delta_h, gates, hn, h, t):
    """The GRU's backward step t from dh = delta_h^t: delta_n = dh (1 - u)(1 - n^2), delta_z = dh (h^{t-1} - n)
    u (1 - u), delta_r = delta_n hn r (1 - r) into delta (3N, tau, B), delta_u = (delta_r, delta_z, r delta_n),
    and delta_h^{t-1} += u dh at t > 0."""
    N = hn.shape[0]
    dh, r, u, candidate = delta_h[:, t], gates[:N, t], gates[N: 2 * N, t], gates[2 * N:, t]
    dn = dh * (1 - u) * (1 - candidate * candidate)
    dz = dh * (_before(h, t) - candidate) * u * (1 - u)
    dr = dn * hn[:, t] * r * (1 - r)
    delta[:N, t], delta[N: 2 * N, t], delta[2 * N:, t] = dr, dz, dn
    delta_u[:N, t], delta_u[N: 2 * N, t], delta_u[2 * N:, t] = dr, dz, dn * r
    if t:
        delta_h[:, t - 1] += u * dh


def lstm_forward(z, gates, c, h, t):
    """The LSTM's step t (kernels/gates.cu): i, f, o = sig(z_i, z_f, z_o), g = tanh(z_g), c^t = f c^{t-1} + i g,
    h^t = tanh(c^t) o; z and gates (4N, tau, B), c and h (N, tau, B)."""
    N = c.shape[0]
    i, f, g, o = _sigmoid(z[:N, t]), _sigmoid(z[N: 2 * N, t]), np.tanh(z[2 * N: 3 * N, t]), _sigmoid(z[3 * N:, t])
    cell = f * _before(c, t) + i * g
    gates[:N, t], gates[N: 2 * N, t], gates[2 * N: 3 * N, t], gates[3 * N:, t] = i, f, g, o
    c[:, t], h[:, t] = cell, np.tanh(cell) * o


def lstm_backward(delta, dc, delta_h, gates, c, t):
    """The LSTM's backward step t from dh = delta_h^t and dc (N, B), the adjoint of c^t through c^{t+1}:
    dc += dh o (1 - tanh^2 c^t), delta_i = dc g i (1 - i), delta_f = dc c^{t-1} f (1 - f), delta_g = dc i (1 - g^2),
    delta_o = dh tanh(c^t) o (1 - o) into delta (4N, tau, B); then dc *= f."""
    N = c.shape[0]
    dh, i, f, g, o = delta_h[:, t], gates[:N, t], gates[N: 2 * N, t], gates[2 * N: 3 * N, t], gates[3 * N:, t]
    tanh_c = np.tanh(c[:, t])
    carried = dc + dh * o * (1 - tanh_c * tanh_c)
    delta[:N, t] = carried * g * i * (1 - i)
    delta[N: 2 * N, t] = carried * _before(c, t) * f * (1 - f)
    delta[2 * N: 3 * N, t] = carried * i * (1 - g * g)
    delta[3 * N:, t] = dh * tanh_c * o * (1 - o)
    np.multiply(carried, f, out=dc)
