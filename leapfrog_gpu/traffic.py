"""Bytes a pass must move, and the device bandwidth they move at: the memory-traffic floor.

Counts are in bytes, for the compulsory traffic only (each array read or written once); caches can
only make a step slower than ``bytes / bandwidth``, never faster, once the weights outgrow them.
"""

import numpy as np

from . import timing


def nabla_w_bytes(n, m, batch, itemsize):
    """Equation (7) for one layer: write nabla_w (n*m), read delta (n*B) and a (m*B)."""
    return (n * m + (n + m) * batch) * itemsize


def step_bytes(sizes, batch, itemsize):
    """One SGD step of ``MLP(sizes)`` on ``batch`` samples.

    Per layer l (n = n_l, m = n_{l-1}, B = batch), in elements:
      (2)(3)  read w (n*m) and a^{l-1} (m*B); write z, a, sigma'(z) (3*n*B)
      (4)(5)  read w^{l+1} (counted as n*m per layer) and delta^{l+1}, sigma'(z) (2*n*B); write delta (n*B)
      (6)(7)  read delta (n*B) and a^{l-1} (m*B); write nabla_b (n) and nabla_w (n*m)
      update  read w, nabla_w, write w (3*n*m); read b, nabla_b, write b (3*n)
    """
    total = 0
    for m, n in zip(sizes[:-1], sizes[1:]):
        total += 6 * n * m + 7 * n * batch + 2 * m * batch + 4 * n
    return total * itemsize


def copy_bandwidth(backend, nbytes=1 << 27, repeats=20, warmup=3):
    """Device-to-device (host-to-host on NumPy) copy bandwidth in GB/s, read plus write, as a
    ``timing.summary`` of GB/s over the repeats."""
    xp = backend.xp
    src = xp.ones(nbytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    backend.synchronize()
    ms = timing.measure(backend, lambda: backend.launch(backend.main, "copy", xp.copyto, dst, src), repeats, warmup)
    return timing.summary(2 * src.nbytes / (ms * 1e6))
