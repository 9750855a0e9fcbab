"""Backward schedules of a ``DagNet``: the upper-triangular system of its adjoints, solved four ways (``Sequential``
and ``Leapfrog`` in one order).

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
``DagJacobi(k)``  x <- e + N x from x = 0, every x_v at once: exact after D sweeps, each sweep one batched
                  product of N's blocks laid into one (B, M, M) matrix (M the sum of the node widths).
``DagDoubling(k)``  (I - N)^{-1} = (I + N)(I + N^2)(I + N^4)...: ceil(log2 D) rounds on the same matrix
                  P = N at first, each x <- x + P x and P <- P^2 (its chain case is ``NaumovScan``).

The last two (``BlockSchedule``) check the memory they need against ``memory_limit`` before anything is
allocated. Every adjoint sums its consumers' products in one fixed order (deepest consumer first), so
``Leapfrog(k)`` and ``LevelSets(k)`` compute the sequential order's values bit for bit; the block
schedules' products of N's blocks round otherwise, and agree with it within rounding. The last three
hand gradients to workers as ``Leapfrog(k)`` does. Each fills ``stats`` (and the network's
``stats["backward"]``): rounds, sweeps, flops and bytes of the adjoint system (estimates: each operand
read once, each result written once), the same for the sequential order, and the memory it holds.

The schedules see the pass through its ``plan.DagPlan`` and the few names it gives them (``order``,
``depth``, ``consumers``, ``n``, ``node``, ``blocks``, ``counters``), not the network.
"""

import numpy as np

from ..core import triangular
from ..core.checks import MEMORY_LIMIT, check_cap, check_memory_limit
from ..core.schedules import Schedule


class DagSchedule(Schedule):
    """A DAG schedule: gradients handed to ``k`` workers as by ``Leapfrog(k)``; ``stats`` per pass."""

    def __init__(self, k=2, fused=False):
        super().__init__(k, fused)

    def __repr__(self):
        return f"{type(self).__name__}(k={self.k}{', fused=True' if self.fused else ''})"

    def chain(self, plan, controls=None):
        """Enqueue the solve on the main stream of ``plan``, giving each node on as ``plan.node`` does (with a
        fused update by ``controls``, when given)."""
        raise NotImplementedError

    @staticmethod
    def _finish(plan, controls):
        """Every node's g, its adjoint solved, given on: in the reverse order, no products."""
        for v in reversed(plan.order):
            yield from plan.node(v, controls, products=False)


class LevelSets(DagSchedule):
    """Reverse generations by height: round r holds the nodes whose longest path to the output has r
    edges; D rounds."""

    name = "level-sets"  # on the command line: --schedule level-sets

    def chain(self, plan, controls=None):
        levels = heights(plan)
        for r in range(max(levels.values()) + 1):
            for v in reversed(plan.order):
                if levels[v] == r:
                    yield from plan.node(v, controls)
        counters = plan.counters()  # the sequential order's work, in another order
        self.stats = {"rounds": max(levels.values()) + 1, "memory_bytes": 0, "flops": counters["sequential_flops"],
                      "bytes": counters["sequential_bytes"]}


class BlockSchedule(DagSchedule):
    """A schedule on N's blocks laid into one (B, M, M) matrix (``lay_out``; M the sum of the widths of
    the non-input nodes), whose buffers may take ``memory_limit`` bytes: ``memory_needed`` is checked
    before anything is allocated."""

    INSTEAD = "Sequential(), Leapfrog(k) or LevelSets()"
    """What to use instead when the buffers do not fit."""

    def __init__(self, k=2, fused=False, memory_limit=MEMORY_LIMIT):
        memory_limit = check_memory_limit(memory_limit)
        super().__init__(k, fused)
        self.memory_limit = memory_limit

    def memory_needed(self, net, batch):
        """Bytes of the buffers for ``net`` (a ``DagNet`` or its plan) at ``batch``."""
        raise NotImplementedError

    def check_memory(self, net, batch):
        """The bytes ``net`` (a ``DagNet`` or its plan) needs at ``batch``, or a ValueError when they exceed
        ``memory_limit``."""
        return triangular.check_memory(type(self).__name__, self.memory_needed(net, batch), self.memory_limit,
                                       f"depth D={net.depth}, batch B={batch} ({net.dtype})", self.INSTEAD)

    @staticmethod
    def _adjoints(plan, x, e):
        """Leave each solved x_v but the output's (its g, given by ``e``) in ``plan.adjoints``."""
        for v in plan.order:
            if v not in e:
                plan.adjoints[v] = x[v]


class DagJacobi(BlockSchedule):
    """Block Jacobi on every node at once from x = 0: x <- e + N x, N's blocks laid into one (B, M, M)
    matrix, so that a sweep is one batched product and one add (``core.triangular.jacobi``) whatever the nodes or
    block pairs. ``k``, ``fused`` and ``memory_limit`` as for the other schedules. Exact after D sweeps; the
    keyword ``max_sweeps`` caps them (after s < D, the nodes s or more edges from the output are inexact, which
    ``stats["converged"]`` says). Holds N, e and two iterates (``memory_needed``), checked against
    ``memory_limit`` before anything is allocated."""

    name = "dag-jacobi"  # on the command line: --schedule dag-jacobi

    INSTEAD = "Sequential(), Leapfrog(k) or LevelSets(), which hold no block matrix"

    def __init__(self, k=2, fused=False, memory_limit=MEMORY_LIMIT, *, max_sweeps=None):
        max_sweeps = check_cap("max_sweeps", max_sweeps, "D sweeps, exact")
        super().__init__(k, fused, memory_limit)
        self.max_sweeps = max_sweeps

    def __repr__(self):  # max_sweeps changes the step: a graph is kept by the schedule's repr (``core.capture.key``)
        sweeps = "" if self.max_sweeps is None else f"max_sweeps={self.max_sweeps}, "
        name = type(self).__name__
        return f"{name}({sweeps}{super().__repr__().removeprefix(f'{name}(')}"

    def memory_needed(self, net, batch):
        """Bytes of N (B, M, M), e and two iterates (B, M, 1) for ``net`` (a ``DagNet`` or its plan) at
        ``batch``."""
        return stacked_bytes(net, batch, np.dtype(net.dtype).itemsize, matrices=1, vectors=3)

    def chain(self, plan, controls=None):
        needed = self.check_memory(plan, plan.batch)
        sweeps = plan.depth if self.max_sweeps is None else min(self.max_sweeps, plan.depth)
        flops, moved = triangular.jacobi_work(sweeps, plan.batch, sum(plan.n[v] for v in plan.order))
        self.stats = {"sweeps": sweeps, "rounds": sweeps, "converged": sweeps == plan.depth, "memory_bytes": needed,
                      "flops": flops, "bytes": moved * np.dtype(plan.dtype).itemsize}
        plan.backend.launch(plan.main, "jacobi", self._solve, plan, sweeps)
        yield from self._finish(plan, controls)

    def _solve(self, plan, sweeps):
        blocks, e = plan.blocks()
        N, E, rows = lay_out(plan.xp, blocks, e, {v: plan.n[v] for v in plan.order})
        X, _, _ = triangular.jacobi(plan.xp, N, plan.xp.zeros_like(E), plan.xp.zeros_like(E), sweeps, e=E)
        self._adjoints(plan, unstack(X, rows), e)


class DagDoubling(BlockSchedule):
    """Recursive doubling over the DAG's blocks: x <- x + P x, P <- P^2, ceil(log2 D) rounds, P = N at
    first, the blocks laid into one (B, M, M) matrix (M the sum of the node widths), so that a round is
    three calls whatever the block pairs. ``memory_limit``: bytes its matrices and vectors may take;
    ``memory_needed`` is checked before anything is allocated."""

    name = "dag-doubling"  # on the command line: --schedule dag-doubling

    INSTEAD = "Sequential(), Leapfrog(k), LevelSets() or DagJacobi() (about half the memory)"

    def memory_needed(self, net, batch):
        """Bytes of P and P^2, (B, M, M) each, and two iterates, for ``net`` (a ``DagNet`` or its plan) at
        ``batch``."""
        return doubling_bytes(net, batch, np.dtype(net.dtype).itemsize)

    def chain(self, plan, controls=None):
        needed = self.check_memory(plan, plan.batch)
        self.stats = {"rounds": triangular.ceil_log2(plan.depth), "memory_bytes": needed}
        plan.backend.launch(plan.main, "doubling", self._solve, plan)
        yield from self._finish(plan, controls)

    def _solve(self, plan):
        blocks, e = plan.blocks()
        x, flops, moved = doubling_solve(plan.xp, blocks, e, plan.depth, {v: plan.n[v] for v in plan.order})
        self._adjoints(plan, x, e)
        self.stats.update(flops=flops, bytes=moved * np.dtype(plan.dtype).itemsize)


def lay_out(xp, blocks, e, widths):
    """``(N, E, rows)``: ``blocks`` {(u, v): (B, n_u, n_v)} laid into one (B, M, M) matrix N (zero where no
    block is) and ``e`` {v: (n_v, B)} into one (B, M, 1) vector E, the unknowns in the order of ``widths``
    {v: n_v} (M = sum of n_v); ``rows`` {v: slice}: v's rows of either."""
    rows, M = {}, 0
    for v, n in widths.items():
        rows[v], M = slice(M, M + n), M + n
    any_e = next(iter(e.values()))
    B = any_e.shape[1]
    N, E = xp.zeros((B, M, M), dtype=any_e.dtype), xp.zeros((B, M, 1), dtype=any_e.dtype)
    for (u, v), block in blocks.items():
        xp.copyto(N[:, rows[u], rows[v]], block)
    for v, vector in e.items():
        xp.copyto(E[:, rows[v], 0], vector.T)
    return N, E, rows


def unstack(X, rows):
    """{v: x_v (n_v, B)} of a (B, M, 1) vector laid out by ``rows`` (``lay_out``)."""
    return {v: X[:, r, 0].T.copy() for v, r in rows.items()}


def doubling_solve(xp, blocks, e, depth, widths):
    """x = (I - N)^{-1} e = sum_{i < D} N^i e for nilpotent N of index <= D, in ceil(log2 D) rounds.

    ``blocks``: {(u, v): (B, n_u, n_v)}; ``e``: {v: (n_v, B)}; ``widths``: {v: n_v} of every unknown, in
    order. The blocks are laid into one (B, M, M) matrix P (``lay_out``) and x into (B, M, 1), so that
    each round is one batched product for x <- x + P x, an add, and one for P <- P P
    (``core.triangular.neumann_solve``). Returns ``({v: x_v (n_v, B)}, flops, elements moved)``."""
    P, X, rows = lay_out(xp, blocks, e, widths)
    triangular.neumann_solve(xp, P, xp.zeros_like(P), X, xp.zeros_like(X), depth)
    _, flops, moved = triangular.neumann_work(depth, P.shape[0], P.shape[1])
    return unstack(X, rows), flops, moved


def heights(dag):
    """The longest path from each node of ``dag`` (a network or its plan) to the output, in edges (the
    output 0)."""
    height = {}
    for v in reversed(dag.order):
        height[v] = 1 + max((height[c] for c in dag.consumers[v]), default=-1)
    return height


def stacked_bytes(dag, batch, itemsize, matrices, vectors):
    """Bytes of ``matrices`` (B, M, M) and ``vectors`` (B, M, 1) at ``batch``, M the sum of the widths of
    ``dag``'s non-input nodes."""
    M = sum(dag.n[v] for v in dag.order)
    return (matrices * M * M + vectors * M) * batch * itemsize


def doubling_bytes(dag, batch, itemsize):
    """Bytes of P and P^2, (B, M, M) each, and of two iterates (B, M, 1) (``stacked_bytes``)."""
    return stacked_bytes(dag, batch, itemsize, matrices=2, vectors=2)
