"""Backward schedules of a ``GraphNet``: the upper-triangular system of its adjoints, solved four ways.

The unknowns are x_v = abar_v for every non-input node but the output, whose unknown is its error
x_out = g (eq. (4)). With T_{u,v} the product that node v hands back to its input u (J_{v,u}^T, or for
the output g -> its input product), the system is x = N x + e, e = g at the output, N nilpotent with
the DAG's sparsity; D (``net.depth``) is the number of non-input nodes on the longest path.

``Sequential()``  the reverse topological order on the main stream: V dependent steps (V nodes).
``Leapfrog(k)``   the same order; node v's parameter gradients on worker ``index(v) mod k`` behind its
                  event E_v, the workers joined before the update; with ``fused=True`` the worker also
                  updates, behind the main stream's last read of the node's parameters.
``LevelSets(k)``  reverse generations by height (the longest path to the output): D rounds, the nodes
                  of a round independent of each other.
``DagJacobi(k)``  every x_v from the previous sweep's at once, from x = 0: exact after D sweeps.
``DagDoubling(k)``  (I - N)^{-1} = (I + N)(I + N^2)(I + N^4)...: ceil(log2 D) rounds of block products
                  over the reachable pairs (its chain case is ``NaumovScan``); the memory it needs is
                  checked against ``memory_limit`` before anything is allocated.

Every adjoint sums its consumers' products in one fixed order (deepest consumer first), so every
schedule here whose inputs are exact computes the sequential order's values bit for bit. The last
three hand gradients to workers as ``Leapfrog(k)`` does. Each fills ``stats`` (and the network's
``stats["backward"]``): rounds, sweeps, flops and bytes of the adjoint system (estimates: each operand
read once, each result written once), the same for the sequential order, and the memory it holds.
"""

import math
import numbers

import numpy as np

from .checks import check_memory_limit
from .layers import from_products
from .schedules import Leapfrog, Sequential

DEFAULT_MEMORY_LIMIT = 2**30
"""Bytes ``DagDoubling``'s blocks may take unless the user allows more."""


def backward(net, state, schedule, scale):
    """Enqueue the backward pass of ``state`` under ``schedule`` (``Sequential()`` when None), the SGD
    update fused where the schedule fuses and ``scale`` (the step controls) is given; return whether
    the update is still to be enqueued."""
    schedule = Sequential() if schedule is None else schedule
    if isinstance(schedule, DagSchedule):
        run = schedule.dag_backward
    elif type(schedule) in (Sequential, Leapfrog):
        if schedule.k == "auto":
            raise ValueError("Leapfrog('auto') calibrates an MLP; give a GraphNet Leapfrog(k) with an integer k")
        run = _reverse_topological
    else:
        raise TypeError(f"a GraphNet runs Sequential(), Leapfrog(k), LevelSets(), DagJacobi() or DagDoubling(); "
                        f"got {schedule!r}")
    hand = Handoff(net, schedule, scale)
    run(net, state, hand)
    hand.join()
    counters = sequential_counters(net, state.batch)
    if isinstance(schedule, DagSchedule):
        schedule.stats.update(counters)  # the solvers add what they count as they run
        net.stats["backward"] = schedule.stats
    else:
        net.stats["backward"] = {"rounds": counters["sequential_rounds"], "flops": counters["sequential_flops"],
                                 "bytes": counters["sequential_bytes"], "memory_bytes": 0, **counters}
    return not hand.fused


class Handoff:
    """Where node v's gradients run: on the main stream (k = 0), else on worker ``index(v) mod k``
    behind an event recorded on the main stream: after g_v, or (fused) after the last read of v's
    parameters, when the worker also updates them by ``scale``."""

    def __init__(self, net, schedule, scale):
        self.net, self.backend, self.k = net, net.backend, schedule.k
        self.fused, self.scale, self.busy = schedule.fused and scale is not None, scale, {}

    def ready(self, state, v):
        """g_v is enqueued on the main stream."""
        if not self.fused:
            self._give(state, v, None)

    def read(self, state, v):
        """The main stream has enqueued its last read of v's parameters."""
        if self.fused:
            self._give(state, v, self.scale)

    def _give(self, state, v, step):
        net, backend = self.net, self.backend
        if not net.params[v]:
            return
        if not self.k:
            backend.launch(backend.main, f"gradients[{v}]", net.gradients, state, v, step)
            return
        j = net.index[v] % self.k
        worker = backend.workers(min(self.k, len(net.order) + 2))[j]
        ready = backend.event(f"E_{v}")
        backend.record(backend.main, ready)
        backend.wait(worker, ready)
        backend.launch(worker, f"gradients[{v}]", net.gradients, state, v, step)
        self.busy[j] = worker

    def join(self):
        """Nothing on the main stream passes until every busy worker is done."""
        for j in sorted(self.busy):
            done = self.backend.event(f"F_{j}")
            self.backend.record(self.busy[j], done)
            self.backend.wait(self.backend.main, done)


def _reverse_topological(net, state, hand):
    for v in reversed(net.order):
        _node(net, state, hand, v)


def _node(net, state, hand, v):
    """g_v, its hand-off, then its products to its inputs (skipped when it reads only the input)."""
    main, launch = net.backend.main, net.backend.launch
    launch(main, f"delta[{v}]", net.error, state, v)
    hand.ready(state, v)
    if any(u in net.layer for u in net.inputs[v]):
        launch(main, f"vjp[{v}]", net.propagate, state, v)
    hand.read(state, v)


class DagSchedule(Leapfrog):
    """A DAG schedule: gradients handed to ``k`` workers as by ``Leapfrog(k)``; ``stats`` per pass."""

    def __init__(self, k=2, fused=False):
        super().__init__(k, fused)
        self.stats = {}

    def __repr__(self):
        return f"{type(self).__name__}(k={self.k}{', fused=True' if self.fused else ''})"

    def dag_backward(self, net, state, hand):
        raise NotImplementedError


class LevelSets(DagSchedule):
    """Reverse generations by height: round r holds the nodes whose longest path to the output has r
    edges; D rounds."""

    def dag_backward(self, net, state, hand):
        levels = heights(net)
        for r in range(max(levels.values()) + 1):
            for v in reversed(net.order):
                if levels[v] == r:
                    _node(net, state, hand, v)
        self.stats = {"rounds": max(levels.values()) + 1, "memory_bytes": 0}
        self.stats.update(_flops(net, state.batch, 1, "flops", "bytes"))


class DagJacobi(DagSchedule):
    """Block Jacobi on every node at once from x = 0: each sweep hands every node's products back from
    the previous sweep's errors. Exact after D sweeps from any start; ``max_sweeps`` caps them (fewer
    than D may leave x inexact, which ``stats["converged"]`` says). Holds two iterates."""

    def __init__(self, max_sweeps=None, k=2, fused=False):
        if max_sweeps is not None and (isinstance(max_sweeps, bool) or not isinstance(max_sweeps, numbers.Integral)
                                       or max_sweeps < 1):
            raise ValueError(f"max_sweeps must be None (D sweeps, exact) or an integer >= 1; got {max_sweeps!r}")
        super().__init__(k, fused)
        self.max_sweeps = max_sweeps

    def dag_backward(self, net, state, hand):
        main, launch = net.backend.main, net.backend.launch
        sweeps = net.depth if self.max_sweeps is None else min(self.max_sweeps, net.depth)
        launch(main, "jacobi", self._solve, net, state, sweeps)
        for v in reversed(net.order):
            launch(main, f"delta[{v}]", net.error, state, v)
            hand.ready(state, v)
            hand.read(state, v)
        itemsize = np.dtype(net.dtype).itemsize
        self.stats = {"sweeps": sweeps, "rounds": sweeps, "converged": sweeps == net.depth,
                      "memory_bytes": 2 * sum(net.n[v] for v in net.order) * state.batch * itemsize}
        self.stats.update(_flops(net, state.batch, sweeps, "flops", "bytes"))

    @staticmethod
    def _solve(net, state, sweeps):
        xp, out = net.backend.xp, net.output
        g_out = net.output_error(state.a[out], state.y, state.saved[out])
        contributions = {v: {} for v in net.order}
        for sweep in range(sweeps):
            state.contributions, contributions = contributions, {v: {} for v in net.order}
            for v in reversed(net.order):
                if v == out:
                    state.g[v] = g_out if sweep else xp.zeros_like(g_out)
                elif state.contributions[v]:
                    net.error(state, v)
                else:
                    state.g[v] = xp.zeros((net.n[v], state.batch), dtype=net.dtype)
            state.contributions = contributions
            for v in net.order:
                if any(u in net.layer for u in net.inputs[v]):
                    net.propagate(state, v)
        state.contributions = contributions


class DagDoubling(DagSchedule):
    """Recursive doubling over the DAG's blocks: x <- x + P x, P <- P^2, ceil(log2 D) rounds, P = N at
    first, every block one (B, n_u, n_w) array per reachable pair. ``memory_limit``: bytes its blocks
    and vectors may take; ``memory_needed`` is checked before anything is allocated."""

    def __init__(self, k=2, fused=False, memory_limit=DEFAULT_MEMORY_LIMIT):
        memory_limit = check_memory_limit(memory_limit)
        super().__init__(k, fused)
        self.memory_limit = memory_limit

    def memory_needed(self, net, batch):
        """Bytes of P and its square over the reachable pairs, and two iterates."""
        return doubling_bytes(net, reachable_pairs(net), batch, np.dtype(net.dtype).itemsize)

    def dag_backward(self, net, state, hand):
        needed = self.memory_needed(net, state.batch)
        if needed > self.memory_limit:
            raise ValueError(f"DagDoubling needs {needed} bytes for depth D={net.depth}, batch B={state.batch} "
                             f"({net.dtype}), over memory_limit={self.memory_limit}; pass a larger memory_limit or "
                             "use Sequential(), Leapfrog(k), LevelSets() or DagJacobi()")
        main, launch = net.backend.main, net.backend.launch
        self.stats = {"rounds": doubling_rounds(net.depth), "memory_bytes": needed}
        launch(main, "doubling", self._solve, net, state)
        for v in reversed(net.order):
            launch(main, f"delta[{v}]", net.error, state, v)
            hand.ready(state, v)
            hand.read(state, v)

    def _solve(self, net, state):
        xp, out = net.backend.xp, net.output
        g_out = net.output_error(state.a[out], state.y, state.saved[out])
        blocks = transfer_blocks(net, state)
        x, flops, moved = doubling_solve(xp, blocks, {out: g_out}, net.depth)
        for v in net.order:
            if v != out:
                state.adjoints[v] = x[v]
        itemsize = np.dtype(net.dtype).itemsize
        self.stats.update(flops=flops, bytes=moved * itemsize)


def transfer_blocks(net, state):
    """N's blocks {(u, v): (B, n_u, n_v)}: J_{v,u}^T for v below the output, the matrix of
    g -> (its product to u) for the output."""
    xp, blocks = net.backend.xp, {}
    for v in net.order:
        args = net.arguments(state, v)
        layer, params, saved = net.layer[v], net.params[v], state.saved[v]
        for i, u in enumerate(net.inputs[v]):
            if u not in net.layer:  # the input
                continue
            if v == net.output:
                block = from_products(xp, lambda g, i=i: layer.vjp_inputs(net.backend, params, args, saved, g)[i],
                                      net.n[v], args[i])
            else:
                block = layer.jacobian(net.backend, params, args, saved, i)
            matrix = block.dense().transpose(0, 2, 1)
            blocks[u, v] = blocks[u, v] + matrix if (u, v) in blocks else matrix
    return blocks


def doubling_solve(xp, blocks, e, depth):
    """x = (I - N)^{-1} e = sum_{i < D} N^i e for nilpotent N of index <= D, in ceil(log2 D) rounds.

    ``blocks``: {(u, v): (B, n_u, n_v)}; ``e``: {v: (n_v, B)}. Returns ``(x, flops, elements moved)``."""
    P, x, flops, moved = blocks, dict(e), 0, 0
    rounds = doubling_rounds(depth)
    for r in range(rounds):
        new = dict(x)
        for (u, v), block in P.items():
            if v in x:
                term = xp.matmul(block, x[v].T[:, :, None])[:, :, 0].T
                new[u] = new[u] + term if u in new else term
                B, n_u, n_v = block.shape
                flops, moved = flops + 2 * B * n_u * n_v, moved + B * n_u * n_v + B * (n_v + 2 * n_u)
        x = new
        if r < rounds - 1:
            P, f, m = _square(xp, P)
            flops, moved = flops + f, moved + m
    return x, flops, moved


def _square(xp, P):
    """P^2 over block pairs: (u, w) = sum over v of P[u, v] P[v, w]."""
    by_row, squared, flops, moved = {}, {}, 0, 0
    for (v, w), block in P.items():
        by_row.setdefault(v, []).append((w, block))
    for (u, v), left in P.items():
        for w, right in by_row.get(v, ()):
            product = xp.matmul(left, right)
            squared[u, w] = squared[u, w] + product if (u, w) in squared else product
            B, n_u, n_v = left.shape
            flops += 2 * B * n_u * n_v * right.shape[2]
            moved += B * (n_u * n_v + n_v * right.shape[2] + n_u * right.shape[2])
    return squared, flops, moved


def doubling_rounds(depth):
    """ceil(log2 D): the rounds after which sum_{i < 2^r} N^i covers every power below D."""
    return math.ceil(math.log2(depth)) if depth > 1 else 0


def heights(net):
    """The longest path from each node to the output, in edges (the output 0)."""
    height = {}
    for v in reversed(net.order):
        height[v] = 1 + max((height[c] for c in net.consumers[v]), default=-1)
    return height


def reachable_pairs(net):
    """Pairs (u, w) of non-input nodes with a path u -> ... -> w: where P's blocks can be nonzero."""
    below = {}
    for v in reversed(net.order):
        below[v] = set(net.consumers[v]).union(*(below[c] for c in net.consumers[v]))
    return [(u, w) for u in net.order for w in below[u]]


def doubling_bytes(net, pairs, batch, itemsize):
    """Bytes of P and P^2 over ``pairs`` and of two iterates, at ``batch``."""
    blocks = sum(net.n[u] * net.n[w] for u, w in pairs)
    return (2 * blocks + 2 * sum(net.n[v] for v in net.order)) * batch * itemsize


def _flops(net, batch, times, flops_key, bytes_key):
    counters = sequential_counters(net, batch)
    return {flops_key: times * counters["sequential_flops"], bytes_key: times * counters["sequential_bytes"]}


def sequential_counters(net, batch):
    """Flops and bytes of the adjoint system in the sequential order: each node's error and products.

    A node with parameters counts 2 n n_i B per input (a matrix product) and n B (its error); one
    without, n_i B per input (Add) or nothing (Concat, a copy)."""
    itemsize, flops, moved = np.dtype(net.dtype).itemsize, 0, 0
    for v in net.order:
        n, widths = net.n[v], [net.n[u] for u in net.inputs[v] if u in net.layer]
        if net.params[v]:
            flops += sum(2 * n * m * batch for m in widths) + n * batch
            moved += sum(p.size for p in net.params[v].values()) + 3 * n * batch + sum(widths) * batch
        else:
            flops += sum(widths) * batch if len(net.inputs[v]) > 1 and len(set(widths)) == 1 else 0
            moved += n * batch + sum(widths) * batch
    return {"sequential_rounds": len(net.order), "sequential_flops": flops, "sequential_bytes": moved * itemsize}
