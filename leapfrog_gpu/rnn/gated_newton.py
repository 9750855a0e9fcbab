"""``TimeNewton`` on gated layers (``cells``): the forward over time of a GRU's h or an LSTM's (h, c) as a
Newton (DEER) solve, as ``newton`` solves the Elman cell's.

The state s_t (S = n_l or 2 n_l) solves s_t = F(s_{t-1}, a^{l-1,t}), s_0 = 0. At the iterate s^(i), every step's
F_t = F(s^(i)_{t-1}) and the state Jacobian J_t = ∂F/∂s_{t-1} there (``cells``: built whole, (S, S) per step and
sample) linearize it into s_t = J_t s_{t-1} + c_t, c_t = F_t - J_t s^(i)_{t-1}, solved by the suffix scan on time
reversed (``core.triangular.suffix_scan``). ``quasi=True`` keeps the diagonal of J_t, taken from the whole
Jacobian and scanned as whole (S, S) matrices, zero off the diagonal: neither its build, its scan nor its memory is
elementwise. ``damping``, the reset to the Picard sweep on NaN or Inf, ``warm_start``, the stops and the counters
are ``TimeNewton``'s, the flops counted as ``step_flops`` and ``evaluation_flops`` say. Once a layer stops, a^l holds
the iterate's h and the cell's gates (and c) its last evaluation, which the backward pass reads.
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
    twice (diagonals (tau, B, S) for ``quasi``)."""
    key = ("gated-newton", quasi)
    if key not in p.cache:
        net, tau, B, xp = p.net, p.tau, p.batch, p.xp
        rows, S = max(net.rows(l) for l in net.hidden), max(net.state_sizes[1:-1])
        p.cache[key] = ([p.sequence(rows, tau) for _ in range(2)] + [p.sequence(S, tau) for _ in range(2)],
                        [xp.zeros(tau * B * S * S, dtype=net.dtype) for _ in range(2)]
                        + [xp.zeros(tau * B * S, dtype=net.dtype) for _ in range(2)])
        p.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
    return p.cache[key]


def memory_needed(sizes, tau, B, itemsize, cell):
    """Bytes of ``buffers`` for ``sizes`` (n_1..n_L) of ``cell`` at ``tau`` and ``B``: 2·tau·B·G·N + 4·tau·B·S +
    2·tau·B·S^2 for the widest layer N and its state S (quasi's too: its Jacobians are built whole)."""
    N = max(sizes[1:-1])
    rows, S = GATES[cell] * N, STATE[cell] * N
    return (2 * tau * B * rows + 4 * tau * B * S + 2 * tau * B * S * S) * itemsize


def evaluation_flops(N, tau, B, cell):
    """Flops of an evaluation of a layer of width N: u h^{t-1} at every step but the first (h^0 = 0), the cell's
    forward step but its biases (``cells.WORK``; they are in w x + b), and the residual's difference and square
    per state element."""
    G = GATES[cell]
    return 2 * G * N * N * (tau - 1) * B + (WORK[cell].forward - G) * N * tau * B + 2 * STATE[cell] * N * tau * B


def step_flops(N, tau, B, scan, cell, quasi):
    """Flops of an iteration's step on a layer of width N, state S: the tau - 1 Jacobians (``cells.WORK``), quasi's
    diagonal taken from them (S^2 a step), J_t s_{t-1} and c_t, then the rounds of ``scan`` (resolved) on (S, S)
    matrices (quasi's too: its scan multiplies the whole matrices)."""
    S, (a, b) = STATE[cell] * N, WORK[cell].jacobian
    flops = (tau - 1) * B * (a * N * N + b * N) + ((S * S if quasi else 0) + 2 * S * S + S) * tau * B
    return flops + sum(scan_round_work(m, kept, B, S)[0] for _, m, kept in round_sizes(scan, tau))


def layer(solver, p, l, tol, limit, count, stalled, floor):
    """Solve gated layer l (``TimeNewton._layer``'s contract): its iterations and each evaluation's residual."""
    xp, N, tau, B, cell = p.xp, p.net.n[l], p.tau, p.batch, p.recursion[l]
    S, rows = p.net.state_sizes[l - 1], p.net.rows(l)
    sequences, flats = buffers(p, solver.quasi)
    pre, uh, state, f = sequences[0][:rows], sequences[1][:rows], sequences[2][:S], sequences[3][:S]
    J, J_next = (x[: tau * B * S * S].reshape(tau, B, S, S) for x in flats[:2])
    c, q = (x[: tau * B * S].reshape(tau, B, S, 1) for x in flats[2:])
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
    s_{tau-1-j}), J_t damped by (1 - damping), or its diagonal for ``quasi``."""
    xp, N, tau = p.xp, p.net.n[l], p.tau
    J, J_next, c, q = scan
    if tau > 1:
        previous = {"h_prev": state[:N, :-1]} if p.net.cell == "gru" else {"c_prev": state[N:, :-1]}
        cell.jacobians(J_next, **previous)  # J_next[t - 1] = J_t^T, t = 1..tau-1 (0-based)
        xp.copyto(J[: tau - 1], J_next[: tau - 1][::-1].swapaxes(-1, -2))  # J[j] = J_{tau-1-j}
    J[tau - 1].fill(0)  # J_0 meets s_{-1} = 0
    if solver.damping:
        xp.multiply(J, 1.0 - solver.damping, out=J)
    if solver.quasi:
        J = J * xp.eye(J.shape[-1], dtype=J.dtype)
    forwards = c[::-1, ..., 0].transpose(2, 0, 1)  # the scan's vectors as (S, tau, B), time in order
    previous = cell.previous(state, ALL) if p.net.cell == "gru" else xp.concatenate(
        [cell.previous(state[:N], ALL), cell.previous(state[N:], ALL)])
    J_forwards = J[::-1]  # J_t in time order
    xp.copyto(forwards, (J_forwards @ previous.transpose(1, 2, 0)[..., None])[..., 0].transpose(2, 0, 1))
    xp.subtract(f, forwards, out=forwards)  # c_t = F_t - J_t s_{t-1}
    count["rounds"] += suffix_scan(xp, xp.matmul, J, J_next, c, q, count["scan"])
    count["flops"] += step_flops(N, tau, p.batch, count["scan"], p.net.cell, solver.quasi)
    xp.copyto(state, forwards)
