"""Block triangular solvers over stacked blocks, written once against ``xp`` (numpy or cupy) for the three
networks: every round is a few batched calls on stacked operands, whatever the number of blocks.

Three systems, the blocks of a batch of B samples stacked along the leading axes:

``chain``    x_i = A_i x_{i+1} (i < n-1), x_{n-1} = g: the upper block-bidiagonal system of Naumov's backward
             pass. Recursive doubling (``chain_rounds``, ``chain_round``): ceil(log2 n) rounds.
``scan``     x_t = c_t + A_t x_{t+1} (0-based t < tau, x_tau = 0): the suffix scan of a linear recurrence,
             by recursive doubling (``scan_round``: ceil(log2 tau) rounds, about tau·ceil(log2 tau) products
             A A: the fewest rounds, what a GPU's launch latency rewards) or cyclic reduction
             (``reduce_round`` up, ``substitute_round`` down: 2·ceil(log2 tau) - 1 rounds, fewer than tau
             products A A: the least work, what a CPU rewards); ``suffix_rounds``, ``suffix_scan``.
``neumann``  x = (I - N)^{-1} e = (I + N)(I + N^2)(I + N^4)... e for N nilpotent of index <= D:
             ceil(log2 D) rounds, each x <- x + P x and P <- P P (``neumann_round``, ``neumann_solve``).

Block Jacobi (``jacobi``) sweeps x <- e + N x (``jacobi_sweep``) or the chain's x_i <- A_i x_{i+1}
(``chain_sweep``): exact after D (n - 1) sweeps from zero, or stopped earlier by the relative change.

Each algorithm has its counters (``chain_work``, ``scan_round_work``, ``neumann_work``, ``jacobi_work``:
flops, and elements moved with each operand read once and each result written once) and the buffers it
needs are checked against a ``memory_limit`` before anything is allocated (``check_memory``).
"""

import math

import numpy as np

from ..backends import to_host
from .checks import shown


def ceil_log2(m):
    """ceil(log2 m) for m >= 1: the rounds of recursive doubling over m elements."""
    return (m - 1).bit_length()


# -- the memory check ----------------------------------------------------------------------------------


class MemoryLimitError(ValueError):
    """The buffers of ``who`` (a schedule, or a forward solver where ``solver``) need ``needed`` bytes for ``what``,
    over its ``limit``: what ``check_memory`` raises, its message in the library's words."""

    def __init__(self, who, needed, limit, what, solver, instead):
        self.who, self.needed, self.limit, self.what, self.solver = who, needed, limit, what, solver
        super().__init__(f"{self.need(who)}, over memory_limit={in_words(limit)}; {instead}")

    def need(self, who):
        """The message's first words, "``who`` needs N bytes for ``what``", ``who`` as a caller names it."""
        return f"{who} needs {in_words(self.needed)} for {self.what}"


def check_memory(who, needed, limit, what, instead, also=(), solver=False):
    """``needed`` (bytes of the buffers of ``who``, for ``what``), or a ``MemoryLimitError``, raised before anything
    is allocated, that says the need, the limit and what to use instead (``also``: other options to pass)."""
    if needed <= limit:
        return needed
    options = "".join(f", {option}," for option in also)
    raise MemoryLimitError(who, needed, limit, what, solver, f"pass a larger memory_limit{options} or use {instead}")


def in_words(nbytes):
    """``nbytes`` in words: "N bytes", with KiB, MiB or GiB in parentheses from 1 KiB."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    scaled, unit = nbytes / 1024, "KiB"
    for larger in ("MiB", "GiB"):
        if scaled >= 1024:
            scaled, unit = scaled / 1024, larger
    return f"{nbytes} bytes ({scaled:.1f} {unit})"


# -- the counters ----------------------------------------------------------------------------------------


def matmul_work(count, rows, inner, cols):
    """Flops and elements of ``count`` products (rows, inner) @ (inner, cols): operands read, result written."""
    return 2 * count * rows * inner * cols, count * (rows * inner + inner * cols + rows * cols)


def add_work(count, n):
    """Flops and elements of ``count`` adds of n elements into an operand already counted."""
    return count * n, count * n


def _sum(*works):
    return tuple(map(sum, zip(*works)))


# -- the chain: x_i = A_i x_{i+1}, x_{n-1} = g, by recursive doubling ----------------------------------------


def chain_rounds(n, A=None, A_next=None):
    """Yield ``(s, lo, hi, A, A_next)`` per round of recursive doubling over ``n`` block rows, the matrices in
    ping-pong (each round's fixed as it is yielded). Before the round with stride s, positions >= n - s hold
    vectors; the round turns [lo, hi) into vectors and [0, lo) into longer products (``chain_round``)."""
    s = 1
    while s < n:
        yield s, max(0, n - 2 * s), n - s, A, A_next
        A, A_next = A_next, A
        s *= 2


def chain_round(xp, A, A_next, x, s, lo, hi):
    """The round with stride s: A (n-1, B, N, N), x (n, B, N, 1); x_i <- A_i x_{i+s} for i in [lo, hi),
    A_i A_{i+s} into ``A_next`` for i < lo."""
    if lo > 0:
        xp.matmul(A[:lo], A[s : lo + s], out=A_next[:lo])
    xp.matmul(A[lo:hi], x[lo + s : hi + s], out=x[lo:hi])


def chain_work(n, B, N):
    """``(rounds, flops, elements)`` of recursive doubling over ``n`` block rows of width N at batch B."""
    rounds, work = 0, (0, 0)
    for _, lo, hi, _, _ in chain_rounds(n):
        rounds += 1
        work = _sum(work, matmul_work(lo * B, N, N, N), matmul_work((hi - lo) * B, N, N, 1))
    return (rounds, *work)


# -- the suffix scan: x_t = c_t + A_t x_{t+1}, x_tau = 0 -------------------------------------------------------


SCANS = ("auto", "doubling", "reduction")
"""The algorithms of the suffix scan (``resolve_scan`` says which ``auto`` runs)."""


def check_scan(scan):
    """``scan`` if it names one of ``SCANS``, else a TypeError (not a string) or ValueError that names them."""
    if not isinstance(scan, str):
        raise TypeError(f"scan must be one of {', '.join(map(repr, SCANS))}; got {shown(scan)}")
    if scan not in SCANS:
        raise ValueError(f"scan must be one of {', '.join(map(repr, SCANS))}; got {shown(scan)}")
    return scan


def resolve_scan(scan, backend, diagonal=False):
    """The algorithm ``scan`` runs on ``backend`` (its name): ``auto`` is ``reduction`` for matrices on
    ``"numpy"``, else ``doubling`` (a scan of ``diagonal`` A_t is elementwise: its work is cheap anywhere,
    and its rounds, strided in reduction, are what it costs)."""
    if scan != "auto":
        return scan
    return "reduction" if backend == "numpy" and not diagonal else "doubling"


def scan_rounds(scan, tau):
    """Dependent rounds of the suffix scan over ``tau`` steps by ``scan`` (resolved)."""
    return ceil_log2(tau) if scan == "doubling" else max(2 * ceil_log2(tau) - 1, 0)


def suffix_rounds(scan, tau, A=None, A_next=None):
    """Yield ``(kind, s, A, A_next)`` per round of the scan over ``tau`` steps by ``scan`` (resolved), in
    order: ``"scan"`` (doubling, the matrices in ping-pong), ``"reduce"`` up the strides s = 1, 2, 4, ... < tau,
    then ``"substitute"`` down those with 2s < tau (reduction, ``A_next`` its scratch)."""
    strides = [1 << i for i in range(ceil_log2(tau))] if tau > 1 else []
    if scan == "doubling":
        for s in strides:
            yield "scan", s, A, A_next
            A, A_next = A_next, A
        return
    for s in strides:
        yield "reduce", s, A, A_next
    for s in reversed(strides):
        if 2 * s < tau:
            yield "substitute", s, A, A_next


def round_sizes(scan, tau):
    """``(s, m, kept)`` of each round of the scan over ``tau`` steps by ``scan`` (resolved), in order: its
    stride s, its m vector products A x + c, and its ``kept`` products A A (none on reduction's way down)."""
    sizes = []
    for kind, s, _, _ in suffix_rounds(scan, tau):
        if kind == "scan":
            sizes.append((s, tau - s, max(tau - 2 * s, 0)))
        elif kind == "reduce":
            sizes.append((s, len(range(s, tau, 2 * s)), len(range(2 * s, tau, 2 * s))))
        else:
            sizes.append((s, len(range(2 * s, tau, 2 * s)), 0))
    return sizes


def scan_round_work(m, kept, B, n, diagonal=False, copy=False):
    """Flops and elements of a round of ``m`` products A x + c and ``kept`` products A A, of matrices (B, n, n)
    or ``diagonal`` ones (B, n); ``copy``: each A A copied back into place (cyclic reduction)."""
    if diagonal:  # A x + c: a product and an add of n elements; A A: a product
        return 2 * m * B * n + kept * B * n, 4 * m * B * n + 3 * kept * B * n
    return _sum(matmul_work(m * B, n, n, 1), add_work(m * B, n), matmul_work(kept * B, n, n, n),
                (0, int(copy) * kept * B * n * n))


def scan_round(xp, product, A, A_next, c, q, s):
    """The round with stride s of the suffix scan x_t = c_t + A_t x_{t+1} (0-based t < tau, x_tau = 0), in
    place: c_t += A_t c_{t+s} for t + s < tau, and A_t A_{t+s} into ``A_next`` for t + 2s < tau (what a
    later round reads), so that afterwards x_t = c_t + A_t x_{t+2s}. Rounds s = 1, 2, 4, ... < tau, the
    matrices in ping-pong, leave x in c. ``product`` is ``xp.matmul`` for matrices A_t (tau, B, n, n) and
    vectors (tau, B, n, 1), ``xp.multiply`` for diagonals (tau, B, n) and vectors (tau, B, n); ``q`` is
    scratch of c's shape."""
    tau = len(c)
    m = tau - s
    product(A[:m], c[s:], out=q[:m])
    if 2 * s < tau:
        r = tau - 2 * s
        product(A[:r], A[s:s + r], out=A_next[:r])
    xp.add(c[:m], q[:m], out=c[:m])


def reduce_round(xp, product, A, A_next, c, q, s):
    """Level s of cyclic reduction on x_t = c_t + A_t x_{t+1} (0-based t < tau, x_tau = 0), in place: for
    every pair (2is, (2i+1)s) below tau, c_{2is} += A_{2is} c_{(2i+1)s}, and A_{2is} <- A_{2is} A_{(2i+1)s}
    (by way of ``A_next``) where a later level reads it (2is + 2s < tau). ``product``, ``q``: as
    ``scan_round``'s."""
    tau = len(c)
    even, odd = slice(0, None, 2 * s), slice(s, None, 2 * s)
    m = len(range(s, tau, 2 * s))
    product(A[even][:m], c[odd][:m], out=q[:m])
    xp.add(c[even][:m], q[:m], out=c[even][:m])
    kept = len(range(2 * s, tau, 2 * s))
    if kept:
        product(A[even][:kept], A[odd][:kept], out=A_next[:kept])
        xp.copyto(A[even][:kept], A_next[:kept])


def substitute_round(xp, product, A, c, q, s):
    """Level s of cyclic reduction's way down: every unknown at an odd multiple of s with a successor below
    tau, x_{(2i+1)s} = c_{(2i+1)s} + A_{(2i+1)s} x_{(2i+2)s}, once the multiples of 2s are solved."""
    tau = len(c)
    odd, after = slice(s, None, 2 * s), slice(2 * s, None, 2 * s)
    m = len(range(2 * s, tau, 2 * s))
    product(A[odd][:m], c[after][:m], out=q[:m])
    xp.add(c[odd][:m], q[:m], out=c[odd][:m])


def suffix_scan(xp, product, A, A_next, c, q, scan):
    """Solve x_t = c_t + A_t x_{t+1} (x_tau = 0) into ``c`` by ``scan`` (resolved), ``A`` overwritten and
    ``A_next`` scratch of its shape; return the rounds run."""
    rounds = 0
    for kind, s, A_s, A_next_s in suffix_rounds(scan, len(c), A, A_next):
        if kind == "scan":
            scan_round(xp, product, A_s, A_next_s, c, q, s)
        elif kind == "reduce":
            reduce_round(xp, product, A_s, A_next_s, c, q, s)
        else:
            substitute_round(xp, product, A_s, c, q, s)
        rounds += 1
    return rounds


# -- the Neumann series: x = (I - N)^{-1} e by doubling -----------------------------------------------------


def neumann_rounds(depth, P=None, P_next=None):
    """Yield ``(r, P, P_next, square)`` per round of the doubling of (I - N)^{-1} for N nilpotent of index
    <= ``depth``: ceil(log2 depth) rounds, P in ping-pong, squared (``square``) in every round but the last."""
    rounds = ceil_log2(max(depth, 1))
    for r in range(rounds):
        yield r, P, P_next, r + 1 < rounds
        P, P_next = P_next, P


def accumulate(xp, P, X, Q):
    """X <- X + P X, ``Q`` scratch of X's shape; P (..., M, M), X (..., M, c)."""
    xp.matmul(P, X, out=Q)
    xp.add(X, Q, out=X)


def neumann_round(xp, P, P_next, X, Q, square):
    """One round: X <- X + P X, and P P into ``P_next`` if ``square``; P (B, M, M), X and Q (B, M, c)."""
    accumulate(xp, P, X, Q)
    if square:
        xp.matmul(P, P, out=P_next)


def neumann_solve(xp, P, P_next, X, Q, depth):
    """X <- (I - P)^{-1} X = sum_{i < D} P^i X for P nilpotent of index <= ``depth``, P overwritten and
    ``P_next`` scratch of its shape; return the rounds run."""
    rounds = 0
    for _, P_r, P_next_r, square in neumann_rounds(depth, P, P_next):
        neumann_round(xp, P_r, P_next_r, X, Q, square)
        rounds += 1
    return rounds


def neumann_work(depth, B, M, columns=(1,), squares=1):
    """``(rounds, flops, elements)`` of the doubling at ``depth`` and batch B: each round accumulates an
    operand of each of ``columns`` (its columns c: X + P X), and all rounds but the last square ``squares``
    matrices (B, M, M)."""
    rounds = sum(1 for _ in neumann_rounds(depth))
    work = _sum(*[_sum(matmul_work(B, M, M, c), add_work(B, M * c)) for c in columns])
    square = matmul_work(squares * B, M, M, M)
    return (rounds, *_sum(*[work] * rounds, *[square] * max(rounds - 1, 0), (0, 0)))


# -- block Jacobi --------------------------------------------------------------------------------------------


def jacobi_sweep(xp, N, X, X_next, E):
    """One sweep: X_next <- E + N X; N (B, M, M), X, X_next and E (B, M, 1)."""
    xp.matmul(N, X, out=X_next)
    xp.add(X_next, E, out=X_next)


def chain_sweep(xp, A, X, X_next):
    """One sweep on the chain: X_next_i <- A_i X_{i+1} for i < n-1; A (n-1, B, N, N), X and X_next (n, B, N, 1),
    whose last block (g) both hold."""
    xp.matmul(A, X[1:], out=X_next[:-1])


def jacobi(xp, A, X, X_next, limit, e=None, scratch=None, tol=0.0):
    """Up to ``limit`` sweeps from ``X``, in ping-pong with ``X_next``: ``jacobi_sweep`` with ``e`` given, else
    ``chain_sweep``. With ``scratch`` (``relative_change``'s), stop at the first sweep whose relative change
    is <= ``tol`` (each test waits for the stream). Return ``(X, sweeps, change)``: the last iterate, the
    sweeps run and the last change (None without ``scratch``)."""
    sweeps, change = 0, None
    while sweeps < limit:
        if e is None:
            chain_sweep(xp, A, X, X_next)
        else:
            jacobi_sweep(xp, A, X, X_next, e)
        sweeps += 1
        if scratch is not None:
            change = relative_change(xp, X_next, X, *scratch)
        X, X_next = X_next, X
        if scratch is not None and change <= tol:
            break
    return X, sweeps, change


def relative_change(xp, new, old, diff, sums):
    """max over blocks of ||new_i - old_i|| / ||new_i|| (Frobenius over the batch; 0/0 counts as 0, and NaN or Inf
    in either as an infinite change), blocks along the first axis of ``new`` and ``old`` (n, B, N, 1), each scaled
    first by its largest magnitude in ``new``, so that no square underflows (a block of deltas of 1e-170 squared to
    0 in float64 and counted as unchanged; where old_i is far the larger, the change overflows to an infinite one).
    ``diff`` (their shape) and ``sums`` (3, n) are float64 scratch. Waits for the stream to read the result."""
    axes, scale = (1, 2, 3), sums[2]
    xp.max(xp.abs(new, out=diff, dtype=np.float64), axis=axes, out=scale)
    xp.maximum(scale, np.finfo(np.float64).tiny, out=scale)  # a block of zeros stays zeros; NaN stays NaN
    divisor = scale[:, None, None, None]  # a view: each block's scale over its elements
    with np.errstate(over="ignore", invalid="ignore"):  # NaN and Inf are read as an infinite change below
        xp.divide(xp.subtract(new, old, out=diff, dtype=np.float64), divisor, out=diff)
        xp.sum(xp.square(diff, out=diff), axis=axes, out=sums[0])
        xp.divide(new, divisor, out=diff, dtype=np.float64)
        xp.sum(xp.square(diff, out=diff), axis=axes, out=sums[1])
    num, den, scale = to_host(sums)
    if not (np.isfinite(num).all() and np.isfinite(den).all() and np.isfinite(scale).all()):
        return math.inf
    changed = num > 0
    if not changed.any():
        return 0.0
    if (den[changed] == 0).any():
        return math.inf
    return float(np.sqrt(np.max(num[changed] / den[changed])))


def jacobi_work(sweeps, B, M, chain=0, change=0):
    """Flops and elements of ``sweeps`` sweeps at batch B: of x <- e + N x on one (M, M) matrix, or with
    ``chain`` > 0 of the chain's ``chain`` products of (M, M) blocks; with ``change`` > 0, each sweep's
    relative change over ``change`` elements (a magnitude and its maximum, a subtract, two divisions by the
    scale, two squares and their sums: 9 flops and elements each)."""
    sweep = matmul_work(chain * B, M, M, 1) if chain else _sum(matmul_work(B, M, M, 1), add_work(B, M))
    return tuple(sweeps * (x + 9 * change) for x in sweep)
