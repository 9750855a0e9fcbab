"""The forward pass over time as a Newton solve (DEER), layer by layer: ``TimeNewton``.

For a recurrent layer l with its input a^{l-1} known, the states a_t = a^{l,t} solve

    F_t(a) = a_t - sigma(w a^{l-1,t} + u a_{t-1} + b) = 0,   t = 1..tau,   a_0 = 0,

a lower block-bidiagonal system. Newton linearizes it at the iterate a^(i): with f_t = sigma(z_t),
z_t = w a^{l-1,t} + u a^(i)_{t-1} + b and J_t = diag(sigma'(z_t)) u, the next iterate solves

    a_t = J_t a_{t-1} + c_t,   c_t = f_t - J_t a^(i)_{t-1},

a linear recurrence, solved by the associative scan of ``TimeScan`` over the pairs (J_t, c_t), on time
reversed (``core.triangular.suffix_scan``): by recursive doubling in ceil(log2 tau) rounds, or by cyclic
reduction in 2·ceil(log2 tau) - 1 rounds and O(tau) products rather than O(tau·log2 tau) (``scan``; ``"auto"``:
reduction for full Jacobians on the host, doubling on a GPU and for quasi's diagonals). Whatever J is, in
exact arithmetic step 1 is exact after one iteration and every iteration makes at least one more step exact,
so tau iterations give the sequential forward; DEER's quadratic convergence usually takes far fewer. In
floating point the scan carries rounding through the products J_t...J_s, so on an expanding network tau
iterations may end above ``tol`` (docs/rnn.md).

- ``quasi=True`` keeps only the diagonal of J_t, sigma'(z_t) * diag(u) (quasi-DEER; a gated cell's in
  ``gated_newton``): the scan is elementwise, its memory O(tau·n) per sample instead of O(tau·n^2).
- ``damping`` in [0, 1] damps the Jacobian, not the step: J_t <- (1 - damping) J_t, from Newton
  (0) to the Picard sweep a_t = f_t (1). It shrinks the products of Jacobians that overflow on expanding
  RNNs (ELK's concern) and keeps the tau bound above, which a damped step a <- a + d·Delta (d < 1) loses.
- A step that leaves NaN or Inf is undone and replaced by the Picard sweep from the previous iterate
  (``stats["resets"]`` counts them).
- ``warm_start=True`` starts from the states the plan holds from its previous forward pass (the previous
  minibatch of the same (tau, B)) where they are finite, else from zero.

The layers are solved one after another (layer l's input is layer l-1's solution); each stops once its
relative residual ||a - f(a)|| / ||f(a)|| (``core.convergence.relative``: scaled float64, NaN or Inf
infinite) is <= ``tol``, after ``max_iterations``, or once it has reached rounding (``stalled``:
within ``STALL`` machine epsilons of the dtype and no longer falling; ``stats["stalled"]``). A float32
solve of thousands of steps can stall above the default tol of 1e-6, and would otherwise run tau
iterations. Each iteration evaluates f at the iterate (one product over tau·B columns), then runs the
r rounds of the scan (``core.triangular.scan_rounds``); with the evaluation of the start, layer l takes
rounds_l = i_l·r + (i_l + 1) dependent rounds for i_l iterations, and the solve their sum over the
layers (``rounds_formula``), against tau per layer for the sequential forward.
"""

import numpy as np

from ..backends import ops_numpy
from ..core.checks import MEMORY_LIMIT, all_finite, check_cap, check_flag, check_memory_limit, check_real, widths
from ..core.convergence import Solver, relative
from ..core.triangular import (check_memory, check_scan, resolve_scan, round_sizes, scan_round_work, scan_rounds,
                               suffix_scan)
from . import gated_newton
from .plan import flat
from .schedules import check_cell, forward_flops


STALL, PATIENCE = 100, 3
"""A residual within STALL times its dtype's machine epsilon that has not fallen by 10 % in PATIENCE
iterations has reached rounding."""


class TimeNewton(Solver):
    """Newton's method over time (DEER), the forward pass of ``RNN.feedforward(x, solver=...)``,
    ``backprop`` and ``sgd_step``, layer by layer (see the module docstring).

    Args:
        tol: stop a layer once its relative residual is <= tol (a number >= 0); None: 1e-12 in float64,
            1e-6 in float32 (the residual of an exact float32 solution is a few ulps).
        max_iterations: None (tau, exact) or a cap >= 1 on each layer's iterations.
        quasi: keep the diagonal of each Jacobian only (quasi-DEER: O(tau·n) memory).
        damping: the Jacobian times (1 - damping), a number in [0, 1] (0: Newton; 1: Picard sweeps).
        warm_start: start from the plan's states of its previous forward pass, where finite.
        scan: the algorithm of each iteration's scan, ``"doubling"``, ``"reduction"`` or ``"auto"``.
        memory_limit: bytes the solver's buffers may take; a larger need raises before allocating.
        strict: raise a RuntimeError, rather than warn once, when a solve ends unconverged.

    ``stats`` of the last solve: ``iterations`` (and ``iterations_per_layer``), ``evaluations``, ``rounds``
    (counted as run, ``rounds_formula``), ``residual`` (the largest final one) and ``residuals`` (per layer,
    each evaluation's), ``resets``, ``stalled`` (per layer: stopped at rounding above ``tol``), ``scan``,
    ``converged`` (every layer's residual <= ``tol``, NaN and Inf counted infinite), ``tol``, ``flops``,
    ``memory_bytes``, and the sequential forward's ``sequential_rounds`` and ``sequential_flops``.
    """

    network = "RNN"

    def __init__(self, tol=None, max_iterations=None, quasi=False, damping=0.0, warm_start=False, scan="auto",
                 memory_limit=MEMORY_LIMIT, strict=False):
        super().__init__(strict)
        tol = None if tol is None else check_real("tol", tol, "None or a finite number >= 0")
        max_iterations = check_cap("max_iterations", max_iterations, "tau")
        damping = check_real("damping", damping, "a number in [0, 1] (0: Newton, 1: Picard sweeps)", most=1)
        quasi, warm_start = check_flag("quasi", quasi), check_flag("warm_start", warm_start)
        self.tol, self.max_iterations, self.quasi, self.damping = tol, max_iterations, quasi, damping
        self.warm_start, self.memory_limit = warm_start, check_memory_limit(memory_limit)
        self.scan = check_scan(scan)

    def __repr__(self):
        return (f"TimeNewton(tol={self.tol}, max_iterations={self.max_iterations}, quasi={self.quasi}, "
                f"damping={self.damping}, warm_start={self.warm_start}, scan={self.scan!r})")

    @staticmethod
    def rounds_formula(iterations, tau, scan="doubling"):
        """The dependent rounds of a solve whose layers took ``iterations`` (a list), at ``tau`` steps, each
        iteration's scan by ``scan`` (resolved)."""
        return sum(i * scan_rounds(scan, tau) + i + 1 for i in iterations)

    def memory_needed(self, sizes, tau, B, itemsize, *, cell="elman"):
        """Bytes of the buffers beyond the pass's, for ``sizes`` of ``cell`` at ``tau`` and ``B``, sized for the
        widest recurrent layer n: w a^{l-1} + b, u a_{t-1} and f (3·tau·B·n), the scan's vectors (2·tau·B·n) and
        its Jacobians in ping-pong (2·tau·B·n^2, or 2·tau·B·n with ``quasi``); a gated cell's,
        ``gated_newton.memory_needed``."""
        if check_cell(cell) != "elman":
            return gated_newton.memory_needed(sizes, tau, B, itemsize, cell, self.quasi)
        n = max(sizes[1:-1])
        return (5 * tau * B * n + 2 * tau * B * (n if self.quasi else n * n)) * itemsize

    def check(self, net, shape):
        """The bytes of a solve of ``net`` (an ``RNN``) at ``shape``, (tau, B), or a ValueError when they exceed
        ``memory_limit``."""
        (tau, B), cell = shape, "" if net.cell == "elman" else f" ({net.cell.upper()})"
        return check_memory(repr(self), self.memory_needed(net.sizes, tau, B, np.dtype(net.dtype).itemsize,
                                                           cell=net.cell), self.memory_limit,
                            f"sizes {widths(list(net.sizes))}{cell} at tau={tau}, B={B} ({net.dtype})",
                            "the sequential forward (solver=None)", also=() if self.quasi else ("quasi=True",),
                            solver=True)

    def prepare(self, p):
        """Check the memory of a solve on pass ``p`` and allocate its buffers there (once per pass), before
        the solve is enqueued: called on the host, outside any stream."""
        sizes = p.net.sizes
        needed = self.check(p.net, (p.tau, p.batch))
        key = ("time-newton", self.quasi)
        if p.net.cell != "elman":
            gated_newton.buffers(p, self.quasi)
        elif key not in p.cache:
            n, tau, B, xp = max(sizes[1:-1]), p.tau, p.batch, p.xp
            jacobian = n if self.quasi else n * n
            p.cache[key] = ([p.sequence(n, tau) for _ in range(3)],
                            [xp.zeros(tau * B * size, dtype=p.net.dtype) for size in (jacobian, jacobian, n, n)])
            p.backend.synchronize()  # CuPy allocates on its default stream, which the others do not wait for
        return needed

    def solve(self, p):
        """Fill ``p.z``, ``p.a`` and ``p.sp`` of every recurrent layer, layer by layer (runs on the main
        stream, once ``prepare(p)`` has run on the host)."""
        memory = self._memory(p)
        tol = self.tol if self.tol is not None else (1e-12 if p.net.dtype == "float64" else 1e-6)
        limit = p.tau if self.max_iterations is None else self.max_iterations
        count = {"evaluations": 0, "rounds": 0, "resets": 0, "flops": 0,
                 "scan": resolve_scan(self.scan, p.backend.name, self.quasi)}
        iterations, residuals = [], []
        floor = STALL * float(np.finfo(p.net.dtype).eps)
        for l in p.net.hidden:
            if p.net.cell == "elman":
                done, history = self._layer(p, l, tol, limit, count)
            else:
                done, history = gated_newton.layer(self, p, l, tol, limit, count, stalled, floor)
            iterations.append(done)
            residuals.append(history)
        final = [history[-1] for history in residuals]
        stuck = [stalled(history, floor) and history[-1] > tol for history in residuals]
        self.stats = {"iterations": sum(iterations), "iterations_per_layer": iterations,
                      "evaluations": count["evaluations"], "rounds": count["rounds"], "residual": max(final),
                      "residuals": residuals, "stalled": stuck, "resets": count["resets"],
                      "converged": max(final) <= tol, "tol": tol, "scan": count["scan"],
                      "flops": count["flops"], "memory_bytes": memory,
                      "sequential_rounds": len(p.net.hidden) * p.tau,
                      "sequential_flops": forward_flops(p.net.sizes, p.tau, p.batch, cell=p.net.cell)}
        if not self.stats["converged"]:
            where = " (where it stopped falling: the rounding of " + p.net.dtype + ")" if any(stuck) else ""
            by_layer = f" ({' + '.join(map(str, iterations))} by layer)" if len(iterations) > 1 else ""
            self._report(sum(iterations), f"iterations{by_layer}", f"residual of {max(final):.3g}{where}", tol)

    def _memory(self, p):
        """Bytes of this solve's buffers on pass ``p``."""
        return self.memory_needed(p.net.sizes, p.tau, p.batch, np.dtype(p.net.dtype).itemsize, cell=p.net.cell)

    def _layer(self, p, l, tol, limit, count):
        """Solve layer l in place in ``p.a[l]`` (with ``p.z[l]``, ``p.sp[l]`` of its last evaluation); return
        its iterations and the residual of each evaluation. It stops at ``tol``, after ``limit`` iterations,
        or where the residual has reached rounding (``stalled``)."""
        xp, n, tau, B = p.xp, p.net.n[l], p.tau, p.batch
        (inp, ua, f), scan = self._buffers(p, l)
        a, w, b = p.a[l], p.w[l], p.b[l]
        xp.matmul(w, flat(p.a[l - 1]), out=flat(inp))
        xp.add(flat(inp), b[:, None], out=flat(inp))
        count["flops"] += 2 * n * p.net.n[l - 1] * tau * B + n * tau * B
        if not (self.warm_start and all_finite(xp, a)):
            a.fill(0)
        history = [self._evaluate(p, l, inp, ua, f, count)]
        done, floor = 0, STALL * float(np.finfo(p.net.dtype).eps)
        while history[-1] > tol and done < limit and not stalled(history, floor):
            with np.errstate(over="ignore", invalid="ignore"):  # a step that overflows is undone below
                self._step(p, l, ua, f, scan, count)
            if not all_finite(xp, a):
                count["resets"] += 1
                xp.copyto(a, f)  # the Picard sweep from the previous iterate instead
            done += 1
            history.append(self._evaluate(p, l, inp, ua, f, count))
        return done, history

    def _buffers(self, p, l):
        """The solver's buffers in ``p`` as layer l's: three (n, tau, B) sequences, and the scan's Jacobians
        (tau, B, n, n), or their diagonals (tau, B, n), in ping-pong and its vectors, (tau, B, n, 1) or (tau, B, n)."""
        n, tau, B = p.net.n[l], p.tau, p.batch
        sequences, flats = p.cache["time-newton", self.quasi]
        matrix = (tau, B, n) if self.quasi else (tau, B, n, n)
        vector = (tau, B, n) if self.quasi else (tau, B, n, 1)
        J, J_next, c, q = ([x[: int(np.prod(shape))].reshape(shape) for x, shape in
                            zip(flats, (matrix, matrix, vector, vector))])
        return [s[:n] for s in sequences], (J, J_next, c, q)

    @staticmethod
    def _evaluate(p, l, inp, ua, f, count):
        """At the iterate a = p.a[l]: ua_t = u a_{t-1} (one product over (tau-1)·B columns; ua_1 = 0),
        z = inp + ua, f = sigma(z) and sigma'(z) into p.z[l], f, p.sp[l]; return ||a - f|| / ||f||."""
        xp, a, z, n, tau, B = p.xp, p.a[l], p.z[l], p.net.n[l], p.tau, p.batch
        ua[:, 0].fill(0)
        if tau > 1:
            xp.matmul(p.u[l], a[:, :-1].reshape(n, -1), out=ua[:, 1:].reshape(n, -1))
        xp.add(flat(ua), flat(inp), out=flat(z))
        ops_numpy.activate(flat(z), flat(f), flat(p.sp[l]), p.net.activation, xp)
        count["evaluations"] += 1
        count["rounds"] += 1
        count["flops"] += TimeNewton._evaluation_flops(n, tau, B)
        return relative(xp, f, a)

    @staticmethod
    def _evaluation_flops(n, tau, B, cell="elman"):
        """Flops of one evaluation of a layer of width n: u a_{t-1}, the add, sigma, sigma' and the residual (a gated
        ``cell``'s: ``gated_newton.evaluation_flops``)."""
        if cell != "elman":
            return gated_newton.evaluation_flops(n, tau, B, cell)
        return 2 * n * n * (tau - 1) * B + 5 * n * tau * B

    def _step_flops(self, n, tau, B, scan, cell="elman"):
        """Flops of one iteration's step on a layer of width n: the Jacobians and c, then the scan by ``scan``
        (resolved): per round, m vector products J x + c and ``kept`` products J J (a gated ``cell``'s:
        ``gated_newton.step_flops``)."""
        if cell != "elman":
            return gated_newton.step_flops(n, tau, B, scan, cell, self.quasi)
        flops = (5 if self.quasi else 4 + 2 * n) * n * tau * B
        for _, m, kept in round_sizes(scan, tau):  # J x + c and J J: elementwise for quasi's diagonals
            flops += scan_round_work(m, kept, B, n, diagonal=self.quasi)[0]
        return flops

    def iteration_flops(self, sizes, tau, B, backend="numpy", *, cell="elman"):
        """Flops of one iteration (a step and an evaluation) of every recurrent layer of ``sizes`` of ``cell`` at
        ``tau`` and ``B`` on ``backend`` (its name): the least a solve that does not start converged takes."""
        scan = resolve_scan(self.scan, backend, self.quasi)
        return sum(self._step_flops(n, tau, B, scan, check_cell(cell)) + self._evaluation_flops(n, tau, B, cell)
                   for n in sizes[1:-1])

    def _step(self, p, l, ua, f, scan, count):
        """One Newton iteration: the new iterate, into p.a[l], solves a_t = J_t a_{t-1} + c_t by the scan,
        which runs on time reversed (its x_j is a_{tau-1-j}), J_t damped: (1 - damping) diag(sigma'_t) u."""
        xp, n, tau, B, a, u = p.xp, p.net.n[l], p.tau, p.batch, p.a[l], p.u[l]
        J, J_next, c, q = scan
        keep, diagonal = 1.0 - self.damping, u.reshape(-1)[:: n + 1]  # diag(u), a view of u
        forwards = c.reshape(tau, B, n)[::-1].transpose(2, 0, 1)  # the scan's vectors as (n, tau, B), time in order
        if self.quasi:  # J_t a_{t-1} = sigma'_t * diag(u) * a_{t-1}
            forwards[:, 0].fill(0)
            xp.multiply(a[:, :-1], diagonal[:, None, None], out=forwards[:, 1:])
            xp.multiply(forwards, p.sp[l], out=forwards)
        else:  # J_t a_{t-1} = sigma'_t * (u a_{t-1}), the product of the evaluation
            xp.multiply(ua, p.sp[l], out=forwards)
        if keep != 1:
            xp.multiply(forwards, keep, out=forwards)
        xp.subtract(f, forwards, out=forwards)  # c_t = f_t - J_t a_{t-1}
        sp = p.sp[l].transpose(1, 2, 0)  # (tau, B, n)
        if self.quasi:
            xp.multiply(sp, diagonal, out=J[::-1])
        else:
            xp.multiply(sp[..., None], u, out=J[::-1])
        if keep != 1:
            xp.multiply(J, keep, out=J)
        product = xp.multiply if self.quasi else xp.matmul
        count["rounds"] += suffix_scan(xp, product, J, J_next, c, q, count["scan"])
        count["flops"] += self._step_flops(n, tau, B, count["scan"])
        xp.copyto(a, forwards)


def stalled(history, floor):
    """Whether a layer's residuals ``history`` have reached rounding: the last ``PATIENCE`` all within
    ``floor``, and none of them 10 % below the best before them (Newton's convergence ends there; a
    residual above ``floor`` may yet fall, as each iteration makes one more step exact)."""
    if len(history) <= PATIENCE:
        return False
    recent = history[-PATIENCE:]
    return max(recent) <= floor and min(recent) > 0.9 * min(history[:-PATIENCE])
