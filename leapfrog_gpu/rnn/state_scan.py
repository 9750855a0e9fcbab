"""``TimeScan`` on gated layers (``cells``): the backward pass over time as the linear suffix scan of each layer's
state adjoint, lambda^{t-1} = J_t^T lambda^t + ((w^{l+1})^T delta^{l+1,t-1}, 0), by its state Jacobians.

The state s^t is the GRU's h^t (S = n_l) or the LSTM's (h^t, c^t) (S = 2 n_l); J_t^T is built whole, (S, S) per
step and sample (``cells``), so that every round is ``core.triangular``'s on (tau, B, S, S) matrices and
(tau, B, S, 1) vectors. Once lambda is known, every gate delta of every step follows at once. Per layer: one
round for the vectors and the Jacobians, then the scan's ceil(log2 tau) (doubling) or 2·ceil(log2 tau) - 1
(reduction) rounds, as for the Elman cell.
"""

from ..core import triangular
from .cells import ALL


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
