"""Naumov's formulation of the backward pass (docs/naumov.md): delta as the solution of a linear system.

Backward propagation solves the upper block-bidiagonal system

    delta^L = g                                  (4)
    delta^l - J_l delta^{l+1} = 0,   l = L-1..2,  J_l = diag(sigma'(z^l)) (w^{l+1})^T

with one (n_l, n_{l+1}) Jacobian J_l per sample, whose solution delta^l = J_l J_{l+1} ... J_{L-1} g
is what (5) computes one layer at a time. Two solvers replace that chain:

``NaumovScan``    direct: recursive doubling (a parallel suffix scan) over the L-1 block rows in
                  ceil(log2(L-1)) rounds, each one batched matrix product over layers and samples.
``NaumovJacobi``  iterative: block Jacobi, delta^l <- J_l delta^{l+1} for every l at once (a sweep).
                  The iteration matrix is nilpotent, so L-2 sweeps are exact from any start; from a
                  warm start (the previous pass's delta) it stops once the relative change is <= tol.

Both give each layer on as ``Leapfrog(k)``'s chain does (``core.driver``): once a layer's delta is in
``plan.delta[l]`` its (6)(7) go to worker ``l mod k`` behind event E_l, and the main stream joins the
workers at the end. The Jacobians are the main stream's last read of every w^l and come before any E_l
(``last_reader``), so with ``fused=True`` each worker may update w^l in place right behind E_l
(docs/design.md §2, third hazard).

Storage: the unknowns are stacked and padded with zeros to the widest layer N = max(n_2..n_L), so that
a round or a sweep is one ``matmul`` of (m, B, N, N) by (m, B, N, N) or (m, B, N, 1) arrays; position
i holds layer l = i + 2. Zero padding is exact: padded rows and columns stay zero in every product. The
rounds, the sweeps, their counters and the memory check are ``core.triangular``'s (the chain's).
The buffers are allocated once per (network, batch size), in ``plan.naumov``, after a memory check.
The solvers read the network through the ``plan.MLPPlan`` of the pass: ``plan.w``, ``plan.sp``, ``plan.delta``.

Each pass leaves counters in ``schedule.stats`` (rounds or sweeps; flops and bytes moved against the
sequential chain (5); memory held). A warm start's sweep count is data dependent: read it after the pass
has run (``net.backprop`` returns then; after ``net.sgd_step`` call ``net.synchronize()`` first).
"""

import numpy as np

from ..core import triangular
from ..core.checks import MEMORY_LIMIT, check_cap, check_flag, check_memory_limit, check_real
from ..core.schedules import Schedule


class NaumovSchedule(Schedule):
    """What the scan and Jacobi share: the memory check, buffers cached in the plan, the hand-off of each
    delta to the workers, ``stats``."""

    kind = None

    def __init__(self, k=2, fused=False, memory_limit=MEMORY_LIMIT):
        super().__init__(k, fused)
        self.memory_limit = check_memory_limit(memory_limit)

    def memory_needed(self, net, batch):
        """Bytes of the extra buffers this schedule holds for ``net`` at batch size ``batch``."""
        return self.nbytes(Layout(net.sizes, batch), np.dtype(net.dtype).itemsize)

    @staticmethod
    def nbytes(layout, itemsize):
        """Bytes of the extra buffers for a ``Layout`` with elements of ``itemsize`` bytes."""
        raise NotImplementedError

    def check_memory(self, net, batch):
        """The bytes of this schedule's buffers for ``net`` (an ``MLP`` or its plan) at ``batch``, or a ValueError
        when they exceed ``memory_limit``."""
        layout = Layout(net.sizes, batch)
        return triangular.check_memory(type(self).__name__, self.nbytes(layout, np.dtype(net.dtype).itemsize),
                                       self.memory_limit, f"sizes of depth L={net.L}, padded width N={layout.N}, "
                                       f"batch B={batch} ({net.dtype})", "Sequential() or Leapfrog(k)")

    def _buffers(self, plan):
        """This schedule's buffers in ``plan``: checked against ``memory_limit``, allocated on first use."""
        self.check_memory(plan, plan.batch)
        layout = Layout(plan.sizes, plan.batch)
        if self.kind not in plan.naumov:
            plan.naumov[self.kind] = self._allocate(plan.backend.xp, layout, plan.dtype)
            plan.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
        return layout, plan.naumov[self.kind]

    def _allocate(self, xp, layout, dtype):
        raise NotImplementedError

    def last_reader(self, plan, unit):
        """The Jacobians read every w^l before any delta is final."""
        return unit

    def _options(self):
        return f"k={self.k}{', fused=True' if self.fused else ''}, memory_limit={self.memory_limit}"

    def graph_refusal(self, backend):
        if backend == "cupy":
            return ("its products are cupy.matmul calls (cuBLAS), which CuPy refuses during stream capture; "
                    "use graph=False, or Sequential() or Leapfrog(k)")
        return None


class NaumovScan(NaumovSchedule):
    """Direct solve by recursive doubling: ceil(log2(L-1)) rounds of batched matrix products.

    Position i starts as the block row of layer i + 2: the matrix J_{i+2}, or the vector g for layer L.
    A round with stride s replaces position i by its product with position i + s, so after it position i
    spans layers i+2 .. i+2s+1; a position whose span reaches layer L holds a vector, delta^{i+2}.
    Matrix positions need ping-pong buffers: 2(L-2)·B·N² elements, plus (L-1)·B·N for the vectors.

    Args:
        k: worker streams for (6)(7), as in ``Leapfrog(k)``.
        fused: fuse the SGD update into (7) during ``sgd_step``, as in ``Leapfrog(k, fused=True)``.
        memory_limit: bytes the buffers may take; a larger need raises a ValueError before allocating.
    """

    name = "naumov-scan"  # on the command line: --schedule naumov-scan

    kind = "scan"

    def __repr__(self):
        return f"NaumovScan({self._options()})"

    @staticmethod
    def nbytes(layout, itemsize):
        return (2 * layout.matrices * layout.B * layout.N**2 + layout.positions * layout.B * layout.N) * itemsize

    def _allocate(self, xp, layout, dtype):
        n, B, N = layout.positions, layout.B, layout.N
        P = tuple(xp.zeros((n - 1, B, N, N), dtype=dtype) for _ in range(2))
        return {"P": P, "V": xp.zeros((n, B, N, 1), dtype=dtype)}

    def chain(self, plan, controls=None):
        """Enqueue (4), the Jacobians, the rounds; give each delta on as its round ends."""
        layout, buffers = self._buffers(plan)
        backend, main, xp = plan.backend, plan.main, plan.backend.xp
        P, V = buffers["P"], buffers["V"]
        plan.error(plan.L)
        backend.launch(main, "naumov.jacobians", _jacobians, xp, plan, P[0], layout.padded)
        yield plan.L  # after the Jacobians: the last read of w^L
        backend.launch(main, "naumov.g", _load_g, xp, plan, V)
        for r, (s, lo, hi, A, A_next) in enumerate(triangular.chain_rounds(layout.positions, *P)):
            backend.launch(main, f"naumov.round[{r}]", triangular.chain_round, xp, A, A_next, V, s, lo, hi)
            for i in range(hi - 1, lo - 1, -1):  # the positions this round turned into vectors, deepest first
                l = i + 2
                backend.launch(main, f"delta[{l}]", _unload, xp, plan.delta[l], V[i], plan.n[l])
                yield l
        self.stats = scan_counters(plan.sizes, plan.batch, np.dtype(plan.dtype).itemsize)
        return self.stats


class NaumovJacobi(NaumovSchedule):
    """Block Jacobi on all layers at once: delta^l <- J_l delta^{l+1} for l = L-1..2 in one batched matmul.

    From zero (``warm_start=False``) it runs exactly L-2 sweeps, after which the iterate is the chain
    J_l (J_{l+1} (... g)) evaluated in the same order, so exact. With ``warm_start=True`` it starts from
    the delta of the previous pass with this plan and stops at the first sweep whose relative change
    max_l ||delta_new^l - delta_old^l|| / ||delta_new^l|| (Frobenius over the batch, per layer, so that
    the small deltas of deep layers count as much as the large ones) is <= ``tol``, and at L-2 sweeps
    at the latest; on a GPU each such test waits for the main stream to read L-1 numbers. A warm start
    helps only where delta moves by less than ``tol`` between passes (docs/naumov.md); ``tol`` bounds the last
    sweep's change, not the error, which the rest of the chain can amplify many times. ``max_sweeps`` caps
    either; ``stats["converged"]`` says that L-2 sweeps ran (exact) or the test was met.
    Buffers: (L-2)·B·N² elements for the Jacobians, 2(L-1)·B·N for two iterates; the change is taken
    in float64, each layer's scaled first (squares of deep deltas underflow): (L-1)·B·N + 3(L-1) float64 scratch.

    Args:
        tol: relative change at which a warm start stops, a number >= 0.
        max_sweeps: None (L-2, exact) or an integer >= 1.
        warm_start: start from the previous pass's delta (True) or from zero (False).
        k: worker streams for (6)(7), as in ``Leapfrog(k)``.
        fused: fuse the SGD update into (7) during ``sgd_step``, as in ``Leapfrog(k, fused=True)``.
        memory_limit: bytes the buffers may take; a larger need raises a ValueError before allocating.
    """

    name = "naumov-jacobi"  # on the command line: --schedule naumov-jacobi

    kind = "jacobi"

    def __init__(self, tol=1e-6, max_sweeps=None, warm_start=False, k=2, fused=False,
                 memory_limit=MEMORY_LIMIT):
        tol = check_real("tol (the relative change where a warm start stops)", tol)
        max_sweeps = check_cap("max_sweeps", max_sweeps, "L-2 sweeps, exact")
        warm_start = check_flag("warm_start", warm_start)
        super().__init__(k, fused, memory_limit)
        self.tol, self.max_sweeps, self.warm_start = tol, max_sweeps, warm_start

    def __repr__(self):
        return (f"NaumovJacobi(tol={self.tol}, max_sweeps={self.max_sweeps}, warm_start={self.warm_start}, "
                f"{self._options()})")

    @staticmethod
    def nbytes(layout, itemsize):
        n, B, N = layout.positions, layout.B, layout.N
        return (layout.matrices * B * N**2 + 2 * n * B * N) * itemsize + (n * B * N + 3 * n) * 8

    def graph_refusal(self, backend):
        if self.warm_start:
            return ("its warm start decides when to stop from a change it reads on the host in the middle of "
                    "the step, which a graph cannot do; use warm_start=False (exact in L-2 sweeps) or graph=False")
        return super().graph_refusal(backend)

    def _allocate(self, xp, layout, dtype):
        n, B, N = layout.positions, layout.B, layout.N
        J = xp.zeros((n - 1, B, N, N), dtype=dtype)
        D = tuple(xp.zeros((n, B, N, 1), dtype=dtype) for _ in range(2))
        diff, sums = xp.zeros((n, B, N, 1), dtype=np.float64), xp.zeros((3, n), dtype=np.float64)
        return {"J": J, "D": D, "diff": diff, "sums": sums, "current": 0}

    def chain(self, plan, controls=None):
        """Enqueue (4), the Jacobians and the sweeps; then give every delta on."""
        _, buffers = self._buffers(plan)
        backend, main, xp = plan.backend, plan.main, plan.backend.xp
        plan.error(plan.L)
        # J's padding is never written, so it stays zero from the allocation.
        backend.launch(main, "naumov.jacobians", _jacobians, xp, plan, buffers["J"], False)
        yield plan.L  # after the Jacobians: the last read of w^L
        backend.launch(main, "naumov.jacobi", self._solve, xp, plan, buffers)
        if not self.warm_start:  # every sweep of the limit runs: counted now (a graph's launches repeat them)
            self._count(plan, self._limit(plan), None)
        yield from range(plan.L - 1, 1, -1)  # a warm start's ``stats`` are counted as its sweeps run

    def _limit(self, plan):
        """The most sweeps a pass of ``plan`` runs: L-2, or ``max_sweeps`` if fewer."""
        return plan.L - 2 if self.max_sweeps is None else min(plan.L - 2, self.max_sweeps)

    def _count(self, plan, sweeps, change):
        """``self.stats`` of a pass of ``plan`` that ran ``sweeps`` sweeps, the last changing the iterate by
        ``change`` (None: not measured)."""
        self.stats = jacobi_counters(plan.sizes, plan.batch, np.dtype(plan.dtype).itemsize, sweeps, self.warm_start)
        self.stats.update(converged=sweeps == plan.L - 2 or (change is not None and change <= self.tol), change=change)

    def _solve(self, xp, plan, buffers):
        """Sweeps on the main stream, then delta^l into ``plan.delta[l]``; a warm start's fill ``self.stats``."""
        n = plan.L - 1
        J, D, current = buffers["J"], buffers["D"], buffers["current"]
        diff, sums = buffers["diff"], buffers["sums"]
        for iterate in D:
            _load_g(xp, plan, iterate)
        if not self.warm_start:
            D[current][: n - 1].fill(0)
        last, sweeps, change = triangular.jacobi(xp, J, D[current], D[1 - current], self._limit(plan),
                                                 scratch=(diff, sums) if self.warm_start else None, tol=self.tol)
        current = buffers["current"] = 0 if last is D[0] else 1
        for i in range(n - 1):
            _unload(xp, plan.delta[i + 2], D[current][i], plan.n[i + 2])
        if self.warm_start:
            self._count(plan, sweeps, change)


# -- the operations the main stream runs -----------------------------------------------------------


def _jacobians(xp, plan, J, clear):
    """J[i] = diag(sigma'(z^l)) (w^{l+1})^T for l = i + 2 = 2..L-1, one (n_l, n_{l+1}) block per sample."""
    if clear:
        J.fill(0)
    for l in range(2, plan.L):
        xp.multiply(plan.sp[l].T[:, :, None], plan.w[l + 1].T, out=J[l - 2, :, : plan.n[l], : plan.n[l + 1]])


def _load_g(xp, plan, V):
    """The last block row: g = delta^L, written by (4), into position L-2 (padding stays zero)."""
    L = plan.L
    xp.copyto(V[L - 2, :, : plan.n[L], 0], plan.delta[L].T)


def _unload(xp, delta, v, rows):
    """delta^l (n_l, B) from its padded stacked column ``v`` (B, N, 1)."""
    xp.copyto(delta, v[:, :rows, 0].T)


# -- layout and counters ---------------------------------------------------------------------------


class Layout:
    """The stacked system of ``sizes`` at batch ``B``: L-1 positions (layers 2..L), L-2 Jacobians, width N."""

    def __init__(self, sizes, B):
        hidden = sizes[1:]
        self.L, self.B = len(sizes), B
        self.positions = self.L - 1
        self.matrices = self.L - 2
        self.N = max(hidden)
        self.padded = min(hidden) != self.N


def sequential_counters(sizes, B, itemsize):
    """Flops and bytes of the chain (5) for l = L-1..2: a matrix-vector product and a Hadamard product."""
    n = dict(enumerate(sizes, start=1))
    flops = moved = 0
    for l in range(2, len(sizes)):
        flops += (2 * n[l + 1] + 1) * n[l] * B
        moved += n[l + 1] * n[l] + n[l + 1] * B + n[l] * B + 3 * n[l] * B  # w, delta^{l+1}, delta^l; then (.)*sp
    return {"flops": flops, "bytes": moved * itemsize}


def _jacobian_counters(layout, sizes, itemsize, clear):
    """Building J_l for every layer: one multiply per element; reads w and sigma', writes J (and clears)."""
    n = dict(enumerate(sizes, start=1))
    flops = moved = 0
    for l in range(2, layout.L):
        flops += layout.B * n[l] * n[l + 1]
        moved += n[l] * n[l + 1] + n[l] * layout.B + layout.B * n[l] * n[l + 1]
    if clear:
        moved += layout.matrices * layout.B * layout.N**2
    moved += 2 * (layout.positions - 1) * layout.B * layout.N  # g in, every delta^l out
    return flops, moved * itemsize


def _with_sequential(counters, sizes, B, itemsize, memory):
    base = sequential_counters(sizes, B, itemsize)
    counters.update(
        sequential_flops=base["flops"], extra_flops=counters["flops"] - base["flops"],
        sequential_bytes=base["bytes"], extra_bytes=counters["bytes"] - base["bytes"], memory_bytes=memory,
    )
    return counters


def scan_counters(sizes, B, itemsize):
    """What one ``NaumovScan`` pass does for ``sizes`` at batch ``B``: rounds, flops, bytes moved
    (each operand read once, each result written once), memory held; and the same against (5)."""
    layout, N = Layout(sizes, B), max(sizes[1:])
    flops, moved = _jacobian_counters(layout, sizes, itemsize, layout.padded)
    rounds, round_flops, elements = triangular.chain_work(layout.positions, B, N)
    flops, moved = flops + round_flops, moved + elements * itemsize
    memory = NaumovScan.nbytes(layout, itemsize)
    return _with_sequential({"rounds": rounds, "flops": flops, "bytes": moved}, sizes, B, itemsize, memory)


def jacobi_counters(sizes, B, itemsize, sweeps, warm_start):
    """What a ``NaumovJacobi`` pass of ``sweeps`` sweeps does (as ``scan_counters``), the warm start's
    change test included."""
    layout, N = Layout(sizes, B), max(sizes[1:])
    m, n = layout.matrices, layout.positions
    flops, moved = _jacobian_counters(layout, sizes, itemsize, False)
    sweep_flops, elements = triangular.jacobi_work(sweeps, B, N, chain=m, change=n * B * N if warm_start else 0)
    flops, moved = flops + sweep_flops, moved + elements * itemsize
    memory = NaumovJacobi.nbytes(layout, itemsize)
    return _with_sequential({"sweeps": sweeps, "flops": flops, "bytes": moved}, sizes, B, itemsize, memory)
