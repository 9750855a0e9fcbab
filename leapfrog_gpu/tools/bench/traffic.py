"""The bytes a step of ``MLP(sizes)`` must move: its memory floor, the time they take at a copy's bandwidth.

Every input element is read once and every output element written once (re-reads are left to the caches);
layer ``l`` has ``n = n_l`` rows and ``m = n_{l-1}`` columns, ``batch`` is B. The floors of each kernel on
its own are ``profiling/kernel_traffic.py``'s.
"""

UPDATES = {"plain": 6, "fused": 4, "one-pass": 3}
"""How many times a step moves each weight matrix, by how it updates w (``update_of``): plain, (2) reads
w, (5) reads w^{l+1}, (7) writes nabla_w, the update reads w and nabla_w and writes w; fused, (2), (5)
and the fused (7) reading and writing w; one-pass, (2) and the sweep of (5) reading and writing w^{l+1}
(``ops_numpy.backward_update``)."""


def update_of(schedule):
    """The key of ``UPDATES`` for a schedule's SGD step."""
    return "one-pass" if getattr(schedule, "one_pass", False) else "fused" if schedule.fused else "plain"


def forward_bytes(sizes, batch, itemsize):
    """Bytes the forward pass (2)(3) of ``MLP(sizes)`` on ``batch`` samples must move: per layer, read w, b
    and a^{l-1}, write z, a and sigma'(z) (``forward_gemv``, ``forward_gemm``)."""
    return sum(n * m + m * batch + n + 3 * n * batch for m, n in zip(sizes[:-1], sizes[1:])) * itemsize


def step_bytes(sizes, batch, itemsize, update="plain", slots=0):
    """Bytes one SGD step of ``MLP(sizes)`` on ``batch`` samples must move: the floor of a step whose
    update is ``update`` (a key of ``UPDATES``), and which reads and writes ``slots`` more arrays shaped as
    each parameter (an optimizer's state: 1 for momentum, 2 for Adam's moments).

    Per layer l (n = n_l, m = n_{l-1}, B = batch), in elements, for a plain step:
      (2)(3)  read w (n*m) and a^{l-1} (m*B); write z, a, sigma'(z) (3*n*B)
      (4)(5)  read w^{l+1} (counted as n*m per layer) and delta^{l+1}, sigma'(z) (2*n*B); write delta (n*B)
      (6)(7)  read delta (n*B) and a^{l-1} (m*B); write nabla_b (n) and nabla_w (n*m)
      update  read w, nabla_w, write w (3*n*m); read b, nabla_b, write b (3*n)
    A fused or one-pass step moves each weight matrix ``UPDATES[update]`` times instead of 6, and the
    rest alike.
    """
    total = 0
    for m, n in zip(sizes[:-1], sizes[1:]):
        total += (UPDATES[update] + 2 * slots) * n * m + 7 * n * batch + 2 * m * batch + (4 + 2 * slots) * n
    return total * itemsize
