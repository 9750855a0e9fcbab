"""The optimizers' updates on the host, each one loop compiled by Numba: w, nabla, and the state (momentum
buffer; Adam's m and v) read once and written once, where NumPy's element-wise calls make a dozen passes over
them; and the one-pass sweep of a single sample (B = 1), which adds w's part of (5) and updates w by
nabla_w = delta a^T in that same pass, nabla_w never written.

Each element goes through the IEEE operations of ``ops_numpy``'s rules, in their order and in the
parameter's dtype (every scalar comes in that dtype), and Numba contracts no multiply and add into one
(no ``fastmath``): an update is bitwise what the same rule computes by NumPy's element-wise calls. The
loops release the GIL, so that host streams update side by side. ``WRITES`` names what each loop writes.
"""

import numba
import numpy as np

_compiled = numba.njit(nogil=True, cache=True, error_model="numpy")  # "numpy": no division checks, so it vectorises
_element = numba.njit(inline="always", error_model="numpy")

WRITES = {"momentum": (0, 2), "adam": (0, 2, 3), "momentum_sweep": (0, 3, 4), "adam_sweep": (0, 3, 4, 5)}
"""The arrays each loop writes, by argument position; it reads the others."""


@_element
def _momentum(p, g, buf, lr, weight_decay, mu, undamped, first, nesterov):
    """One element of torch.optim.SGD's step: (p, buf) after it, g the batch-mean gradient."""
    if weight_decay != 0:
        g = g + p * weight_decay
    if mu != 0:
        buf = g if first else buf * mu + g * undamped
        g = g + buf * mu if nesterov else buf
    return p - g * lr, buf


@_element
def _adam(p, g, m, v, decay, weight_decay, beta1, c1, beta2, c2, root, eps, step_size, small, floor):
    """One element of torch.optim.Adam's step: (p, m, v) after it, g the batch-mean gradient.

    ``v * beta2 + (g * c2) * g``, where |g| < ``small`` and ``v * beta2`` > ``floor``, adds ``(0 * c2) * 0``: the
    term is then below half an ulp of ``v * beta2`` and changes no bit of the sum (``_adam_scalars``), while its
    subnormal products, which a vanishing gradient makes, cost some CPUs a microcode assist each (10-20x the
    update's time on an Intel Xeon)."""
    p = p * decay
    if weight_decay != 0:
        g = g + p * weight_decay
    m = m * beta1 + g * c1
    kept = v * beta2
    h = g if kept <= floor or not -small < g < small else g - g  # 0 in the dtype of g
    v = kept + (h * c2) * h  # torch.optim's order (addcmul's): g * g first would overflow where |g| > 1.8e19 in float32
    return p - m / (np.sqrt(v) / root + eps) * step_size, m, v


@_compiled
def momentum(p, nabla, buf, scale, lr, weight_decay, mu, undamped, first, nesterov):
    """torch.optim.SGD's step on flat p by flat nabla (summed over the batch) and buf (momentum ``mu``;
    ``undamped`` = 1 - dampening; ``buf`` is p itself, unread, when mu is 0): g = nabla * scale (+ p * weight_decay),
    buf = g at ``first``, else buf * mu + g * undamped; p -= (g + buf * mu if ``nesterov`` else buf) * lr."""
    for i in range(p.size):
        p[i], b = _momentum(p[i], nabla[i] * scale, buf[i], lr, weight_decay, mu, undamped, first, nesterov)
        if mu != 0:
            buf[i] = b


@_compiled
def adam(p, nabla, m, v, scale, decay, weight_decay, beta1, c1, beta2, c2, root, eps, step_size, small, floor):
    """torch.optim.Adam's step (AdamW's with ``decay`` = 1 - lr * weight_decay, else ``decay`` 1 and
    ``weight_decay`` added to g) on flat p, nabla, m and v: g = nabla * scale, m = m * beta1 + g * c1,
    v = v * beta2 + (g * c2) * g (c1 = 1 - beta1, c2 = 1 - beta2), p -= m / (sqrt(v) / root + eps) * step_size."""
    for i in range(p.size):
        p[i], m[i], v[i] = _adam(p[i], nabla[i] * scale, m[i], v[i], decay, weight_decay, beta1, c1, beta2, c2, root,
                                 eps, step_size, small, floor)


@_compiled
def momentum_sweep(w, delta, a, buf, chain, chained, scale, lr, weight_decay, mu, undamped, first, nesterov):
    """``chain += w^T delta`` (if ``chained``) and ``momentum``'s step of w (n, m) by nabla_w = delta a^T, in one
    pass over w's rows in order: delta (n,), a and chain (m,), buf as w."""
    n, m = w.shape
    for j in range(n):
        d = delta[j]
        for i in range(m):
            if chained:
                chain[i] += w[j, i] * d
            w[j, i], b = _momentum(w[j, i], d * a[i] * scale, buf[j, i], lr, weight_decay, mu, undamped, first,
                                   nesterov)
            if mu != 0:
                buf[j, i] = b


@_compiled
def adam_sweep(w, delta, a, m, v, chain, chained, scale, decay, weight_decay, beta1, c1, beta2, c2, root, eps,
               step_size, small, floor):
    """``chain += w^T delta`` (if ``chained``) and ``adam``'s step of w (n, m) by nabla_w = delta a^T, in one pass
    over w's rows in order: delta (n,), a and chain (m,), m and v as w."""
    n, k = w.shape
    for j in range(n):
        d = delta[j]
        for i in range(k):
            if chained:
                chain[i] += w[j, i] * d
            w[j, i], m[j, i], v[j, i] = _adam(w[j, i], d * a[i] * scale, m[j, i], v[j, i], decay, weight_decay,
                                              beta1, c1, beta2, c2, root, eps, step_size, small, floor)
