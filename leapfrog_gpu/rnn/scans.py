"""The scan schedules of the recurrent network: the time recursion of delta solved by scans in log-depth.

Per layer l the recursion over time is linear once (w^{l+1})^T delta^{l+1} is known:

    delta^{l,t} = c^{l,t} + A^{l,t} delta^{l,t+1},   c^{l,t} = sigma'(z^{l,t}) * (w^{l+1})^T delta^{l+1,t},
    A^{l,t} = diag(sigma'(z^{l,t})) (u^l)^T   (one (n_l, n_l) matrix per sample),   delta^{l,tau+1} = 0.

``TimeScan``   per layer, a suffix scan over t of the pairs (A_t, c_t) (``core.triangular``: recursive doubling,
               ceil(log2 tau) rounds, or cyclic reduction, 2·ceil(log2 tau) - 1 rounds and O(tau) work;
               ``scan``). As in BPPSA, the first round keeps A_t factored as diag(sigma') times the shared
               (u^l)^T: its vector half is one product of (u^l)^T and no (n, n) matrix per sample is
               stored before the products A_t A_{t+1}. Rounds per layer: c^l, then the scan's.
               A gated layer (``cells``: a GRU's h, an LSTM's (h, c)) scans its state's adjoint by its state
               Jacobians J_t^T, built whole ((S, S) per sample, S = n_l or 2 n_l), and then computes every
               step's gate deltas at once, in the same rounds (``state_scan``).
``NaumovRNN``  Naumov's nested solve. Ordered layer-first, delta^l = T_l delta^{l+1} with the layer
               operator T_l = (I - N_l)^{-1} D_l, N_l the shift by A^{l,t} and D_l = diag_t(diag(sigma')
               (w^{l+1})^T); T_l is upper block-triangular in time and dense. One round builds every N_l,
               D_l and c^{L-1}; ceil(log2 tau) rounds form every T_l (and delta^{L-1}) at once by doubling,
               X <- X + P X, P <- P P (so X = (I + N^{2^r}) ... (I + N) D = (I - N)^{-1} D, since N^tau = 0);
               ceil(log2 K) rounds of recursive doubling over layers (as ``NaumovScan`` over the MLP's
               layers) then give every delta^l. Rounds 1 + ceil(log2 tau) + ceil(log2 K): additive, since each
               product of two dense-in-time blocks is one batched product here. Memory is the limit: the
               blocks are (tau·N)^2 per sample and layer, checked against ``memory_limit`` before anything is
               allocated.

Both hand each layer on (to the workers, as ``schedules`` does) once its delta is final, deepest first.
Their buffers are allocated once per pass, in ``p.cache``, stored (time, batch, n, ...) so that a round is
one batched ``matmul``.
"""

import numpy as np

from ..core import triangular
from ..core.checks import MEMORY_LIMIT, check_memory_limit, widths
from ..core.triangular import ceil_log2, check_scan, resolve_scan, round_sizes, scan_rounds
from . import state_scan
from .cells import GATED
from .schedules import RNNSchedule, bptt_counters, check_cell


class ScanSchedule(RNNSchedule):
    """The memory check and the buffers the scans share."""

    kind = None

    def __init__(self, k=2, fused=False, memory_limit=MEMORY_LIMIT):
        super().__init__(k, fused)
        self.memory_limit = check_memory_limit(memory_limit)

    def __repr__(self):
        options = [f"k={self.k}"] + (["fused=True"] if self.fused else [])
        return f"{type(self).__name__}({', '.join(options)}, memory_limit={self.memory_limit})"

    def memory_needed(self, sizes, tau, B, itemsize, *, cell="elman"):
        """Bytes of the extra buffers this schedule holds for ``sizes`` of ``cell`` at ``tau`` and ``B``."""
        return self.elements(sizes, tau, B, cell=cell) * itemsize

    @staticmethod
    def elements(sizes, tau, B, cell="elman"):
        raise NotImplementedError

    def check(self, sizes, tau, B, dtype, *, cell="elman"):
        """Raise a ValueError naming the bytes needed when the buffers for ``sizes`` of ``cell`` at ``tau`` and
        ``B`` would exceed ``memory_limit``: called before anything of the pass is allocated."""
        others = ", ".join(name for name in ("BPTT()", "Leapfrog(k)", "Wavefront()", "TimeScan()")
                           if not name.startswith(type(self).__name__))
        needed = self.memory_needed(sizes, tau, B, np.dtype(dtype).itemsize, cell=cell)
        gated = "" if cell == "elman" else f" ({cell.upper()})"
        what = f"sizes {widths(list(sizes))}{gated} at tau={tau}, B={B} ({dtype})"
        triangular.check_memory(type(self).__name__, needed, self.memory_limit, what, others)

    def _buffers(self, p):
        """This schedule's flat buffers in ``p``: checked against ``memory_limit``, allocated on first use."""
        self.check(p.net.sizes, p.tau, p.batch, p.net.dtype)
        if self.kind not in p.cache:
            sizes = self._sizes(p.net.sizes, p.tau, p.batch)
            p.cache[self.kind] = [p.xp.zeros(size, dtype=p.net.dtype) for size in sizes]
            p.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
        return p.cache[self.kind]

    def counters(self, sizes, tau, B, itemsize, backend="numpy", *, cell="elman"):
        counters = bptt_counters(sizes, tau, B, itemsize, cell=cell)
        flops, moved = self.work(sizes, tau, B, backend, cell=cell)
        counters.update(flops=flops, bytes=moved * itemsize,
                        memory_bytes=self.memory_needed(sizes, tau, B, itemsize, cell=cell))
        return counters


class TimeScan(ScanSchedule):
    """Per layer, c^l from delta^{l+1}, then a suffix scan over time (see the module docstring).

    Buffers (reused by every layer, sized for the widest n): the matrices A_t in ping-pong (doubling) or
    with their scratch (reduction), 2·tau·B·n^2 elements, and the vectors c_t with their products, 2·tau·B·n.

    Args:
        k: worker streams for the gradients, as in ``Leapfrog(k)`` (0: the main stream).
        fused: fuse the SGD update behind the gradients during ``sgd_step``.
        memory_limit: bytes the buffers may take; a larger need raises a ValueError before allocating.
        scan: ``"doubling"``, ``"reduction"`` or ``"auto"`` (see the module docstring; ``stats["scan"]``
            says which ran).
    """

    name = "timescan"  # on the command line: --schedule timescan

    kind = "time-scan"

    def __init__(self, k=2, fused=False, memory_limit=MEMORY_LIMIT, scan="auto"):
        super().__init__(k, fused, memory_limit)
        self.scan = check_scan(scan)

    def __repr__(self):
        return f"{super().__repr__()[:-1]}, scan={self.scan!r})"

    @staticmethod
    def _sizes(sizes, tau, B):
        n = max(sizes[1:-1])
        matrices = tau * B * n * n if tau > 2 else 0
        return [matrices, matrices, tau * B * n, tau * B * n]

    @staticmethod
    def elements(sizes, tau, B, cell="elman"):
        if check_cell(cell) != "elman":
            return state_scan.elements(sizes, tau, B, cell)
        return sum(TimeScan._sizes(sizes, tau, B))

    @staticmethod
    def rounds_formula(K, tau, scan="doubling"):
        return K * (1 + scan_rounds(scan, tau))

    def chain(self, p):
        scan = resolve_scan(self.scan, p.backend.name)
        if p.net.cell != "elman":
            self.check(p.net.sizes, p.tau, p.batch, p.net.dtype, cell=p.net.cell)
            yield from state_scan.chain(p, scan)
            return
        buffers, launch = self._buffers(p), p.backend.launch
        p.delta_output()
        yield p.L
        for l in range(p.L - 1, 1, -1):
            launch(p.main, f"c[{l}]", self._load, p, l, buffers)
            p.rounds += 1
            P, P_next, C, Q = buffers
            for kind, s, A, A_next in triangular.suffix_rounds(scan, p.tau, P, P_next):  # "scan", "reduce", ...
                launch(p.main, f"{kind}[{l}, {s}]", getattr(self, f"_{kind}"), p, l, s, (A, A_next, C, Q))
                p.rounds += 1
            launch(p.main, f"delta[{l}]", self._unload, p, l, buffers)
            yield l

    def counters(self, sizes, tau, B, itemsize, backend="numpy", *, cell="elman"):
        counters = super().counters(sizes, tau, B, itemsize, backend, cell=cell)
        return {**counters, "scan": resolve_scan(self.scan, backend)}

    @staticmethod
    def _views(p, l, buffers):
        """The buffers as layer l's (tau, B, n, n) matrices (None for tau <= 2) and (tau, B, n, 1) vectors."""
        n, tau, B = p.net.n[l], p.tau, p.batch
        P, P_next, C, Q = buffers
        matrices = [M[: tau * B * n * n].reshape(tau, B, n, n) if M.size else None for M in (P, P_next)]
        return (*matrices, C[: tau * B * n].reshape(tau, B, n, 1), Q[: tau * B * n].reshape(tau, B, n, 1))

    @staticmethod
    def _load(p, l, buffers):
        """c^{l,t} = sigma'(z^{l,t}) * (w^{l+1})^T delta^{l+1,t} for every t, into the scan's vectors."""
        p.from_above(l)
        p.xp.multiply(p.delta[l], p.sp[l], out=p.delta[l])
        _, _, C, _ = TimeScan._views(p, l, buffers)
        p.xp.copyto(C[..., 0], p.delta[l].transpose(1, 2, 0))

    @staticmethod
    def _scan(p, l, s, buffers):
        """The round with stride s: c_t += A_t c_{t+s} for t + s < tau (0-based), A_t <- A_t A_{t+s} into the
        other matrix buffer where a later round needs it."""
        xp, tau, n = p.xp, p.tau, p.net.n[l]
        P, P_next, C, Q = TimeScan._views(p, l, buffers)
        m = tau - s
        if s == 1:  # A_t = diag(sigma'_t) (u^l)^T, factored: (u^l)^T c_{t+1} for every t is one product
            u = p.u[l]
            xp.matmul(C[1:].reshape(-1, n), u, out=Q[:m].reshape(-1, n))
            sp = p.sp[l].transpose(1, 2, 0)  # (tau, B, n)
            xp.multiply(Q[:m, ..., 0], sp[:m], out=Q[:m, ..., 0])
            if 2 < tau:  # A_t A_{t+1} = (diag(sigma'_t) (u^l)^T diag(sigma'_{t+1})) (u^l)^T, for t + 2 < tau
                r = tau - 2
                xp.multiply(sp[:r, :, :, None], u.T, out=P[:r])
                xp.multiply(P[:r], sp[1:r + 1, :, None, :], out=P[:r])
                xp.matmul(P[:r], u.T, out=P_next[:r])
            xp.add(C[:m], Q[:m], out=C[:m])
        else:
            triangular.scan_round(xp, xp.matmul, P, P_next, C, Q, s)

    @staticmethod
    def _reduce(p, l, s, buffers):
        """Level s of cyclic reduction; at s = 1 with A_t = diag(sigma'_t) (u^l)^T factored: c_{2i} +=
        sigma'_{2i} * ((u^l)^T c_{2i+1}), and A_{2i} A_{2i+1} built from sigma' and u into P at 2i."""
        xp, tau = p.xp, p.tau
        P, P_next, C, Q = TimeScan._views(p, l, buffers)
        if s > 1:
            triangular.reduce_round(xp, xp.matmul, P, P_next, C, Q, s)
            return
        u, sp = p.u[l], p.sp[l].transpose(1, 2, 0)  # sigma' as (tau, B, n)
        m = len(range(1, tau, 2))
        xp.matmul(C[1::2][:m, ..., 0], u, out=Q[:m, ..., 0])
        xp.multiply(Q[:m, ..., 0], sp[0::2][:m], out=Q[:m, ..., 0])
        xp.add(C[0::2][:m], Q[:m], out=C[0::2][:m])
        kept = len(range(2, tau, 2))
        if kept:
            xp.multiply(sp[0::2][:kept, :, :, None], u.T, out=P_next[:kept])
            xp.multiply(P_next[:kept], sp[1::2][:kept, :, None, :], out=P_next[:kept])
            xp.matmul(P_next[:kept], u.T, out=P[0::2][:kept])

    @staticmethod
    def _substitute(p, l, s, buffers):
        """Level s of the way down; at s = 1 factored: delta_{2i+1} = c_{2i+1} + sigma'_{2i+1} * ((u^l)^T
        delta_{2i+2})."""
        xp, tau = p.xp, p.tau
        P, _, C, Q = TimeScan._views(p, l, buffers)
        if s > 1:
            triangular.substitute_round(xp, xp.matmul, P, C, Q, s)
            return
        m = len(range(2, tau, 2))
        xp.matmul(C[2::2][:m, ..., 0], p.u[l], out=Q[:m, ..., 0])
        xp.multiply(Q[:m, ..., 0], p.sp[l].transpose(1, 2, 0)[1::2][:m], out=Q[:m, ..., 0])
        xp.add(C[1::2][:m], Q[:m], out=C[1::2][:m])

    @staticmethod
    def _unload(p, l, buffers):
        _, _, C, _ = TimeScan._views(p, l, buffers)
        p.xp.copyto(p.delta[l], C[..., 0].transpose(2, 0, 1))

    def work(self, sizes, tau, B, backend="numpy", *, cell="elman"):
        """Flops and elements moved: c^l as in BPTT, then per round its vector and matrix products, the first
        round's factored (its matrix products built from sigma' and u). Reduction also multiplies its
        factored vectors by sigma' and copies each product A A back into place. A gated ``cell``'s:
        ``state_scan.work``."""
        scan = resolve_scan(self.scan, backend)
        if check_cell(cell) != "elman":
            return state_scan.work(sizes, tau, B, scan, cell)
        copy = int(scan == "reduction")
        flops = moved = 0
        for l in range(2, len(sizes)):
            n, above = sizes[l - 1], sizes[l]
            flops += 2 * n * above * tau * B + n * tau * B
            moved += n * above + (above + 2 * n) * tau * B
            for s, m, kept in round_sizes(scan, tau):
                if s == 1:
                    flops += 2 * n * n * m * B + (1 + copy) * m * B * n + kept * B * (2 * n * n + 2 * n ** 3)
                    moved += n * n + (3 + copy) * m * B * n + 2 * kept * B * (n * n + n)
                else:
                    round_flops, elements = triangular.scan_round_work(m, kept, B, n, copy=bool(copy))
                    flops, moved = flops + round_flops, moved + elements
        return flops, moved


class NaumovRNN(ScanSchedule):
    """Naumov's nested solve: time scans of every layer at once, then recursive doubling over layers.

    Position i holds layer l = i + 2, padded to the widest recurrent width N, time-major: element
    t·N + j of a position's vector is delta^{l,t+1}_j. Buffers: the shifts N_l and their powers in
    ping-pong, 2·K·B·(tau·N)^2 elements; the layer operators T_l with their products, 2·(K-1)·B·(tau·N)^2;
    the vectors, 2·K·B·tau·N. The check against ``memory_limit`` comes first, before any allocation.

    Args:
        k: worker streams for the gradients, as in ``Leapfrog(k)`` (0: the main stream).
        fused: fuse the SGD update behind the gradients during ``sgd_step``.
        memory_limit: bytes the buffers may take; a larger need raises a ValueError naming the bytes needed.
    """

    name = "naumov-rnn"  # on the command line: --schedule naumov-rnn

    kind = "naumov"

    @staticmethod
    def _sizes(sizes, tau, B):
        K, M = len(sizes) - 2, tau * max(sizes[1:-1])
        return [K * B * M * M, K * B * M * M, (K - 1) * B * M * M, (K - 1) * B * M * M, K * B * M, K * B * M]

    @staticmethod
    def elements(sizes, tau, B, cell="elman"):
        NaumovRNN.refuse_gated(cell)
        return sum(NaumovRNN._sizes(sizes, tau, B))

    @staticmethod
    def refuse_gated(cell):
        """A ValueError for a gated ``cell`` (``RNN`` raises it too): this schedule has no layer operators for it."""
        if check_cell(cell) != "elman":
            raise ValueError(f"NaumovRNN builds the Elman cell's layer operators from diag(sigma') (u^l)^T and has "
                             f"none for {GATED[cell]} cell's state Jacobians; run BPTT(), Leapfrog(k), "
                             "Wavefront() or TimeScan()")

    @staticmethod
    def rounds_formula(K, tau):
        return 1 + ceil_log2(tau) + ceil_log2(K) if K else 0

    def chain(self, p):
        K, tau, B, L = p.L - 2, p.tau, p.batch, p.L
        M = tau * max(p.net.sizes[1:-1])
        flat_buffers = self._buffers(p)
        P, P_next = (b.reshape(K, B, M, M) for b in flat_buffers[:2])
        X, X_next = (b.reshape(K - 1, B, M, M) if K > 1 else None for b in flat_buffers[2:4])
        V, V_next = (b.reshape(K, B, M, 1) for b in flat_buffers[4:])
        p.delta_output()
        yield L
        launch = p.backend.launch
        launch(p.main, "naumov: N, D, c", self._build, p, P, X, V)
        p.rounds += 1
        for r, P_r, P_next_r, square in triangular.neumann_rounds(tau, P, P_next):
            launch(p.main, f"naumov: time {r}", self._time_round, p, P_r, P_next_r, X, X_next, V, V_next, square)
            p.rounds += 1
        launch(p.main, f"delta[{L - 1}]", self._unload, p, V, K - 1)
        yield L - 1
        for s, lo, hi, A, A_next in triangular.chain_rounds(K, X, X_next):
            launch(p.main, f"naumov: layers {s}", triangular.chain_round, p.xp, A, A_next, V, s, lo, hi)
            p.rounds += 1
            for i in range(hi - 1, lo - 1, -1):
                launch(p.main, f"delta[{i + 2}]", self._unload, p, V, i)
                yield i + 2

    @staticmethod
    def _build(p, P, X, V):
        """Every shift N_l (blocks diag(sigma'^{l,t}) (u^l)^T at (t, t+1)), every D_l (blocks diag(sigma'^{l,t})
        (w^{l+1})^T at (t, t)) and c^{L-1} = sigma'(z^{L-1}) * (w^L)^T delta^L."""
        xp, net, tau, B = p.xp, p.net, p.tau, p.batch
        K, N = p.L - 2, P.shape[-1] // tau
        P.fill(0)
        if X is not None:
            X.fill(0)
        for i, l in enumerate(net.hidden):
            n = net.n[l]
            blocks = P[i].reshape(B, tau, N, tau, N)
            for t in range(tau - 1):
                xp.multiply(p.sp[l][:, t].T[:, :, None], p.u[l].T, out=blocks[:, t, :n, t + 1, :n])
            if i < K - 1:
                above = net.n[l + 1]
                blocks = X[i].reshape(B, tau, N, tau, N)
                for t in range(tau):
                    xp.multiply(p.sp[l][:, t].T[:, :, None], p.w[l + 1].T, out=blocks[:, t, :n, t, :above])
        l = p.L - 1
        p.from_above(l)
        xp.multiply(p.delta[l], p.sp[l], out=p.delta[l])
        V[K - 1].fill(0)
        xp.copyto(V[K - 1].reshape(B, tau, N)[:, :, : net.n[l]], p.delta[l].transpose(2, 1, 0))

    @staticmethod
    def _time_round(p, P, P_next, X, X_next, V, V_next, more):
        """A round of the Neumann doubling: X <- X + P X for every layer operator, v <- v + P v for delta^{L-1},
        and P_next = P P if ``more``."""
        xp, K = p.xp, p.L - 2
        if X is not None:
            triangular.accumulate(xp, P[: K - 1], X, X_next)
        triangular.accumulate(xp, P[K - 1], V[K - 1], V_next[K - 1])
        if more:
            xp.matmul(P, P, out=P_next)

    @staticmethod
    def _unload(p, V, i):
        l, tau, B = i + 2, p.tau, p.batch
        N = V.shape[2] // tau
        p.xp.copyto(p.delta[l], V[i].reshape(B, tau, N)[:, :, : p.net.n[l]].transpose(2, 1, 0))

    def work(self, sizes, tau, B, backend="numpy", *, cell="elman"):
        """Flops and elements moved: building N, D, c; the time rounds; the rounds over layers (the Elman
        ``cell``'s alone)."""
        self.refuse_gated(cell)
        K, M = len(sizes) - 2, tau * max(sizes[1:-1])
        built = 2 * K * B * M * M  # the fills and the blocks written into them
        _, time_flops, time_moved = triangular.neumann_work(tau, B, M, columns=(M,) * (K - 1) + (1,), squares=K)
        _, layer_flops, layer_moved = triangular.chain_work(K, B, M)
        return built + time_flops + layer_flops, built + time_moved + layer_moved

