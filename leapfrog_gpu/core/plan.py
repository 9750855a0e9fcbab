"""A network's pass at one batch shape: the streams it runs on, its events and its buffers, made once; and the
pass and the step, written once over what each network's pass gives.

The MLP's pass (``mlp.plan.MLPPlan``), the RNN's (``RNNPlan``) and the DAG's (``DagPlan``) are each one of these.
Every buffer starts filled with NaN, so that a read before its write shows in the result; every event is made on
first use and kept, so that a pass makes none after its first (``E_u``: the main stream is past what unit u's
gradients wait for; ``F_j``: worker j is done; ``G_u``: a halved unit's gradients are done; a network's own, as the
MLP's ``S_l`` and ``H_l``). ``captured`` holds the steps graph mode captured on this plan (``core.capture``),
``eager`` the keys of those it ran eagerly first.

What a network's pass gives (a unit is a layer or a node that has parameters): ``load(x, y)``,
``forward(solver)``, ``chain(schedule, controls)``, ``last_reader(unit)``, ``gradients(stream, unit,
controls)``, ``update(stream, unit, controls)``, ``joint_update(controls)`` and ``halved(schedule)``
(what ``core.driver`` runs), ``check_gradients(controls)``, ``gradient_arrays()`` and ``output()``; ``units``
lists its units in order.
"""

import numpy as np

from . import driver


class Plan:
    """Streams, events and buffers of one pass of ``net`` at ``batch`` columns, on its backend and in its dtype;
    ``index(unit)`` chooses the worker of a unit's gradients; ``controls`` are the network's
    ``core.controls.Controls``.

    ``reducer``: the ``parallel.reducer.Reducer`` that sums the gradients across ranks, or None; ``empty``: this
    rank's share of the batch loaded last has no column; ``stats``: the counters of the last backward pass.
    """

    reducer = None
    empty = False

    def __init__(self, net, batch):
        backend = net.backend  # no reference to ``net`` kept here: a network and its plans are freed as it is
        self.check_finite, self.controls = net.check_finite, net._controls
        self.backend, self.xp, self.main, self.dtype, self.batch = backend, backend.xp, backend.main, net.dtype, batch
        self.units = list(net._live())
        self.captured = {}
        self.eager = set()  # the keys of the graph steps ``core.capture.ready`` ran eagerly (Leapfrog("auto"))
        self.chosen = {}  # what ``core.calibrate.choose`` picked for Leapfrog("auto"), by candidates
        self.stats = {}
        self._events = {}

    def workers(self, k):
        """The backend's first ``k`` worker streams."""
        return self.backend.workers(k)

    def event(self, name):
        """The event called ``name``, made on first use."""
        if name not in self._events:
            self._events[name] = self.backend.event(name)
        return self._events[name]

    def buffer(self, *shape, order="C"):
        """A new array of ``shape`` in the plan's dtype, filled with NaN."""
        return self.xp.full(shape, np.nan, dtype=self.dtype, order=order)

    def gradient(self, param):
        """A NaN-filled array for the gradient of ``param``, ``ops.full_beside`` it after its optimizer's slots."""
        return self.backend.ops.full_beside(param, 3, np.nan)

    def columns(self, rows):
        """A NaN-filled (rows, B) buffer of this plan's batch, in the backend's order for minibatches."""
        return self.buffer(rows, self.batch, order=self.backend.batch_order)

    def make_scratch(self, elements, least=1):
        """What an update of a parameter of ``elements`` elements streams through (``ops.SCRATCH`` at most,
        ``least`` at least), or None on a backend whose updates need none."""
        chunk = self.backend.ops.SCRATCH
        return self.xp.empty(max(min(chunk, elements), least), dtype=self.dtype) if chunk else None

    def index(self, unit):
        """The number of ``unit`` that chooses its worker (``index(unit) mod k``): a layer's own number."""
        return unit

    def last_reader(self, l):
        """In a chain of layers, the layer after whose delta the chain no longer reads w^l:
        delta^{l-1} = ((w^l)^T delta^l) * ..., and no delta reads w^2."""
        return max(l - 1, 2)

    def joint_update(self, controls):
        """Whether ``gradients(stream, unit, controls)`` makes a unit's update in its gradients' own pass, so that
        both wait for the unit's last reader; else the gradients run behind the unit's own event, the update
        (``update``) behind its last reader's."""
        return False

    def halved(self, schedule):
        """The units whose update under ``schedule`` the main stream halves with their worker once its chain is done
        (``core.driver``): a plan that lists any takes ``half`` ("top" or "bottom") in ``update``. None here."""
        return ()

    def resolve(self, schedule):
        """The schedule whose chain runs ``schedule`` on this network (itself, but where a network runs a shared
        schedule as one of its own)."""
        return schedule

    # -- the pass and the step, for every network ------------------------------------------------------------

    def backward(self, schedule, controls=None):
        """Enqueue the backward pass under ``schedule`` as a step runs it (``core.driver.backward``)."""
        self.stats = driver.backward(self, schedule, controls)
        return self.stats

    def run(self, schedule):
        """Enqueue the backward pass under ``schedule`` as it stands: no update, no sums across ranks, no range
        (a calibration's pass, ``core.calibrate``)."""
        return driver.run(self, schedule)

    def backprop(self, schedule, controls=None, solver=None):
        """Enqueue the pass on the batch loaded: the forward pass (by ``solver``, where the network takes one),
        the backward pass under ``schedule`` (an empty share adds zeros to the sums across ranks), then, if the
        network checks them, the check of the gradients."""
        if self.empty:
            self.add_zeros()
        else:
            self.forward(solver)
            self.backward(schedule, controls)
        if self.check_finite:
            self.check_gradients(self.controls)
        self.poison(self.dead_after_pass())

    def step(self, schedule, controls, solver=None, clip=None):
        """Enqueue what follows the copies of a step (what a graph holds): the pass, with the update by
        ``controls`` fused into the gradients where ``schedule`` fuses, else every unit's update after the
        join, on the main stream (also fused, on a rank whose share is empty: no pass ran its updates); with
        ``clip`` (unfused only), every gradient scaled first so that the norm of the batch-mean gradient is at
        most ``clip``, as ``torch.nn.utils.clip_grad_norm_`` does."""
        self.backprop(schedule, controls, solver)
        if clip is not None:
            backend = self.backend
            backend.launch(self.main, "clip", _clip, self.xp, backend.ops, self.gradient_arrays, controls.array, clip)
        if not schedule.fused or self.empty:
            with self.backend.range(self.main, "update"):
                for unit in self.units:
                    self.update(self.main, unit, controls)
        self.poison(self.dead_after_step())

    def add_zeros(self):
        """This rank's share of the batch is empty: it adds zero gradients to every sum across ranks."""
        self.reducer.add_zeros()

    def dead_after_pass(self):
        """The buffers (dicts of arrays) that nothing reads once a pass has joined: poisoned on a backend that
        asks for it (``backend.poisons``)."""
        return ()

    def dead_after_step(self):
        """The buffers that nothing reads once a step has updated."""
        return ()

    def poison(self, buffers):
        """Fill every array of the dicts ``buffers`` with NaN on the main stream, where the backend asks for it:
        a read the schedule does not wait for then reads NaN."""
        if self.backend.poisons and buffers:
            self.backend.launch(self.main, "poison", _poison, buffers)

    def allocated(self):
        """Call once the plan's buffers are made: CuPy allocates on its default stream, which ours do not
        wait for."""
        self.backend.synchronize()


def _clip(xp, ops, gradient_arrays, controls, clip):
    """nabla *= min(1, clip / (|nabla| / B + 1e-6)) for every gradient, |nabla| the norm of them all, its squares
    summed by ``ops.sum_squares`` (where float32 cannot hold them, in float64, as torch's norm on the CPU), 1 / B in
    ``controls[3]``; on the device, with no read on the host."""
    gradients = [g for named in gradient_arrays().values() for g in named.values()]
    if not gradients:  # a DagNet of Add and Concat nodes alone: nothing to scale
        return
    total = sum(ops.sum_squares(g) for g in gradients)
    scale = xp.minimum(clip / (xp.sqrt(total) * controls[3] + 1e-6), 1.0)
    for g in gradients:
        g *= scale.astype(g.dtype)


def _poison(buffers):
    for group in buffers:
        for array in group.values():
            array.fill(np.nan)
