"""Schedules of the recurrent network's backward pass: who computes delta^{l,t}, and where the weight
gradients run.

The unknowns delta^{l,t} of layers l = L-1..2 (K = L-2 recurrent layers) and time steps t = tau..1 form
a grid in which delta^{l,t} depends on delta^{l+1,t} (through w^{l+1}) and on delta^{l,t+1} (through
u^l). Each schedule solves that grid on the main stream in its own way and hands layer l on as soon as
every delta^{l,t} is final, deepest layer first; then nabla_b^l, nabla_w^l, nabla_u^l (sums over t of
outer products that nothing on the chain needs) run where the schedule's ``k`` says:

``BPTT()``       layer by layer, t = tau..1 inside each: K·tau dependent rounds; gradients on the main stream.
``Wavefront()``  the anti-diagonals of the (layer, time) grid, one per round: K + tau - 1 rounds.
``TimeScan()``   per layer, a suffix scan over time (``scans``): K·(1 + ceil(log2 tau)) rounds.
``NaumovRNN()``  time scans of every layer at once, then recursive doubling over layers (``scans``).

``k = 0`` runs the gradients on the main stream, right after their layer; ``k >= 1`` on worker
``l mod k`` behind event E_l (read after write: the worker reads delta^l, a^{l-1} and a^l), and the main
stream joins every busy worker before the update and the next pass (write after read). The schedules
every network takes run here too: ``Sequential()`` is ``BPTT()``, and ``Leapfrog(k)`` is the BPTT chain with its k
workers, bitwise equal to ``BPTT()`` (the same launches on the same data, on other streams);
``Leapfrog("auto")`` calibrates k on each plan (``core.calibrate``), ``Sequential()`` where no hand-off pays. Layer by
layer rather than time-blocked: a layer's three gradients are then each one product over tau*B
columns, and they leave the chain whole while it runs the next layer.

With ``fused=True`` the SGD update of layer l runs right behind its gradients, before the join. The
main stream reads w^l last for delta^{l-1} = sigma' * ((w^l)^T delta^l + ...), so that update waits
for E_{l-1}, not E_l (u^l and b^l are last read before E_l).

Each schedule keeps ``stats`` of its last pass: ``rounds`` (counted as it enqueued them), ``flops`` and
``bytes`` of its chain (each operand read once, each result written once), ``memory_bytes`` (what it
holds beyond the pass's buffers), and the chain's ``sequential_*`` counterparts (BPTT's) to set them
against; ``rounds_formula`` gives the same rounds in closed form. The counters take the network's
``cell`` (``counters(..., cell=...)``, ``bptt_counters``, ``forward_flops``, ``gradient_flops``): its G·n_l rows
of w^l and u^l and the elementwise work of its steps (``cells.WORK``).
"""

import functools
import inspect

from ..core import calibrate
from ..core.functions import choose
from ..core.schedules import Leapfrog, Schedule, Sequential
from .cells import CELLS, GATES, WORK


@functools.cache
def _default_k(kind):
    """The k of schedule class ``kind`` when none is given (read once: a graph step keys its graph by the repr)."""
    return inspect.signature(kind).parameters["k"].default


class RNNSchedule(Schedule):
    """The chain of an RNN's backward pass (``chain``), whose layers ``core.driver`` hands off (to the main
    stream, or to k workers) and joins; ``stats``."""

    least_k = 0

    def __init__(self, k=0, fused=False):
        super().__init__(k, fused)

    def __repr__(self):
        """``k`` left out where it is 0 and the default (``BPTT()``): ``Wavefront(k=0)`` is not ``Wavefront()``."""
        options = [f"k={self.k}"] if self.k or self.k != _default_k(type(self)) else []
        options += ["fused=True"] if self.fused else []
        return f"{type(self).__name__}({', '.join(options)})"

    def check(self, sizes, tau, B, dtype, *, cell="elman"):
        """Raise before anything of a pass at ``tau`` and ``B`` is allocated if this schedule cannot run it."""

    def chain(self, p):
        """Enqueue the solve on the main stream of pass ``p``; yield each layer L, L-1, ..., 2 once its
        delta is complete, counting the dependent rounds in ``p.rounds``."""
        raise NotImplementedError

    @staticmethod
    def rounds_formula(K, tau):
        raise NotImplementedError

    def counters(self, sizes, tau, B, itemsize, backend="numpy", *, cell="elman"):
        """Flops, bytes and memory of this schedule's chain for ``sizes`` of ``cell`` on ``backend`` (its name); the
        BPTT chain's by default."""
        return bptt_counters(sizes, tau, B, itemsize, cell=cell)


class BPTT(RNNSchedule):
    """Backpropagation through time: delta^{l,tau}, ..., delta^{l,1} for l = L-1..2, on the main stream.

    Layer l starts with (w^{l+1})^T delta^{l+1} for every t (one product), then runs its recursion
    over t. ``k`` is what ``Leapfrog(k)`` gives it: 0 for ``BPTT()``, whose gradients run on the main stream.
    """

    name = "bptt"  # on the command line: --schedule bptt

    def __init__(self, fused=False, k=0):
        super().__init__(k, fused)

    def chain(self, p):
        p.delta_output()
        yield p.L
        for l in range(p.L - 1, 1, -1):
            p.backend.launch(p.main, f"delta[{l}]", self._layer, p, l)
            p.rounds += p.tau
            yield l

    @staticmethod
    def _layer(p, l):
        p.from_above(l)
        p.sweep(l)

    @staticmethod
    def rounds_formula(K, tau):
        return K * tau


class Wavefront(RNNSchedule):
    """The level sets of the (layer, time) grid: round d computes every delta^{l,t} with
    (L-1-l) + (tau-t) = d, all independent of each other; K + tau - 1 rounds, each four batched calls.

    Position i = l - 2 holds layer l (position K: delta^L), padded to the widest width N and skewed in
    time: E[i, s] is delta^{l,t} at s = t + i, so that round d's cells are E[lo:hi, s] (s = K + tau - 2 - d)
    and read only column s + 1: E[i, s] = sigma' * ((w^{l+1})^T E[i+1, s+1] + (u^l)^T E[i, s+1]), one
    stacked product of each, an add and a multiply. The weights are stacked once per pass (2·K·N^2
    elements), delta and sigma' skewed ((2K+1)·(tau+K)·N·B) with a scratch of K·N·B.

    Args:
        k: worker streams for the gradients (0: the main stream).
        fused: fuse the SGD update behind the gradients during ``sgd_step``.
    """

    name = "wavefront"  # on the command line: --schedule wavefront

    def __init__(self, k=2, fused=False):
        super().__init__(k, fused)

    def chain(self, p):
        if p.net.cell != "elman":
            yield from self._gated_chain(p)
            return
        buffers = self._buffers(p)
        p.delta_output()
        yield p.L
        K, tau = p.L - 2, p.tau
        p.backend.launch(p.main, "wavefront: load", self._load, p, buffers)
        for d in range(K + tau - 1):
            s = K + tau - 2 - d
            lo, hi = max(0, s - tau + 1), min(K, s + 1)
            p.backend.launch(p.main, f"wavefront[{d}]", self._round, p.xp, buffers, s, lo, hi)
            p.rounds += 1
            if s < K:  # position s reached t = 0: layer s + 2 is final
                p.backend.launch(p.main, f"delta[{s + 2}]", self._unload, p, buffers, s)
                yield s + 2

    def _gated_chain(self, p):
        """The level sets of gated layers: round d runs, one after another, every cell (l, t) with
        (L-1-l) + (tau-t) = d, each its dh^{l,t} += (w^{l+1})^T delta^{l+1,t} and its step (``cells``); the
        cells of a round are independent, their calls not batched."""
        L, K, tau = p.L, p.L - 2, p.tau
        p.delta_output()
        yield L
        p.backend.launch(p.main, "wavefront: load", self._gated_load, p)
        for d in range(K + tau - 1):
            cells = [(l, t) for l in range(L - 1, 1, -1) for t in [tau - 1 - d + (L - 1 - l)] if 0 <= t < tau]
            p.backend.launch(p.main, f"wavefront[{d}]", self._gated_round, p, cells)
            p.rounds += 1
            yield from (l for l, t in cells if t == 0)

    @staticmethod
    def _gated_load(p):
        for l in p.net.hidden:
            p.delta_h[l].fill(0)
            p.recursion[l].reset()

    @staticmethod
    def _gated_round(p, cells):
        xp = p.xp
        for l, t in cells:
            dh = p.delta_h[l][:, t]
            if l + 1 < p.L or p.a_last is None:
                xp.add(dh, p.w[l + 1].T @ p.delta[l + 1][:, t], out=dh)
            elif t == p.tau - 1:  # below a last-step output
                xp.add(dh, p.w[l + 1].T @ p.delta[l + 1][:, 0], out=dh)
            for call in p.recursion[l].steps[t]:
                call()

    @staticmethod
    def _elements(sizes, tau, B):
        K, N = len(sizes) - 2, max(sizes[1:])
        return [K * N * N, K * N * N, (K + 1) * (tau + K) * N * B, K * (tau + K) * N * B, K * N * B]

    def memory_needed(self, sizes, tau, B, itemsize, *, cell="elman"):
        """Bytes of the stacked weights, the skewed delta and sigma' and the scratch, for ``sizes`` at ``tau`` and
        ``B``; none for a gated ``cell``, whose rounds run on the pass's own buffers."""
        return sum(self._elements(sizes, tau, B)) * itemsize if check_cell(cell) == "elman" else 0

    @staticmethod
    def _buffers(p):
        """W (K, N, N) with the (w^{l+1})^T, U (K, N, N) with the (u^l)^T, E (K+1, tau+K, N, B), SP
        (K, tau+K, N, B) and Q (K, N, B), allocated once per pass, zero (their padding stays so)."""
        if "wavefront" not in p.cache:
            K, N, tau, B = p.L - 2, max(p.net.sizes[1:]), p.tau, p.batch
            shapes = [(K, N, N), (K, N, N), (K + 1, tau + K, N, B), (K, tau + K, N, B), (K, N, B)]
            p.cache["wavefront"] = [p.xp.zeros(shape, dtype=p.net.dtype) for shape in shapes]
            p.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
        return p.cache["wavefront"]

    @staticmethod
    def _load(p, buffers):
        """The pass's weights and sigma' into their stacks, delta^L into position K (zero where layer L has
        no output)."""
        xp, n, tau, K, L = p.xp, p.net.n, p.tau, p.L - 2, p.L
        W, U, E, SP, _ = buffers
        for i, l in enumerate(range(2, L)):
            xp.copyto(W[i, : n[l], : n[l + 1]], p.w[l + 1].T)
            xp.copyto(U[i, : n[l], : n[l]], p.u[l].T)
            xp.copyto(SP[i, i: i + tau, : n[l]], p.sp[l].transpose(1, 0, 2))
        top = E[K, K:, : n[L]]
        if p.a_last is not None:
            top.fill(0)
            xp.copyto(top[tau - 1], p.delta[L][:, 0])
        else:
            xp.copyto(top, p.delta[L].transpose(1, 0, 2))

    @staticmethod
    def _round(xp, buffers, s, lo, hi):
        """The cells E[lo:hi, s] from column s + 1: four batched calls."""
        W, U, E, SP, Q = buffers
        xp.matmul(W[lo:hi], E[lo + 1: hi + 1, s + 1], out=Q[lo:hi])
        xp.matmul(U[lo:hi], E[lo:hi, s + 1], out=E[lo:hi, s])
        xp.add(E[lo:hi, s], Q[lo:hi], out=E[lo:hi, s])
        xp.multiply(E[lo:hi, s], SP[lo:hi, s], out=E[lo:hi, s])

    @staticmethod
    def _unload(p, buffers, i):
        l = i + 2
        p.xp.copyto(p.delta[l], buffers[2][i, i: i + p.tau, : p.net.n[l]].transpose(1, 0, 2))

    @staticmethod
    def rounds_formula(K, tau):
        return K + tau - 1 if K else 0

    def counters(self, sizes, tau, B, itemsize, backend="numpy", *, cell="elman"):
        """BPTT's flops over the padded width N; w^{l+1} is read once per round rather than once per layer,
        and the stacks are what it holds. A gated ``cell``: BPTT's flops and memory, w^{l+1} read at every cell."""
        K, N = len(sizes) - 2, max(sizes[1:])
        counters = bptt_counters(sizes, tau, B, itemsize, cell=cell)
        if cell != "elman":
            again = sum((tau - 1) * sizes[l - 1] * rows(sizes, l + 1, cell) for l in range(2, len(sizes)))
            counters["bytes"] += again * itemsize
            return counters
        counters["flops"] = K * tau * (4 * N * N + 2 * N) * B
        counters["bytes"] = (K * tau * (2 * N * N + 5 * N * B) + 2 * K * N * N + 2 * K * tau * N * B) * itemsize
        counters["memory_bytes"] = self.memory_needed(sizes, tau, B, itemsize)
        return counters


def check_cell(cell):
    """``cell`` if it names one of ``cells.CELLS``, else a TypeError or ValueError that names them."""
    return choose("cell", cell, CELLS)


def rows(sizes, l, cell="elman"):
    """The rows of w^l and delta^l for ``sizes`` (n_1..n_L): G·n_l in a recurrent layer of a G-gate ``cell``, n_L at
    the output."""
    return sizes[l - 1] * (GATES[cell] if l < len(sizes) else 1)


def bptt_counters(sizes, tau, B, itemsize, output="every", cell="elman"):
    """Flops and bytes of the BPTT chain for ``sizes`` (n_1..n_L) of ``cell`` at ``tau`` and ``B``: per layer l of
    width N and G gates, (w^{l+1})^T delta^{l+1} over tau*B columns, then per step t > 1 (u^l)^T delta_u^{l,t}
    (G·N rows) into dh^{t-1} with what the step carries, and at every step the deltas from dh^t (``cells.WORK``:
    the Elman cell's sigma' * (.))."""
    G, step = GATES[check_cell(cell)], WORK[cell]
    flops = moved = 0
    for l in range(2, len(sizes)):
        N, above = sizes[l - 1], rows(sizes, l + 1, cell)
        flops += 2 * N * above * tau * B + (tau - 1) * (2 * G * N * N + step.carried * N) * B
        flops += step.backward * N * tau * B
        moved += N * above + (above + N) * tau * B
        moved += (tau - 1) * (G * N * N + (G + 2 + step.carried_moved) * N * B) + step.moved * N * tau * B
    return {"flops": flops, "bytes": moved * itemsize, "memory_bytes": 0,
            "sequential_flops": flops, "sequential_bytes": moved * itemsize}


def forward_flops(sizes, tau, B, cell="elman"):
    """Flops of the sequential forward pass of the recurrent layers of ``sizes`` of ``cell`` at ``tau`` and ``B``:
    per layer, w^l a^{l-1} over tau*B columns, u^l a^{l,t-1} at every step but the first (a^{l,0} = 0), both of
    G·n_l rows, and the step's elementwise rest (``cells.WORK``: the Elman cell's bias, sigma and sigma')."""
    G, step = GATES[check_cell(cell)], WORK[cell]
    return sum(2 * G * N * sizes[l - 2] * tau * B + 2 * G * N * N * (tau - 1) * B + step.forward * N * tau * B
               for l, N in enumerate(sizes[1:-1], start=2))


def gradient_flops(sizes, tau, B, outputs, cell="elman"):
    """Flops of nabla_w, nabla_u, nabla_b of every layer of ``cell`` (G·n_l rows; a GRU's nabla_b_hn, a sum of n_l
    rows, too): the work the workers take off the chain."""
    G, L, flops = GATES[check_cell(cell)], len(sizes), 0
    for l in range(2, L):
        N = sizes[l - 1]
        flops += 2 * G * N * sizes[l - 2] * tau * B + 2 * G * N * N * (tau - 1) * B + G * N * tau * B
        flops += N * tau * B if cell == "gru" else 0
    return flops + 2 * sizes[L - 1] * sizes[L - 2] * outputs * B + sizes[L - 1] * outputs * B


def resolve(schedule, plan=None):
    """The RNN schedule that runs ``schedule``, one the network has checked: ``Sequential()`` is ``BPTT()``,
    ``Leapfrog(k)`` the BPTT chain with k workers, and ``Leapfrog("auto")`` that of the k that
    ``core.calibrate.choose`` picks on ``plan`` (whose forward pass is enqueued) the first time."""
    if type(schedule) is Leapfrog and schedule.auto:
        return resolve(calibrate.choose(plan, fused=schedule.fused))
    if type(schedule) is Sequential:
        return BPTT(fused=schedule.fused)
    if type(schedule) is Leapfrog:
        return BPTT(fused=schedule.fused, k=schedule.k)
    return schedule
