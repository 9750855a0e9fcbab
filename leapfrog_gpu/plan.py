"""One pass at one batch size: its buffers, its events, and the launches of equations (1)-(7) and the update.

``MLP.plan(B)`` gives the ``Plan`` of a network at batch size B, made on first use and kept. A schedule
(``schedules``, ``naumov``) decides on which stream and behind which event each launch goes; the plan
makes the launches, each one a backend op called on its own buffers (docs/design.md §1 numbers the
equations, §2 the schedule and its hazards). Every per-layer quantity is a dict keyed by the layer number
l = 2..L (a^1 is the input), a minibatch stored as columns.
"""

import contextlib

import numpy as np

from . import autotune
from .data_parallel import Reducer


class Controls:
    """The controls of an SGD step in device memory: ``array`` = [eta / B, refusal] (the network's dtype).

    The update kernels read them when they run, not when they are enqueued, so that a captured graph
    reads the current ones. The refusal code: 0 means update. After the join, the check of the
    gradients (``Plan.check_gradients``, in a network built with ``check_finite=True``) scans them
    deepest layer first, nabla_w^l before nabla_b^l (nabla_w^L first), and the first one that holds a
    NaN or an Inf leaves its code, 2l for nabla_w^l and 2l + 1 for nabla_b^l (``codes``); a code
    already there is kept. While the code is not 0 every update kernel writes nothing, in this step and
    in those enqueued behind it, until ``MLP.synchronize()`` reads it, raises ``FloatingPointError``
    naming the gradient (``gradient(code)``) and clears it.
    """

    def __init__(self, backend, dtype):
        self.backend = backend
        self.array = backend.xp.zeros(2, dtype=dtype)

    def set_rate(self, rate):
        """Enqueue ``array[0] = rate`` (eta / B) on the main stream."""
        backend = self.backend
        backend.launch(backend.main, "eta / B", backend.ops.set_element, self.array, 0, rate)

    def refusal(self):
        """The refusal code, read on the host: call it once the steps have run (``synchronize()``)."""
        return int(self.array[1])

    def clear(self):
        """Enqueue ``array[1] = 0`` on the main stream: the steps enqueued after it update again."""
        backend = self.backend
        backend.launch(backend.main, "clear refusal", backend.ops.set_element, self.array, 1, 0)

    @staticmethod
    def codes(l):
        """The refusal codes of ``(nabla_w^l, nabla_b^l)``."""
        return 2 * l, 2 * l + 1

    @staticmethod
    def gradient(code):
        """The gradient a refusal code names, e.g. ``"nabla_w[3]"``."""
        return f"{('nabla_w', 'nabla_b')[code % 2]}[{code // 2}]"


class Streams:
    """The streams a schedule runs a pass on: the backend's ``main`` stream, its first ``workers(k)``,
    and the join event F_j of each worker (``worker_done``), made on first use. The MLP's ``Plan`` and
    the recurrent network's pass are both."""

    def __init__(self, backend):
        self.backend, self.main, self._worker_done = backend, backend.main, {}

    def workers(self, k):
        """The first ``k`` worker streams of the backend."""
        return self.backend.workers(k)

    def worker_done(self, j):
        """The join event F_j of worker j, created on first use."""
        if j not in self._worker_done:
            self._worker_done[j] = self.backend.event(f"F_{j}")
        return self._worker_done[j]


class Plan(Streams):
    """Everything one network needs at one batch size B, allocated once, and the launches that use it.

    Buffers (NaN until written, so that reading one too early shows in the result): ``a[1]`` (n_1, B);
    for l = 2..L ``z[l]``, ``a[l]``, ``sp[l]`` (sigma'(z^l)), ``delta[l]``, all (n_l, B) in the backend's
    ``batch_order`` (Fortran order on the host, C order on a GPU), ``nabla_w[l]``
    (n_l, n_{l-1}), ``nabla_b[l]`` (n_l,); ``y`` (n_L, B); ``scratch[l]``, what the updates stream
    through (the one-pass sweep needs none). ``w`` and ``b`` are the network's parameters themselves, not
    copies (steps write them as they run: read them in stream order, or use ``MLP.weights``), ``controls``
    its ``Controls``.
    Events: ``delta_ready[l]`` (E_l, recorded once delta^l is written) and the workers' joins
    (``worker_done``).

    Caches, filled on first use: ``graphs`` (the steps captured by ``graphs.step``, by schedule),
    ``naumov`` (Naumov's buffers, by solver), ``chosen`` (the schedules ``autotune.choose`` picked, by
    candidates). ``reducer``: the ``data_parallel.Reducer`` that sums the gradients across ranks (then
    ``nabla_w`` and ``nabla_b`` are views of its flat buffer), or None. ``empty``: this rank's share of
    the batch loaded last has no column.
    """

    def __init__(self, net, batch, w, b, controls):
        backend, xp, n = net.backend, net.backend.xp, dict(enumerate(net.sizes, start=1))
        super().__init__(backend)
        self.sizes, self.n, self.L, self.layers, self.batch = net.sizes, n, net.L, net.layers, batch
        self.dtype, self.cost, self.check_finite = net.dtype, net.cost, net.check_finite
        self.activation = {l: net.output_activation if l == net.L else net.activation for l in net.layers}
        self.w, self.b, self.controls = w, b, controls

        def buffer(*shape, order="C"):
            return xp.full(shape, np.nan, dtype=net.dtype, order=order)

        def columns(rows):  # (rows, B), in the backend's order for minibatches
            return buffer(rows, batch, order=backend.batch_order)

        self.a = {1: columns(n[1])}
        self.z, self.sp, self.delta, self.nabla_w, self.nabla_b = {}, {}, {}, {}, {}
        for l in net.layers:
            self.z[l], self.a[l], self.sp[l], self.delta[l] = (columns(n[l]) for _ in range(4))
            self.nabla_w[l] = buffer(n[l], n[l - 1])
            self.nabla_b[l] = buffer(n[l])
        self.y = columns(n[net.L])
        chunk = backend.ops.SCRATCH
        self.scratch = {l: xp.empty(max(min(chunk, n[l] * n[l - 1]), n[l], n[l - 1]), dtype=net.dtype)
                        if chunk else None for l in net.layers}
        self.delta_ready = {l: backend.event(f"E_{l}") for l in net.layers}
        self.graphs, self.naumov, self.chosen = {}, {}, {}
        self.empty = False
        self.reducer = None if net.comm is None else Reducer(self, net.comm)
        backend.synchronize()  # allocation ran on CuPy's default stream, which the others do not wait for

    def __repr__(self):
        return f"Plan(B={self.batch}, sizes={self.sizes})"

    # -- the launches -------------------------------------------------------------------------------

    def load(self, x, y=None):
        """Enqueue on the main stream the copies of a checked batch: ``x`` (n_1, B) into a^1 and ``y``
        (n_L, B), if given, into ``y``. A batch of no column (this rank's empty share, data-parallel)
        copies nothing and marks the plan ``empty``."""
        self.empty = not x.shape[1]
        if not self.empty:
            self.backend.copy_in(self.main, self.a[1], x)
            if y is not None:
                self.backend.copy_in(self.main, self.y, y)

    def forward(self, l=None):
        """Enqueue (2)(3) of layer l on the main stream; without l, of every layer, in an NVTX range."""
        with self._range("forward", l):
            for l in self.layers if l is None else (l,):
                self.backend.launch(self.main, f"z[{l}]", self.backend.ops.forward, self.z[l], self.a[l], self.sp[l],
                                    self.w[l], self.a[l - 1], self.b[l], self.activation[l])

    def error(self, l):
        """Enqueue delta^l, the error of layer l, into ``delta[l]`` on the main stream: (4) for the output
        layer, (5) below it."""
        backend = self.backend
        if l == self.L:
            backend.launch(self.main, f"delta[{l}]", backend.ops.delta_output, self.delta[l], self.a[l], self.y,
                           self.sp[l], self.cost)
        else:
            backend.launch(self.main, f"delta[{l}]", backend.ops.backward, self.delta[l], self.w[l + 1],
                           self.delta[l + 1], self.sp[l])

    def error_update(self, l, controls):
        """Enqueue on the main stream (5) of a layer l < L and the SGD update of w^{l+1} by ``controls``
        in one sweep over w^{l+1} (``ops.backward_update``): delta^l is w^{l+1}'s last read in the pass."""
        backend = self.backend
        backend.launch(self.main, f"delta[{l}]+update[{l + 1}]", backend.ops.backward_update, self.delta[l],
                       self.w[l + 1], self.delta[l + 1], self.sp[l], self.a[l], controls.array)

    def rank_update(self, l, controls):
        """Enqueue on the main stream the SGD update of w^l alone by ``controls``, in place, as the sweep
        updates the layers above (``ops.rank_update``): w^2, which no (5) reads."""
        backend = self.backend
        backend.launch(self.main, f"update_w[{l}]", backend.ops.rank_update, self.w[l], self.delta[l],
                       self.a[l - 1], controls.array)

    def gradients(self, stream, l, controls=None, weights=True):
        """Enqueue (6) and (7) of layer l on ``stream`` and hand them to the reducer, if any; with
        ``controls`` (a ``Controls``), the SGD update fused into (7): b^l -= eta/B nabla_b^l, and
        w^l -= eta/B delta^l (a^{l-1})^T without nabla_w^l ever written; ``weights=False`` (with
        ``controls``): (6) and the update of b^l only, w^l being updated by the one-pass sweep."""
        ops, launch = self.backend.ops, self.backend.launch
        if controls is None:
            launch(stream, f"gradients[{l}]", ops.gradients, self.nabla_w[l], self.nabla_b[l], self.delta[l],
                   self.a[l - 1])
        elif not weights:
            launch(stream, f"nabla_b[{l}]", ops.nabla_b, self.nabla_b[l], self.delta[l])
            launch(stream, f"update_b[{l}]", ops.sgd_update, self.b[l], self.nabla_b[l], controls.array,
                   self.scratch[l])
        else:
            launch(stream, f"nabla_b[{l}]", ops.nabla_b, self.nabla_b[l], self.delta[l])
            launch(stream, f"fused_update[{l}]", _calls,
                   (ops.sgd_update, self.b[l], self.nabla_b[l], controls.array, self.scratch[l]),
                   (ops.fused_update, self.w[l], self.delta[l], self.a[l - 1], controls.array, self.scratch[l]))
        if self.reducer is not None:
            self.reducer.ready(stream, l)

    def update(self, l=None):
        """Enqueue the SGD update of layer l on the main stream, w^l -= eta/B nabla_w^l and b^l alike, by
        the controls; without l, of every layer, in an NVTX range."""
        ops, controls = self.backend.ops, self.controls.array
        with self._range("update", l):
            for l in self.layers if l is None else (l,):
                self.backend.launch(self.main, f"update[{l}]", ops.update, self.w[l], self.nabla_w[l], self.b[l],
                                    self.nabla_b[l], controls, self.scratch[l])

    def check_gradients(self):
        """Enqueue on the main stream the check of every gradient for NaN and Inf, deepest first, which
        leaves its refusal code in the controls (``Controls``)."""
        check, controls, checks = self.backend.ops.check_finite, self.controls.array, []
        for l in reversed(self.layers):
            w_code, b_code = Controls.codes(l)
            checks += [(check, controls, self.nabla_w[l], w_code), (check, controls, self.nabla_b[l], b_code)]
        self.backend.launch(self.main, "check_finite", _calls, *checks)

    def _range(self, name, l):
        """The NVTX range ``name`` around the launches of every layer (``l`` None), else none."""
        return self.backend.range(self.main, name) if l is None else contextlib.nullcontext()

    # -- passes -------------------------------------------------------------------------------------

    def backward(self, schedule, controls=None):
        """Enqueue (4)-(7) under ``schedule``, in an NVTX range, the gradients summed across ranks when
        there is a reducer; ``controls``: fuse the update into (7) where the schedule fuses.
        ``Leapfrog("auto")`` runs the schedule ``autotune.choose`` picks for this plan."""
        if schedule.k == "auto":
            schedule = autotune.choose(self, fused=schedule.fused)
        summed = contextlib.nullcontext() if self.reducer is None else self.reducer.pass_()
        with self.backend.range(self.main, "backward"), summed:
            schedule.backward(self, controls)

    def backprop(self, schedule, controls=None):
        """Enqueue the pass on the batch loaded: (1)-(7) under ``schedule`` (an empty share adds zeros
        to the sums across ranks), then, if the network checks them, the check of the gradients."""
        if self.empty:
            self.reducer.add_zeros()
        else:
            self.forward()
            self.backward(schedule, controls)
        if self.check_finite:
            self.check_gradients()
        if self.backend.poisons:  # after the join nothing reads what the pass computed, but the gradients
            self.backend.launch(self.main, "poison", poison, self.a, self.z, self.sp, self.delta, {0: self.y})

    def sgd_step(self, schedule):
        """Enqueue what follows the copies of an SGD step (what a graph holds): the pass, with the
        update fused into (7) where ``schedule`` fuses, else the update after the join."""
        self.backprop(schedule, self.controls)
        if not schedule.fused:
            self.update()
        if self.backend.poisons:
            self.backend.launch(self.main, "poison", poison, self.nabla_w, self.nabla_b)


def poison(*buffers):
    """Fill every array of the given per-layer dicts with NaN: they are dead until written again."""
    for group in buffers:
        for array in group.values():
            array.fill(np.nan)


def _calls(*calls):
    """Run each ``(op, *args)`` in turn: the ops of one launch."""
    for op, *args in calls:
        op(*args)
