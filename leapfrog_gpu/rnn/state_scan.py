"""``TimeScan`` on gated layers (``cells``): the backward pass over time as the linear suffix scan of each layer's
state adjoint, lambda^{t-1} = J_t^T lambda^t + ((w^{l+1})^T delta^{l+1,t-1}, 0), by its state Jacobians.

The state s^t is the GRU's h^t (S = n_l) or the LSTM's (h^t, c^t) (S = 2 n_l); J_t^T is built whole, (S, S) per
step and sample (``cells``), so that every round is ``core.triangular``'s on (tau, B, S, S) matrices and
(tau, B, S, 1) vectors. Once lambda is known, every gate delta of every step follows at once. Per layer: one
round for the vectors and the Jacobians, then the scan's ceil(log2 tau) (doubling) or 2·ceil(log2 tau) - 1
(reduction) rounds, as for the Elman cell.
"""

from ..core import triangular
from ..core.triangular import round_sizes, scan_round_work
from .cells import ALL, GATES, STATE, WORK
from .schedules import rows


def chain(p, scan):
    """Enqueue the chain of pass ``p`` of gated layers on its main stream by ``scan`` (resolved), counting its
    rounds in ``p.rounds``; yield each layer L, L-1, ..., 2 once its delta is complete."""
    launch = p.backend.launch
    p.delta_output()
    yield p.L
    for l in range(p.L - 1, 1, -1):
        P, P_next, C, Q = views(p, l)
        launch(p.main, f"c[{l}]", load, p, l, P, C)
        p.rounds += 1
        for kind, s, A, A_next in triangular.suffix_rounds(scan, p.tau, P, P_next):
            launch(p.main, f"{kind}[{l}, {s}]", scan_round, p.xp, kind, s, A, A_next, C, Q)
            p.rounds += 1
        launch(p.main, f"delta[{l}]", unload, p, l, C)
        yield l


def views(p, l):
    """Layer l's matrices (tau, B, S, S), twice, and vectors (tau, B, S, 1), twice, S its state's width, in buffers
    made once per pass for the widest."""
    S, tau, B = p.net.state_sizes[l - 1], p.tau, p.batch
    if "state-scan" not in p.cache:
        width = max(p.net.state_sizes[1:-1])
        p.cache["state-scan"] = [p.xp.zeros(2 * tau * B * width * width, dtype=p.net.dtype),
                                 p.xp.zeros(2 * tau * B * width, dtype=p.net.dtype)]
        p.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
    matrices, vectors = p.cache["state-scan"]
    m, v = tau * B * S * S, tau * B * S
    return (matrices[:m].reshape(tau, B, S, S), matrices[m: 2 * m].reshape(tau, B, S, S),
            vectors[:v].reshape(tau, B, S, 1), vectors[v: 2 * v].reshape(tau, B, S, 1))


def load(p, l, P, C):
    """c_t = ((w^{l+1})^T delta^{l+1,t}, 0) and A_t = J_{t+1}^T for every t."""
    p.from_above(l)
    C.fill(0)
    p.xp.copyto(C[:, :, : p.net.n[l], 0], p.delta_h[l].transpose(1, 2, 0))
    p.recursion[l].jacobians(P)


def scan_round(xp, kind, s, A, A_next, c, q):
    """One round of ``core.triangular``'s suffix scan, of ``kind`` "scan", "reduce" or "substitute"."""
    if kind == "scan":
        triangular.scan_round(xp, xp.matmul, A, A_next, c, q, s)
    elif kind == "reduce":
        triangular.reduce_round(xp, xp.matmul, A, A_next, c, q, s)
    else:
        triangular.substitute_round(xp, xp.matmul, A, c, q, s)


def unload(p, l, C):
    """delta_h^l = lambda_h, then every gate delta (the LSTM's from lambda_c too)."""
    n, cell = p.net.n[l], p.recursion[l]
    p.xp.copyto(p.delta_h[l], C[:, :, :n, 0].transpose(2, 0, 1))
    if p.net.cell == "lstm":
        cell.deltas(ALL, C[:, :, n:, 0].transpose(2, 0, 1).copy())
    else:
        cell.deltas(ALL)


def elements(sizes, tau, B, cell):
    """Elements of the buffers of ``views`` for ``sizes`` (n_1..n_L) of ``cell``: 2·tau·B·S^2 + 2·tau·B·S, S the
    widest state (``cells.STATE``)."""
    S = STATE[cell] * max(sizes[1:-1])
    return 2 * tau * B * (S * S + S)


def work(sizes, tau, B, scan, cell):
    """Flops and elements moved by the chain of ``sizes`` of ``cell`` at ``tau`` and ``B``, by ``scan`` (resolved), per
    layer of width N, G gates and state S: (w^{l+1})^T delta^{l+1} into the vectors (S wide); the tau - 1 Jacobians
    (``cells.WORK``: u and each step's gates and states read, S^2 per sample written); the rounds (``core.triangular``,
    on (S, S) matrices); lambda_h copied out and every step's deltas (as BPTT's steps)."""
    flops = moved = 0
    G, step = GATES[cell], WORK[cell]
    a, b = step.jacobian
    for l in range(2, len(sizes)):
        N, above = sizes[l - 1], rows(sizes, l + 1, cell)
        S = STATE[cell] * N
        flops += 2 * N * above * tau * B + (tau - 1) * B * (a * N * N + b * N) + step.backward * N * tau * B
        moved += N * above + (above + S) * tau * B  # w^{l+1} and delta^{l+1} read, the vectors written
        moved += G * N * N + (tau - 1) * B * ((G + 2) * N + S * S)
        for _, m, kept in round_sizes(scan, tau):
            round_flops, elements = scan_round_work(m, kept, B, S, copy=scan == "reduction")
            flops, moved = flops + round_flops, moved + elements
        moved += 2 * N * tau * B + step.moved * N * tau * B
    return flops, moved
