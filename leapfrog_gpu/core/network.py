"""The network base: what ``MLP``, ``RNN`` and ``DagNet`` share.

A network owns its backend when it made it by name (and closes it), takes the step controls in device memory
(``Controls``), keeps a plan per batch shape (``core.plan.Plan``: its buffers and events; the ``PLANS`` last used),
hands out copies that no later step writes, and takes its parameters in and out by one protocol, ``{unit: {name:
array}}`` (``core.parameters``): ``parameters()`` gives copies, ``set_parameters(params)`` checks every given array
before it copies any. The public passes (``feedforward``, ``gradients``, ``train_step`` by an optimizer of
``core.optimizers``, ``sgd_step``; ``fit``, ``evaluate`` and ``predict`` over a dataset, ``core.fitting``), their
checks (the learning rate, a schedule the network can run, graph mode) and data parallelism (``join``: a communicator
over which every rank sums its gradients, ``parallel.reducer``) are written here once, over the plan's pass and step
(``core.plan``); the optimizer's state beside the parameters in ``core.optimizer_state``; one thread at a time in its
calls (``core.serial``).

A network's batch is an array whose last axis holds its B samples (the MLP's and the DagNet's (n_1, B), the
RNN's (tau, n_1, B)); its plan is kept by the batch's shape less its width, then B. Targets may be integer class
labels, the targets' shape less their axis of outputs, one-hot encoded for outputs of classes (``checks.targets``).
"""

import contextlib
import weakref

from ..parallel import reducer
from . import capture, fitting, interrupts, optimizers, parameters, saving, schedules
from .checks import check_dtype, check_eta, check_flag, open_backend, shape_of, shown, targets
from .controls import Controls
from .convergence import Solver
from .optimizer_state import OptimizerState
from .serial import OneThreadAtATime, lock

PLANS = 8
"""The plans a network keeps, the last used: each holds every buffer of a pass at its batch shape (a [1024] * 16 MLP's
at B = 1, 68 MB in float32), so that a network fed batches of many sizes holds a bounded memory. Data-parallel, every
plan is kept: a plan is a rank's share of B, and ranks that let theirs go by shares that differ would capture graphs
at other steps, where every rank must capture at the same (``core.capture``)."""


class Network(OneThreadAtATime, OptimizerState):
    """The shell of a network on ``backend`` in ``dtype``; ``check_finite``: refuse an update whose
    gradients hold a NaN or an Inf (``Controls``).

    A subclass sets ``NOUN`` (its name with its article, for errors), ``SCHEDULES`` (the schedule classes
    it runs) and gives ``_live()``, its parameters ``{unit: {name: array}}`` as it holds them (the arrays
    that steps update), ``_label(unit, name)``, a parameter's name in an error, ``_check_batch(x, y)``,
    ``_outputs()`` (the output's width and activation, or its layer) and ``plan(*shape)``; ``_check_solver``
    where it takes a forward solver.
    """

    NOUN = "a network"
    SCHEDULES = ()
    SOLVERS = None  # the forward solvers its passes take, in words for an error (None: none)
    ONE_PASS = False  # whether it has the one-pass sweep of one_pass=True (the MLP's, on the NumPy backend)
    CAPTURE_REFUSALS = {}  # why its steps cannot be captured as graphs, by backend (core.capture.refusal)

    def __init__(self, dtype, backend, check_finite=False):
        self.dtype = check_dtype(dtype)
        self.check_finite = check_flag("check_finite", check_finite)
        self.backend, self._owns_backend = open_backend(backend)
        if self._owns_backend:  # collected unclosed, it releases its backend without a wait (never on self)
            weakref.finalize(self, self.backend.release)
        self._controls = Controls(self.backend, self.dtype)
        self._rule, self._steps = None, 0  # the rule of the optimizer state held (None: none), its step count t
        self._held, self._rates = None, []  # the optimizer that made that state; the lrs of the steps enqueued
        self._stepped = False  # a step since the last wait
        self._plans, self.comm, self._closed, self._summing = {}, None, False, False

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, kind, *exc):
        with contextlib.suppress(*(() if kind is None else (Exception,))):  # an error on its way out: none over it
            self.close()

    def __reduce_ex__(self, protocol):  # what copy.copy, copy.deepcopy and pickle ask for
        raise TypeError(f"{self.NOUN} cannot be copied or pickled (a copy would share its buffers and streams): save() "
                        "it and load() it, or build another and set_parameters(net.parameters())")

    def close(self):
        """Wait for queued work, close the backend if this network created it, and raise what ``synchronize()``
        would of the steps not yet reported (closed all the same). A closed network runs nothing more, on a
        backend it was given too. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if not self.backend.closed:
                self._synchronize()
        finally:
            if self._owns_backend:
                self.backend.close()

    def synchronize(self):
        """Wait for every enqueued step; raise what went wrong in one: an exception on a stream, or
        (``check_finite``) a ``FloatingPointError`` for a refused update, which also clears it. Either way the
        step count is then that of the last step that updated (no update from the failed or refused one on ran)."""
        self._check_open()
        self._synchronize()

    def _synchronize(self):
        stepped, self._stepped = self._stepped, False
        self._wait()
        gradient, done = self._controls.read(self._steps)
        if gradient is not None:
            self._recount()
            self._controls.clear()
            refused = "update refused, parameters unchanged" if stepped else "check_finite=True refuses such gradients"
            raise FloatingPointError(f"{gradient} holds NaN or Inf; {refused}")
        self._check_count(done)

    def _wait(self):
        """``backend.synchronize()``; where it raises (a step failed on a stream), the step count is first taken back
        to that of the last step that updated (and ``_lost_sums``). A Ctrl-C in the wait leaves the count: the steps
        run on."""
        try:
            self.backend.synchronize()
        except Exception:
            self._recount()
            self._lost_sums()
            raise
        self._summing = False

    def _lost_sums(self):
        """A summed pass enqueued since the last wait that completed may not have issued its sums (a failure on a
        stream, or as it was enqueued): data-parallel, the other ranks wait in them, and no later sum of this rank
        may pair with theirs (``Communicator.unpair``)."""
        if self.comm is not None and self._summing:
            self.comm.unpair(f"a step of this {type(self).__name__} failed on rank {self.comm.rank}")

    # -- parameters ---------------------------------------------------------------------------------

    def parameters(self):
        """Copies of every parameter, ``{unit: {name: array}}`` (a layer number or a node name, then
        ``"w"``, ``"b"``, ...), as they are once the steps enqueued so far have run."""
        return self._handed_out(self._live())

    def set_parameters(self, params):
        """Copy ``params`` in: ``{unit: {name: array}}`` as ``parameters()`` gives, or any part of it; arrays
        (or nested lists) on the host or on this backend's device, of the shapes the network holds, finite.
        All are checked, and the steps enqueued waited for (raising as ``synchronize``), before any is copied; an
        error changes nothing. Later writes to the given arrays do not reach the network."""
        checked = parameters.check(params, self._live(), self.dtype, self.backend.xp, self._label)
        self._check_open()
        self._synchronize()  # a refusal of check_finite pending: raised, not left to refuse the next step
        for target, value in checked:
            target[...] = self.backend.xp.asarray(value)
        self._wait()

    def save(self, path):
        """Write this network to ``path`` (``.npz`` appended to a name without it) as one file, whole or not at all:
        its architecture and options, parameters and optimizer state (``core.saving``); ``leapfrog_gpu.load(path)``
        builds it again. Returns the path written."""
        return saving.save(self, path)

    def structure(self):
        """What every rank of a data-parallel network must build alike: its kind, dtype and the shapes of
        its parameters (a network adds its own choices: activations, cost, ...)."""
        return {"network": type(self).__name__, "dtype": self.dtype,
                "parameters": [[repr(unit), name, list(array.shape)] for unit, named in self._live().items()
                               for name, array in named.items()]}

    def gradient_layout(self):
        """``[(unit, {name: shape})]``: the gradients of every unit in the order the schedules hand them over,
        the deepest unit first (what ``parallel.reducer.Reducer`` lays out and sums in)."""
        return [(unit, {name: tuple(array.shape) for name, array in named.items()})
                for unit, named in reversed(list(self._live().items()))]

    def _join(self, comm):
        """Join ``comm`` (None: run alone): with more than one rank every rank takes rank 0's parameters and
        each plan sums its gradients across ranks (``parallel.reducer``)."""
        with lock(self.backend):  # its wait, as a call's (``core.serial``)
            self._wait()
        try:
            self.comm = reducer.attach(self, comm)
        except BaseException:
            self.close()
            raise

    def _live(self):
        raise NotImplementedError

    def _label(self, unit, name):
        return f"{name} of {unit!r}"

    # -- the public passes ----------------------------------------------------------------------------------

    def feedforward(self, x, solver=None):
        """The network's output for the batch ``x``, a copy; the forward pass by ``solver`` where the network
        takes one (None: layer by layer, node by node, step by step)."""
        solver = self._check_solver(solver)
        plan, _ = self._load(x, None, share=False, solver=solver)
        plan.forward(solver)
        return self._handed_out(plan.output)

    def gradients(self, x, y, schedule=None, *, solver=None):
        """The gradients of the cost on the batch, summed over it (with a communicator: over every rank's share
        of it), under ``schedule`` (None: ``Sequential()``): copies shaped as ``parameters()``, ``{unit: {name:
        array}}``. With ``check_finite``, a ``FloatingPointError`` where one holds NaN or Inf (the steps enqueued
        before it are waited for first, and their refusal raised as theirs)."""
        schedule, solver = self._check_schedule(schedule), self._check_solver(solver)
        self.synchronize()
        plan, _ = self._load(x, self._targets(x, y), schedule, solver=solver)
        try:
            plan.backprop(schedule, None, solver)
        except Exception:  # raised as it was enqueued (the serial mode's streams)
            self._lost_sums()
            raise
        return self._handed_out(plan.gradient_arrays)

    def backprop(self, x, y, schedule=None, solver=None):
        """``gradients``: the gradients summed over the batch, ``{unit: {name: array}}``."""
        return self.gradients(x, y, schedule, solver=solver)

    def train_step(self, x, y, optimizer, schedule=None, *, graph=False, solver=None, clip=None):
        """One step of ``optimizer`` (``SGD``, ``Adam``, ``AdamW`` of ``core.optimizers``) on the batch;
        enqueued, not awaited.

        ``x`` and ``y`` are copied before this returns; reading a parameter (or ``synchronize()``) waits for
        the step and raises any error it met. With a communicator every rank passes the same batch and
        computes on its share of the samples; B is the whole batch's size. ``solver``: the forward pass's,
        where the network takes one. Under a fused schedule each unit's update runs on its worker right after
        its gradients (a long layer's in halves with the main stream under one worker on the host); else every
        update runs after the join. ``clip``: scale the gradients first so that the
        norm of the batch-mean gradient is at most ``clip`` (``torch.nn.utils.clip_grad_norm_``), which needs
        every gradient before any update: an unfused schedule only.

        An optimizer other than the plain ``SGD(eta)`` keeps its state (momentum buffer, moments) and the step count
        t in the network's device memory (``optimizer_state()``), made by its first step; a step by an optimizer of
        another kind or other hyper-parameters than that state's (lr aside) raises (``set_optimizer_state`` switches).

        ``graph=True`` runs the step as a graph (``core.capture``): the first call at a batch shape, schedule
        and optimizer rule runs the step and captures it (``Leapfrog("auto")``'s first at a batch size runs
        eagerly, choosing k); later calls copy the batch, lr and t in and launch that graph, with no planning in
        between. A step that cannot be captured raises a ``ValueError``."""
        self._check_open()  # first: no other fault of a closed network's matters
        optimizer = optimizers.check(optimizer)
        schedule, solver = self._check_step(schedule, graph, solver)
        clip = optimizers.check_clip(clip, schedule, graph, self.backend.name)
        self._check_optimizer(optimizer)
        plan, samples = self._load(x, self._targets(x, y), schedule, solver=solver)
        if graph:
            key = capture.key(samples, schedule, self.check_finite, (optimizer.rule(), clip))
            graph = capture.ready(plan, key, schedule)  # not Leapfrog("auto")'s first step at B: that one is eager
        with interrupts.held():  # a Ctrl-C meanwhile is raised once the step is enqueued whole
            controls, self._stepped = self._controls, True
            if optimizer.plain:
                controls.set_rate(optimizer.lr / samples)
            elif self._rule is None:
                self._make_state(optimizer)
            if not optimizer.plain:
                self._count_step(optimizer)
            if not optimizer.plain or clip is not None:
                controls.set_step(optimizer.controls(samples, self._steps))
            controls.optimizer = optimizer

            def step():
                plan.step(schedule, controls, solver, clip)
                if not optimizer.plain:
                    controls.mark_done()

            try:
                if graph:
                    capture.step(plan, key, step, schedule)
                else:
                    step()
            except BaseException:  # raised as it was enqueued (the serial mode's streams)
                self._lost_sums()
                self._wait()
                self._recount()
                raise
            self.backend.keep(plan, controls.array, reader=self)  # a network dropped meanwhile goes after its step

    def sgd_step(self, x, y, eta, schedule=None, *, graph=False, solver=None):
        """One SGD step on the batch: every parameter ``-= eta / B *`` its gradient (``train_step`` by ``SGD(eta)``)."""
        self._check_open()  # first: no other fault of a closed network's matters
        self.train_step(x, y, optimizers.SGD(check_eta(eta)), schedule, graph=graph, solver=solver)

    # -- a dataset in batches (``core.fitting``) ---------------------------------------------------------------

    fit = fitting.fit  # the network is its ``net``: its signature and docstring as they are there

    def evaluate(self, x, y, batch_size=fitting.EVAL_BATCH, solver=None):
        """``{"loss": ..., "accuracy": ...}`` on ``x`` and ``y`` (``"mse"`` for targets that are not classes), in
        batches (``core.fitting.evaluate``)."""
        return fitting.evaluate(self, x, y, batch_size, solver)

    def predict(self, x, batch_size=fitting.EVAL_BATCH, solver=None):
        """The outputs for ``x``, on the host, in batches (``core.fitting.predict``)."""
        return fitting.predict(self, x, batch_size, solver)

    # -- what every pass shares ------------------------------------------------------------------------------

    def _load(self, x, y, schedule=None, share=True, solver=None):
        """Check the batch (``y`` from ``_targets``; None: inputs alone), take this rank's share of its samples
        (with a communicator and ``share``), check that ``schedule`` can run a pass of the largest share's shape
        (``_check_pass``, alike on every rank) and ``solver`` solve its forward pass (``Solver.check``), and enqueue
        its copy into its plan; return the plan and the whole batch's size B. A rank whose share is empty (a batch
        smaller than the ranks) gets a plan marked ``empty``."""
        x, y = self._check_batch(x, y)
        samples = largest = x.shape[-1]
        if self.comm is not None and share:
            self.comm.check_paired()
            self._summing = True  # until a wait completes (``_lost_sums``)
            columns, largest = self.comm.share(samples), -(-samples // self.comm.size)  # rank 0's share
            x, y = x[..., columns], None if y is None else y[..., columns]
        shape, checked = (*x.shape[:-2], max(x.shape[-1], 1)), (*x.shape[:-2], max(largest, 1))
        if schedule is not None:
            self._check_pass(schedule, checked)
        if solver is not None:
            solver.check(self, checked)
        plan = self.plan(*shape)
        plan.load(x, y)
        return plan, samples

    def _targets(self, x, y):
        """``y`` as targets (a ValueError if None): where it has the shape of ``_labels``, a single output's values
        or the one-hot targets of integer class labels (``checks.targets``)."""
        if y is None:
            raise ValueError("y (the targets) is required: pass the batch's targets, or integer class labels")
        shape, axis = self._labels(shape_of("x", x))
        if len(shape_of("y", y)) == len(shape):  # labels (of any count) are read against inputs that are a batch
            self._check_batch(x, None)  # or x is what is wrong
        return targets(self.backend.xp, y, shape, axis, *self._outputs(), self.dtype, self.NOUN, self.cost)

    def _labels(self, x_shape):
        """The targets' shape less their axis of outputs for inputs of ``x_shape`` (x's less its axis of inputs),
        and where that axis goes: ``(shape, axis)``."""
        return tuple(x_shape[1:]), 0

    def _check_pass(self, schedule, shape):
        """Raise before a plan of ``shape``, (B,), is made if ``schedule`` cannot run a pass of it: its memory check
        (``Schedule.check_memory``)."""
        schedule.check_memory(self, *shape)

    def _handed_out(self, arrays):
        """Copies of ``arrays`` (an array, or lists and dicts of them; or a function giving them once what is enqueued
        has run), made then on the caller's stream under the network's lock and the backend's, complete on return: no
        later step, nor another thread's (``weights`` is a property, no ``SERIAL`` call), writes them, and on CuPy
        their memory is the caller's stream's, which no stream of the network takes back while the caller's work on
        them is queued."""
        with lock(self), lock(self.backend):
            self.synchronize()
            copies = parameters.copies(arrays() if callable(arrays) else arrays)
            self._wait()
            return copies

    def _check_open(self):
        if self._closed or self.backend.closed:
            raise RuntimeError(f"this {type(self).__name__} is closed: build a new one" if self._closed else
                               f"the backend of this {type(self).__name__} is closed: build a new network")

    def _check_step(self, schedule, graph=False, solver=None):
        """The checks of a step: ``schedule`` (None: ``Sequential()``), ``graph``, ``solver``; returns the two."""
        schedule = self._check_schedule(schedule)
        solver = self._check_solver(solver)
        if schedule.fused and self.check_finite:
            raise ValueError(f"check_finite needs an unfused schedule ({schedule!r} updates w before the "
                             f"join, where the check runs); pass {schedule.unfused} or check_finite=False")
        graph = check_flag("graph", graph)
        if graph:
            capture.check(self, schedule)
        if graph and self.backend.timeline is not None:
            raise ValueError("graph=True while a timing.Timeline stamps this backend's launches: a graph step is "
                             "one launch, with nothing inside it to stamp; take the timeline of eager steps "
                             "(graph=False), or end the timeline's step() first")
        if graph and solver is not None:
            raise ValueError(f"graph=True captures the step-by-step forward pass; {solver!r} stops on a residual "
                             "read on the host: pass graph=False, or solver=None")
        if schedule.one_pass and self.backend.name != "numpy":
            raise ValueError(f"{schedule!r} runs on the NumPy backend only: the CUDA kernels have no one-pass "
                             f"sweep of (5) and the update; pass {schedule.without_one_pass}")
        reducer.check_schedule(self.comm, schedule)
        return schedule, solver

    def _check_schedule(self, schedule):
        """``schedule`` (None: ``Sequential()``) if this network runs it, else a TypeError naming those it runs;
        a ValueError for ``one_pass=True`` on a network without its sweep."""
        schedule = schedules.check(schedule, self.NOUN, self.SCHEDULES)
        if schedule.one_pass and not self.ONE_PASS:
            raise ValueError(f"{self.NOUN} has no one-pass sweep (one_pass=True updates w inside the MLP's (5)); "
                             f"pass fused=True instead: {type(schedule).__name__}("
                             f"{'' if schedule.k == 0 else f'{schedule.k!r}, '}fused=True)")
        return schedule

    def _check_solver(self, solver):
        """``solver`` if this network's forward pass takes it (None always: no solver), else a TypeError."""
        if solver is None or (self.SOLVERS and isinstance(solver, Solver) and solver.network == type(self).__name__):
            return solver
        if not self.SOLVERS:
            raise TypeError(f"{self.NOUN} takes a forward solver in feedforward only; got solver={solver!r}: pass None")
        raise TypeError(f"solver must be {self.SOLVERS}; got {shown(solver)}")

    def _plan(self, key, make):
        """The plan of this network at ``key`` (its batch shape): ``make()`` on first use, then kept while it is among
        the ``PLANS`` last used (one let go is held by what is enqueued on it until that has run)."""
        self._check_open()
        plan = self._plans.pop(key, None)
        self._plans[key] = make() if plan is None else plan  # the last used last
        while len(self._plans) > PLANS and self.comm is None:  # ranks' shares differ: each would let others go
            del self._plans[next(iter(self._plans))]
        return self._plans[key]
