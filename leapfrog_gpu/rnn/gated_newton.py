"""``TimeNewton`` on gated layers (``cells``): the forward over time of a GRU's h or an LSTM's (h, c) as a
Newton (DEER) solve, as ``newton`` solves the Elman cell's.

The state s_t (S = n_l or 2 n_l) solves s_t = F(s_{t-1}, a^{l-1,t}), s_0 = 0. At the iterate s^(i), every step's
F_t = F(s^(i)_{t-1}) and the state Jacobian J_t = ∂F/∂s_{t-1} there (``cells``: built whole, (S, S) per step and
sample) linearize it into s_t = J_t s_{t-1} + c_t, c_t = F_t - J_t s^(i)_{t-1}, solved by the suffix scan on time
reversed (``core.triangular.suffix_scan``). ``quasi=True`` (quasi-DEER) keeps the diagonal of J_t only, built
elementwise from the gates (``cells``' ``diagonals``: a GRU's ∂h^t_i/∂h^{t-1}_i, an LSTM's ∂h^t_i/∂h^{t-1}_i and
∂c^t_i/∂c^{t-1}_i), (tau, B, S) with no S x S matrix made, and scanned elementwise as the Elman cell's diagonals
are: O(tau·B·S) memory and work. ``damping``, the reset to the Picard sweep on NaN or Inf, ``warm_start``, the
stops and the counters are ``TimeNewton``'s, the flops counted as ``step_flops`` and ``evaluation_flops`` say.
Once a layer stops, a^l holds the iterate's h and the cell's gates (and c) its last evaluation, which the backward
pass reads.
"""

import numpy as np

from ..core.checks import all_finite
from ..core.convergence import relative
from ..core.triangular import round_sizes, scan_round_work, suffix_scan
from .cells import ALL, GATES, STATE, WORK
from .plan import flat


def buffers(p, quasi):
    """The solve's buffers in ``p``, made once per pass for the widest layer: w a^{l-1} + b and u h (G·N, tau,
    B), the iterate and f (S, tau, B), the Jacobians (tau, B, S, S) twice and the scan's vectors (tau, B, S, 1)
    twice; for ``quasi`` the diagonals and the vectors (tau, B, S), twice each."""
    key = ("gated-newton", quasi)
    if key not in p.cache:
        net, tau, B, xp = p.net, p.tau, p.batch, p.xp
        rows, S = max(net.rows(l) for l in net.hidden), max(net.state_sizes[1:-1])
        jacobian = S if quasi else S * S
        p.cache[key] = ([p.sequence(rows, tau) for _ in range(2)] + [p.sequence(S, tau) for _ in range(2)],
                        [xp.zeros(tau * B * size, dtype=net.dtype) for size in (jacobian, jacobian, S, S)])
        p.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
    return p.cache[key]


def memory_needed(sizes, tau, B, itemsize, cell, quasi):
    """Bytes of ``buffers`` for ``sizes`` (n_1..n_L) of ``cell`` at ``tau`` and ``B``: 2·tau·B·G·N + 4·tau·B·S +
    2·tau·B·S^2 for the widest layer N and its state S, or with ``quasi`` 2·tau·B·S for the diagonals in place of
    the S^2."""
    N = max(sizes[1:-1])
    rows, S = GATES[cell] * N, STATE[cell] * N
    return (2 * tau * B * rows + 4 * tau * B * S + 2 * tau * B * (S if quasi else S * S)) * itemsize


def evaluation_flops(N, tau, B, cell):
    """Flops of an evaluation of a layer of width N: u h^{t-1} at every step but the first (h^0 = 0), the cell's
    forward step but its biases (``cells.WORK``; they are in w x + b), and the residual's difference and square
    per state element."""
    G = GATES[cell]
    return 2 * G * N * N * (tau - 1) * B + (WORK[cell].forward - G) * N * tau * B + 2 * STATE[cell] * N * tau * B


def step_flops(N, tau, B, scan, cell, quasi):
    """Flops of an iteration's step on a layer of width N, state S: the tau - 1 Jacobians (``cells.WORK``), J_t s_{t-1}
    and c_t, then the rounds of ``scan`` (resolved) on (S, S) matrices; with ``quasi`` the tau - 1 diagonals
    (``cells.WORK``), J_t s_{t-1} (S a step t > 1) and c_t (S a step) elementwise, and the rounds on diagonals."""
    S, (a, b), step = STATE[cell] * N, WORK[cell].jacobian, WORK[cell]
    if quasi:
        flops = (tau - 1) * B * (step.diagonal * N + S) + S * tau * B
    else:
        flops = (tau - 1) * B * (a * N * N + b * N) + (2 * S * S + S) * tau * B
    return flops + sum(scan_round_work(m, kept, B, S, diagonal=quasi)[0] for _, m, kept in round_sizes(scan, tau))


def layer(solver, p, l, tol, limit, count, stalled, floor):
    """Solve gated layer l (``TimeNewton._layer``'s contract): its iterations and each evaluation's residual."""
    xp, N, tau, B, cell = p.xp, p.net.n[l], p.tau, p.batch, p.recursion[l]
    S, rows = p.net.state_sizes[l - 1], p.net.rows(l)
    sequences, flats = buffers(p, solver.quasi)
    pre, uh, state, f = sequences[0][:rows], sequences[1][:rows], sequences[2][:S], sequences[3][:S]
    matrix, vector = ((tau, B, S), (tau, B, S)) if solver.quasi else ((tau, B, S, S), (tau, B, S, 1))
    J, J_next, c, q = (x[: int(np.prod(shape))].reshape(shape)
                       for x, shape in zip(flats, (matrix, matrix, vector, vector)))
    xp.matmul(p.w[l], flat(p.a[l - 1]), out=flat(pre))
    xp.add(flat(pre), p.b[l][:, None], out=flat(pre))
    count["flops"] += 2 * rows * p.net.n[l - 1] * tau * B + rows * tau * B
    warm = solver.warm_start and all_finite(xp, p.a[l]) and (S == N or all_finite(xp, cell.c))
    if warm:
        xp.copyto(state[:N], p.a[l])
        if S > N:
            xp.copyto(state[N:], cell.c)
    else:
        state.fill(0)
    history = [_evaluate(p, l, cell, pre, uh, state, f, count)]
    done = 0
    while history[-1] > tol and done < limit and not stalled(history, floor):
        with np.errstate(over="ignore", invalid="ignore"):  # a step that overflows is undone below
            _step(solver, p, l, cell, state, f, (J, J_next, c, q), count)
        if not all_finite(xp, state):
            count["resets"] += 1
            xp.copyto(state, f)  # the Picard sweep from the previous iterate instead
        done += 1
        history.append(_evaluate(p, l, cell, pre, uh, state, f, count))
    xp.copyto(p.a[l], state[:N])
    return done, history


def _evaluate(p, l, cell, pre, uh, state, f, count):
    """F at the iterate ``state`` into ``f`` (and the cell's gates); return ||s - F(s)|| / ||F(s)||."""
    xp, N = p.xp, p.net.n[l]
    h_prev = cell.previous(state[:N], ALL)
    xp.matmul(p.u[l], flat(h_prev), out=flat(uh))
    cell.evaluate(pre, uh, state, f)
    count["evaluations"] += 1
    count["rounds"] += 1
    count["flops"] += evaluation_flops(N, p.tau, p.batch, p.net.cell)
    return relative(xp, f, state)


def _step(solver, p, l, cell, state, f, scan, count):
    """One Newton iteration into ``state``: s_t = J_t s_{t-1} + c_t solved by the scan on time reversed (its x_j is
    s_{tau-1-j}), J_t damped by (1 - damping); for ``quasi`` J_t's diagonals (tau, B, S), all elementwise."""
    xp, N, tau, quasi = p.xp, p.net.n[l], p.tau, solver.quasi
    J, J_next, c, q = scan
    if tau > 1:
        previous = {"h_prev": state[:N, :-1]} if p.net.cell == "gru" else {"c_prev": state[N:, :-1]}
        if quasi:
            cell.diagonals(J[::-1][1:], **previous)  # J[j] = diag(J_{tau-1-j}), t = 1..tau-1 (0-based)
        else:
            cell.jacobians(J_next, **previous)  # J_next[t - 1] = J_t^T, t = 1..tau-1 (0-based)
            xp.copyto(J[: tau - 1], J_next[: tau - 1][::-1].swapaxes(-1, -2))  # J[j] = J_{tau-1-j}
    J[tau - 1].fill(0)  # J_0 meets s_{-1} = 0
    if solver.damping:
        xp.multiply(J, 1.0 - solver.damping, out=J)
    forwards = (c if quasi else c[..., 0])[::-1].transpose(2, 0, 1)  # the scan's vectors as (S, tau, B), in time
    J_forwards = J[::-1][1:]  # J_t in time order, t = 1..tau-1 (0-based)
    forwards[:, 0].fill(0)
    if quasi:
        xp.multiply(J_forwards.transpose(2, 0, 1), state[:, :-1], out=forwards[:, 1:])
    else:
        product = (J_forwards @ state[:, :-1].transpose(1, 2, 0)[..., None])[..., 0]
        xp.copyto(forwards[:, 1:], product.transpose(2, 0, 1))
    xp.subtract(f, forwards, out=forwards)  # c_t = F_t - J_t s_{t-1}
    count["rounds"] += suffix_scan(xp, xp.multiply if quasi else xp.matmul, J, J_next, c, q, count["scan"])
    count["flops"] += step_flops(N, tau, p.batch, count["scan"], p.net.cell, solver.quasi)
    xp.copyto(state, forwards)
