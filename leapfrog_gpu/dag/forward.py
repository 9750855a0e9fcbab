"""The forward pass as a lower-triangular nonlinear system, solved by iteration (docs/dag.md).

The unknowns are the outputs a_v of every non-input node; F_v = a_v - f_v(a_{inputs of v}) = 0, f_v
its layer's forward. D (``net.depth``) is the number of non-input nodes on the longest path.

``ForwardJacobi``  every node from the previous sweep's outputs at once (the nodes of one sweep are
                   independent). Exact after D sweeps from any start and, being the same per-layer
                   arithmetic, bitwise the node-by-node forward; a warm start (the previous solve's
                   outputs) and a tolerance on the per-node, per-sample relative change may stop it earlier, and
                   ``blocks`` runs Jacobi inside groups of levels, sequentially across them (each group
                   exact after its own depth, its own convergence test).
``ForwardNewton``  DEER / DeepPCR: linearize at the iterate, a_v = f_v + sum_u J_{v,u} (a_u - a_u^(i)),
                   and solve that linear lower-triangular system by recursive doubling in ceil(log2 D)
                   rounds (``schedules.doubling_solve``); repeat. Undamped, exact in at most D
                   iterations (after i of them every node of level <= i is exact); stops when the largest
                   relative residual ||a_vj - f_vj(a)|| / ||f_vj(a)|| of a node v and a sample j is <= ``tol``
                   (where f_vj(a) vanishes, ||a_vj|| / max_ui ||f_ui(a)||). ``damping`` < 1
                   scales each step (ELK's remedy for steps that blow up), which then leaves a part of the
                   error at every level, so that no number of iterations is exact; a step that leaves NaN
                   or Inf is undone and replaced by a Jacobi sweep from the previous iterate.

Both run as one operation on the main stream, for ``DagNet.feedforward(x, solver=...)``,
``DagNet.backprop(..., solver=...)`` and ``MLP.feedforward(x, solver=...)`` (the MLP as its chain).
Each leaves in ``stats``: sweeps or iterations, rounds (dependent steps), flops and bytes (estimates:
each operand read once, each result written once) beside the node-by-node forward's, memory held.
"""

import math
import weakref

import numpy as np

from ..core.checks import MEMORY_LIMIT, check_cap, check_count, check_flag, check_memory_limit, check_real
from ..core.convergence import Solver, column_norms, largest, ratios, relative
from ..core.triangular import ceil_log2, check_memory
from .network import DagNet, from_mlp
from .plan import INPUT, forward_node, jacobian
from .schedules import doubling_bytes, doubling_solve


class ForwardSolver(Solver):
    """What the solvers share: ``feedforward`` for either network, counters, the previous solution (for
    ``warm_start``), and what a solve that stops short of its tolerance does (``core.convergence.Solver``): a
    ``RuntimeWarning``, once per solver, or with ``strict=True`` a ``RuntimeError``, raised by the call that
    waits for the solve."""

    network = "DagNet"

    def __init__(self, warm_start=False, strict=False):
        super().__init__(strict)
        self.warm_start = check_flag("warm_start", warm_start)
        self._previous = None  # (a weak reference to the plan solved, its outputs) of the last solve
        self._chain = None  # (a weak reference to the MLP, its chain) of the last MLP solved

    def feedforward(self, net, x):
        """a^out (n_out, B) of ``net`` (a ``DagNet``, or an ``MLP`` run as its chain) by this solver."""
        return (net if isinstance(net, DagNet) else self.chain(net)).feedforward(x, solver=self)

    def chain(self, mlp):
        """The ``DagNet`` that ``mlp`` is solved as (``from_mlp``), holding ``mlp``'s parameters as they are now:
        the last MLP's is kept, its parameters copied in again, so that its next solve may start warm."""
        if self._chain is not None and self._chain[0]() is mlp:
            dag = self._chain[1]
            dag.set_parameters({str(l): named for l, named in mlp.parameters().items()})
            return dag
        dag = from_mlp(mlp)
        self._chain = (weakref.ref(mlp), dag)
        return dag

    def solve(self, net, state):
        """Fill ``state.a`` and ``state.saved`` for every node of ``net`` (runs on the main stream); ``state``
        is the pass's ``plan.DagPlan``, its parameters ``state.params``."""
        raise NotImplementedError

    def _start(self, net, state, warm):
        xp, B = net.backend.xp, state.batch
        previous = self._previous
        if warm and previous is not None and previous[0]() is state:
            return dict(previous[1])
        return {v: xp.zeros((net.n[v], B), dtype=net.dtype) for v in net.order}

    def _finish(self, net, state, a, saved):
        for v in net.order:
            state.a[v], state.saved[v] = a[v], saved[v]
        self._previous = (weakref.ref(state), {v: a[v] for v in net.order})

def _evaluate(net, params, a, nodes, x):
    """f_v of the iterate ``a`` for ``nodes``, on ``params`` (the plan's): ``(outputs, saved)``."""
    out, saved = {}, {}
    for v in nodes:
        args = [x if u == INPUT else a[u] for u in net.inputs[v]]
        out[v], saved[v] = forward_node(net, v, params[v], args)
    return out, saved


def forward_counters(net, batch, nodes=None):
    """Flops and bytes of the node-by-node forward of ``nodes`` (all by default): a node with parameters
    2 n m B + 4 n B, another n_in B."""
    itemsize, flops, moved = np.dtype(net.dtype).itemsize, 0, 0
    for v in net.order if nodes is None else nodes:
        n, widths = net.n[v], [net.n[u] for u in net.inputs[v]]
        if net.n_params[v]:
            flops += sum(2 * n * m * batch for m in widths) + 4 * n * batch
            moved += net.n_params[v] + sum(widths) * batch + 3 * n * batch
        else:
            flops += sum(widths) * batch
            moved += sum(widths) * batch + n * batch
    return {"sequential_rounds": len(net.order), "sequential_flops": flops, "sequential_bytes": moved * itemsize}


class ForwardJacobi(ForwardSolver):
    """Jacobi sweeps over the nodes, exact after D sweeps.

    Args:
        tol: None (no test: D sweeps), or stop a group at the first sweep whose relative change
            max_vj ||a_vj' - a_vj|| / ||a_vj'|| over its nodes v and samples j is <= tol (a number >= 0).
        max_sweeps: None (the depth, exact) or a cap >= 1 on each group's sweeps.
        warm_start: start from the previous solve's outputs (same network, same batch size; an MLP's through
            the chain the solver keeps for it, ``chain``).
        blocks: groups of consecutive levels (>= 1): Jacobi inside each, sequential across.
        strict: raise a RuntimeError, rather than warn, when a solve ends unconverged.

    ``stats["converged"]``: every group ran its own depth or met ``tol``, and every output is finite.
    """

    def __init__(self, tol=None, max_sweeps=None, warm_start=False, blocks=1, strict=False):
        super().__init__(warm_start, strict)
        self.tol = None if tol is None else check_real("tol", tol, "None or a finite number >= 0")
        self.max_sweeps = check_cap("max_sweeps", max_sweeps, "the depth, exact")
        self.blocks = check_count("blocks", blocks)

    def __repr__(self):
        return (f"ForwardJacobi(tol={self.tol}, max_sweeps={self.max_sweeps}, warm_start={self.warm_start}, "
                f"blocks={self.blocks})")

    def groups(self, net):
        """The nodes in ``blocks`` groups of consecutive levels, in order, as equal as the depth allows."""
        D = net.depth
        count = min(self.blocks, D)
        bounds = [round(D * j / count) for j in range(count + 1)]
        return [[v for v in net.order if bounds[j] < net.level[v] <= bounds[j + 1]] for j in range(count)]

    def solve(self, net, state):
        xp, x = net.backend.xp, state.a[INPUT]
        a = self._start(net, state, self.warm_start)
        saved, per_group, changes, flops, moved, converged = {}, [], [], 0, 0, True
        for group in self.groups(net):
            depth = max(net.level[v] for v in group) - min(net.level[v] for v in group) + 1
            limit = depth if self.max_sweeps is None else min(depth, self.max_sweeps)
            sweeps, change = 0, None
            while sweeps < limit:
                new, new_saved = _evaluate(net, state.params, a, group, x)
                sweeps += 1
                change = max(relative(xp, new[v], a[v]) for v in group) if self.tol is not None else None
                a.update(new)
                saved.update(new_saved)
                if change is not None:
                    changes.append(change)
                    if change <= self.tol:
                        break
            converged = converged and (sweeps == depth or change is not None and change <= self.tol)
            per_group.append(sweeps)
            cost = forward_counters(net, state.batch, group)
            flops, moved = flops + sweeps * cost["sequential_flops"], moved + sweeps * cost["sequential_bytes"]
        self._finish(net, state, a, saved)
        base, itemsize = forward_counters(net, state.batch), np.dtype(net.dtype).itemsize
        total = sum(per_group)
        converged = converged and all(bool(xp.isfinite(a[v]).all()) for v in net.order)
        self.stats = {"sweeps": total, "sweeps_per_block": per_group, "rounds": total, "converged": converged,
                      "change": changes[-1] if changes else None,
                      "flops": flops, "bytes": moved,
                      "memory_bytes": 2 * sum(net.n[v] for v in net.order) * state.batch * itemsize, **base}
        net.stats["forward"] = self.stats
        if not converged:
            self._report(total, "sweeps", "change" if not changes else f"change of {changes[-1]:.3g}", self.tol)


class ForwardNewton(ForwardSolver):
    """Newton's method with a parallel scan of every linearized system: exact in D iterations, undamped.

    Args:
        tol: stop once the largest relative residual of a node and a sample is <= tol (a number >= 0); None: 1e-12 in
            float64, 1e-6 in float32 (the residual of an exact float32 solution is a few ulps).
        max_iterations: None (the depth D: exact with ``damping=1``) or a cap >= 1.
        damping: each step times this factor, in (0, 1] (1: plain Newton). Below 1 each step leaves a
            part of the error, so D iterations need not reach ``tol``: a solve that stops short warns.
        warm_start: start from the previous solve's outputs (same network, same batch size; an MLP's through
            the chain the solver keeps for it, ``chain``).
        memory_limit: bytes the Jacobian blocks may take; a larger need raises before allocating.
        strict: raise a RuntimeError, rather than warn, when a solve ends unconverged.

    ``stats["converged"]``: the largest residual, NaN and Inf counted as infinite, is <= ``tol``.
    """

    def __init__(self, tol=None, max_iterations=None, damping=1.0, warm_start=False,
                 memory_limit=MEMORY_LIMIT, strict=False):
        super().__init__(warm_start, strict)
        self.tol = None if tol is None else check_real("tol", tol, "None or a finite number >= 0")
        self.max_iterations = check_cap("max_iterations", max_iterations, "the depth")
        self.damping = check_real("damping", damping, "a number in (0, 1]", strict=True, most=1)
        self.memory_limit = check_memory_limit(memory_limit)

    def __repr__(self):
        return (f"ForwardNewton(tol={self.tol}, max_iterations={self.max_iterations}, damping={self.damping}, "
                f"warm_start={self.warm_start})")

    def memory_needed(self, net, batch):
        """Bytes of the Jacobian's blocks laid into one (B, M, M) matrix, its square, two iterates."""
        return doubling_bytes(net, batch, np.dtype(net.dtype).itemsize)

    def check(self, net, shape):
        """The bytes of a solve of ``net`` (a ``DagNet``) at ``shape``, (B,), or a ValueError when they exceed
        ``memory_limit``."""
        (batch,) = shape
        return check_memory("ForwardNewton", self.memory_needed(net, batch), self.memory_limit,
                            f"depth D={net.depth}, batch B={batch} ({net.dtype})",
                            "ForwardJacobi() or the node-by-node forward", solver=True)

    def solve(self, net, state):
        xp, x, D = net.backend.xp, state.a[INPUT], net.depth
        memory = self.check(net, (state.batch,))
        a = self._start(net, state, self.warm_start)
        limit = D if self.max_iterations is None else self.max_iterations
        tol = self.tol if self.tol is not None else (1e-12 if net.dtype == "float64" else 1e-6)
        base = forward_counters(net, state.batch)
        iterations = resets = flops = moved = 0
        history = []
        while True:
            f, saved = _evaluate(net, state.params, a, net.order, x)
            flops, moved = flops + base["sequential_flops"], moved + base["sequential_bytes"]
            residual = _residuals(xp, f, a, net.order)
            history.append(max(residual.values()))
            if history[-1] <= tol or iterations == limit:
                break
            step, f_flops, f_moved = self._newton_step(net, state, a, f, saved, x)
            iterations += 1
            flops, moved = flops + f_flops, moved + f_moved * np.dtype(net.dtype).itemsize
            new = {v: a[v] + self.damping * step[v] for v in net.order}
            if not all(bool(xp.isfinite(new[v]).all()) for v in net.order):
                resets += 1
                new = f  # undo the step: a Jacobi sweep from the previous iterate instead
            a = new
        self._finish(net, state, a, saved)
        rounds = iterations * ceil_log2(D)
        self.stats = {"iterations": iterations, "rounds": rounds, "residual": residual, "residuals": history,
                      "resets": resets, "converged": history[-1] <= tol, "tol": tol, "flops": flops, "bytes": moved,
                      "memory_bytes": memory, **base}
        net.stats["forward"] = self.stats
        if not self.stats["converged"]:
            self._report(iterations, "iterations", f"residual of {history[-1]:.3g}", tol)

    @staticmethod
    def _newton_step(net, state, a, f, saved, x):
        """The step s of one Newton iteration: s_v = (f_v - a_v) + sum_u J_{v,u} s_u, by doubling."""
        xp, blocks = net.backend.xp, {}
        for v in net.order:
            args = [x if u == INPUT else a[u] for u in net.inputs[v]]
            for i, u in enumerate(net.inputs[v]):
                if u != INPUT:
                    block = jacobian(net, v, state.params[v], args, saved[v], i).dense()
                    blocks[v, u] = blocks[v, u] + block if (v, u) in blocks else block
        e = {v: f[v] - a[v] for v in net.order}
        step, flops, moved = doubling_solve(xp, blocks, e, net.depth, {v: net.n[v] for v in net.order})
        return step, flops, moved


def _residuals(xp, f, a, order):
    """``relative(f_v, a_v)`` of every node v, the largest of its samples' (``column_norms``); for a sample j whose
    f_vj vanishes and a_vj does not (a relu off, whose a_vj a damped step takes towards 0 without reaching it:
    inf at every iteration), ||a_vj|| against the largest ||f_ui|| of any node and sample (a sample's own largest
    shrinks with a_vj where a_vj is all that drives it: a zero input without biases)."""
    norms = {v: column_norms(xp, f[v], a[v]) for v in order}
    if any(n is None for n in norms.values()):  # a NaN or an Inf: unconverged
        return {v: math.inf if norms[v] is None else largest(*norms[v][:2]) for v in order}
    with np.errstate(over="ignore"):  # a norm beyond float64 is inf: such a sample counts as unconverged
        widest = max(float((den * scale).max()) for _, den, scale in norms.values())
        residual = {}
        for v, (num, den, scale) in norms.items():
            ratio, off = ratios(num, den), (den == 0) & (num > 0)
            ratio[off] = num[off] * scale[off] / widest if 0 < widest < math.inf else math.inf
            residual[v] = float(ratio.max())
    return residual
