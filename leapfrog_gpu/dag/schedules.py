"""Backward schedules of a ``GraphNet``: the upper-triangular system of its adjoints, solved four ways.

The unknowns are x_v = abar_v for every non-input node but the output, whose unknown is its error
x_out = g (eq. (4)). With T_{u,v} the product that node v hands back to its input u (J_{v,u}^T, or for
the output g -> its input product), the system is x = N x + e, e = g at the output, N nilpotent with
the DAG's sparsity; D (``depth``) is the number of non-input nodes on the longest path.

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

The schedules see the pass through its ``plan.Plan`` and the few names it gives them (``order``,
``depth``, ``consumers``, ``n``, ``node``, ``sweep``, ``blocks``, ``counters``), not the network.
"""

import math
import numbers

import numpy as np

from ..core.checks import MEMORY_LIMIT, check_memory_limit
from ..core.schedules import Schedule


def backward(plan, schedule, controls):
    """Enqueue the backward pass of ``plan`` under ``schedule`` (one the network has checked), the SGD
    update fused where the schedule fuses and ``controls`` is given; return its counters."""
    if schedule.k == "auto":
        raise ValueError("Leapfrog('auto') calibrates an MLP; give a GraphNet Leapfrog(k) with an integer k")
    hand = plan.handoff(schedule.k)
    fused = controls if schedule.fused else None
    if isinstance(schedule, DagSchedule):
        schedule.dag_backward(plan, hand, fused)
    else:  # Sequential(), Leapfrog(k): the reverse topological order
        for v in reversed(plan.order):
            plan.node(hand, v, fused)
    hand.join()
    counters = plan.counters()
    if isinstance(schedule, DagSchedule):
        schedule.stats.update(counters)  # the solvers add what they count as they run
        return schedule.stats
    return {"rounds": counters["sequential_rounds"], "flops": counters["sequential_flops"],
            "bytes": counters["sequential_bytes"], "memory_bytes": 0, **counters}


class DagSchedule(Schedule):
    """A DAG schedule: gradients handed to ``k`` workers as by ``Leapfrog(k)``; ``stats`` per pass."""

    def __init__(self, k=2, fused=False):
        super().__init__(k, fused)

    def __repr__(self):
        return f"{type(self).__name__}(k={self.k}{', fused=True' if self.fused else ''})"

    def dag_backward(self, plan, hand, controls):
        """Enqueue the solve on the main stream of ``plan`` and every node's hand-off through ``hand``
        (with a fused update by ``controls``, when given)."""
        raise NotImplementedError

    @staticmethod
    def _finish(plan, hand, controls):
        """Every node's g and hand-off, its adjoint solved: in the reverse order, no products."""
        for v in reversed(plan.order):
            plan.node(hand, v, controls, products=False)


class LevelSets(DagSchedule):
    """Reverse generations by height: round r holds the nodes whose longest path to the output has r
    edges; D rounds."""

    def dag_backward(self, plan, hand, controls):
        levels = heights(plan)
        for r in range(max(levels.values()) + 1):
            for v in reversed(plan.order):
                if levels[v] == r:
                    plan.node(hand, v, controls)
        self.stats = {"rounds": max(levels.values()) + 1, "memory_bytes": 0}
        self.stats.update(_times(plan, 1))


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

    def dag_backward(self, plan, hand, controls):
        sweeps = plan.depth if self.max_sweeps is None else min(self.max_sweeps, plan.depth)
        plan.backend.launch(plan.main, "jacobi", self._solve, plan, sweeps)
        self._finish(plan, hand, controls)
        itemsize = np.dtype(plan.dtype).itemsize
        self.stats = {"sweeps": sweeps, "rounds": sweeps, "converged": sweeps == plan.depth,
                      "memory_bytes": 2 * sum(plan.n[v] for v in plan.order) * plan.batch * itemsize}
        self.stats.update(_times(plan, sweeps))

    @staticmethod
    def _solve(plan, sweeps):
        for sweep in range(sweeps):
            plan.sweep(first=sweep == 0)


class DagDoubling(DagSchedule):
    """Recursive doubling over the DAG's blocks: x <- x + P x, P <- P^2, ceil(log2 D) rounds, P = N at
    first, every block one (B, n_u, n_w) array per reachable pair. ``memory_limit``: bytes its blocks
    and vectors may take; ``memory_needed`` is checked before anything is allocated."""

    def __init__(self, k=2, fused=False, memory_limit=MEMORY_LIMIT):
        memory_limit = check_memory_limit(memory_limit)
        super().__init__(k, fused)
        self.memory_limit = memory_limit

    def memory_needed(self, net, batch):
        """Bytes of P and P^2 over the reachable pairs, and two iterates, for ``net`` (a ``GraphNet`` or its
        plan) at ``batch``."""
        return doubling_bytes(net, reachable_pairs(net), batch, np.dtype(net.dtype).itemsize)

    def dag_backward(self, plan, hand, controls):
        needed = self.memory_needed(plan, plan.batch)
        if needed > self.memory_limit:
            raise ValueError(f"DagDoubling needs {needed} bytes for depth D={plan.depth}, batch B={plan.batch} "
                             f"({plan.dtype}), over memory_limit={self.memory_limit}; pass a larger memory_limit or "
                             "use Sequential(), Leapfrog(k), LevelSets() or DagJacobi()")
        self.stats = {"rounds": doubling_rounds(plan.depth), "memory_bytes": needed}
        plan.backend.launch(plan.main, "doubling", self._solve, plan)
        self._finish(plan, hand, controls)

    def _solve(self, plan):
        blocks, e = plan.blocks()
        x, flops, moved = doubling_solve(plan.xp, blocks, e, plan.depth)
        for v in plan.order:
            if v not in e:
                plan.adjoints[v] = x[v]
        self.stats.update(flops=flops, bytes=moved * np.dtype(plan.dtype).itemsize)


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


def heights(dag):
    """The longest path from each node of ``dag`` (a network or its plan) to the output, in edges (the
    output 0)."""
    height = {}
    for v in reversed(dag.order):
        height[v] = 1 + max((height[c] for c in dag.consumers[v]), default=-1)
    return height


def reachable_pairs(dag):
    """Pairs (u, w) of non-input nodes of ``dag`` with a path u -> ... -> w: where P's blocks can be nonzero."""
    below = {}
    for v in reversed(dag.order):
        below[v] = set(dag.consumers[v]).union(*(below[c] for c in dag.consumers[v]))
    return [(u, w) for u in dag.order for w in below[u]]


def doubling_bytes(dag, pairs, batch, itemsize):
    """Bytes of P and P^2 over ``pairs`` and of two iterates of ``dag``, at ``batch``."""
    blocks = sum(dag.n[u] * dag.n[w] for u, w in pairs)
    return (2 * blocks + 2 * sum(dag.n[v] for v in dag.order)) * batch * itemsize


def _times(plan, times):
    """The sequential order's flops and bytes, ``times`` over."""
    counters = plan.counters()
    return {"flops": times * counters["sequential_flops"], "bytes": times * counters["sequential_bytes"]}


