"""The suffix scan x_t = c_t + A_t x_{t+1} (0-based t < tau, x_tau = 0) in dependent rounds, for matrices
A_t (tau, B, n, n) with vectors (tau, B, n, 1) or diagonals and vectors (tau, B, n), by one of two algorithms:

``"doubling"``   recursive doubling (``scan_round``): ceil(log2 tau) rounds, about tau·ceil(log2 tau)
                 products A A: the fewest rounds, what a GPU's launch latency rewards.
``"reduction"``  cyclic reduction (``reduce_round`` up, ``substitute_round`` down): 2·ceil(log2 tau) - 1
                 rounds, fewer than tau products A A: the least work, what a CPU rewards.

``"auto"`` picks reduction for matrices on the host backend, doubling on a GPU and for diagonals.
``suffix_scan`` runs every round of one solve (``newton.TimeNewton``); ``scans.TimeScan`` launches them
one by one.
"""

from .schedules import ceil_log2


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


SCANS = ("auto", "doubling", "reduction")
"""The algorithms of the suffix scan (``resolve_scan`` says which ``auto`` runs)."""


def check_scan(scan):
    """``scan`` if it names one of ``SCANS``, else a TypeError (not a string) or ValueError that names them."""
    if not isinstance(scan, str):
        raise TypeError(f"scan must be one of {', '.join(map(repr, SCANS))}; got {scan!r}")
    if scan not in SCANS:
        raise ValueError(f"scan must be one of {', '.join(map(repr, SCANS))}; got {scan!r}")
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


def reduction_strides(tau):
    """The strides s = 1, 2, 4, ... < tau: of doubling's rounds, and of cyclic reduction's levels going up
    (it comes back down through those with 2s < tau)."""
    strides, s = [], 1
    while s < tau:
        strides.append(s)
        s *= 2
    return strides


def round_sizes(scan, tau):
    """``(s, m, kept)`` of each round of the scan over ``tau`` steps by ``scan`` (resolved), in order: its
    stride s, its m vector products A x + c, and its ``kept`` products A A (none on reduction's way down)."""
    strides = reduction_strides(tau)
    if scan == "doubling":
        return [(s, tau - s, max(tau - 2 * s, 0)) for s in strides]
    up = [(s, len(range(s, tau, 2 * s)), len(range(2 * s, tau, 2 * s))) for s in strides]
    return up + [(s, len(range(2 * s, tau, 2 * s)), 0) for s in reversed(strides) if 2 * s < tau]


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
    tau, rounds = len(c), 0
    if scan == "doubling":
        s = 1
        while s < tau:
            scan_round(xp, product, A, A_next, c, q, s)
            A, A_next = A_next, A
            rounds, s = rounds + 1, 2 * s
        return rounds
    strides = reduction_strides(tau)
    for s in strides:
        reduce_round(xp, product, A, A_next, c, q, s)
        rounds += 1
    for s in reversed(strides):
        if 2 * s < tau:
            substitute_round(xp, product, A, c, q, s)
            rounds += 1
    return rounds
