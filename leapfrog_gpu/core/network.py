"""The network base: what ``MLP``, ``RNN`` and ``GraphNet`` share.

A network owns its backend when it made it by name (and closes it), takes the step controls in device
memory (``Controls``), keeps one plan per batch shape (``core.plan.Plan``: its buffers and events), hands
out copies that no later step writes, and takes its parameters in and out by one protocol,
``{unit: {name: array}}`` (``core.parameters``): ``parameters()`` gives copies, ``set_parameters(params)``
checks every given array before it copies any. The checks of a step (the learning rate, a schedule the
network can run, graph mode) and data parallelism (``join``: a communicator over which every rank sums its
gradients, ``parallel.reducer``) are written here once.
"""

from ..parallel import reducer
from . import parameters, schedules
from .checks import check_dtype, check_eta, open_backend
from .controls import Controls


class Network:
    """The shell of a network on ``backend`` in ``dtype``; ``check_finite``: refuse an update whose
    gradients hold a NaN or an Inf (``Controls``).

    A subclass sets ``NOUN`` (its name with its article, for errors), ``SCHEDULES`` (the schedule classes
    it runs) and gives ``_live()``, its parameters ``{unit: {name: array}}`` as it holds them (the arrays
    that steps update), and ``_label(unit, name)``, a parameter's name in an error.
    """

    NOUN = "a network"
    SCHEDULES = ()

    def __init__(self, dtype, backend, check_finite=False):
        self.dtype = check_dtype(dtype)
        self.check_finite = bool(check_finite)
        self.backend, self._owns_backend = open_backend(backend)
        self._controls = Controls(self.backend, self.dtype)
        self._plans = {}
        self.comm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Wait for queued work; close the backend if this network created it. Safe to call twice."""
        if self._owns_backend:
            self.backend.close()
        elif not self.backend.closed:
            self.backend.synchronize()

    def synchronize(self):
        """Wait for every enqueued step; raise what went wrong in one: an exception on a stream, or
        (``check_finite``) a ``FloatingPointError`` for a refused update, which also clears it."""
        self._check_open()
        self.backend.synchronize()
        refused = self._controls.refused()
        if refused is not None:
            self._controls.clear()
            raise FloatingPointError(f"{refused} holds NaN or Inf; update refused, parameters unchanged")

    # -- parameters ---------------------------------------------------------------------------------

    def parameters(self):
        """Copies of every parameter, ``{unit: {name: array}}`` (a layer number or a node name, then
        ``"w"``, ``"b"``, ...), as they are once the steps enqueued so far have run."""
        return self._handed_out(self._live())

    def set_parameters(self, params):
        """Copy ``params`` in: ``{unit: {name: array}}`` as ``parameters()`` gives, or any part of it; arrays
        (or nested lists) on the host or on this backend's device, of the shapes the network holds, finite.
        All are checked before any is copied; an error names the parameter and changes nothing. Later writes
        to the given arrays do not reach the network."""
        checked = parameters.check(params, self._live(), self.dtype, self.backend.xp, self._label)
        self._check_open()
        self.backend.synchronize()
        xp = self.backend.xp
        for target, value in checked:
            target[...] = xp.asarray(value)
        self.backend.synchronize()

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
        self.backend.synchronize()
        try:
            self.comm = reducer.attach(self, comm)
        except BaseException:
            self.close()
            raise

    def _live(self):
        raise NotImplementedError

    def _label(self, unit, name):
        return f"{name} of {unit!r}"

    # -- what every step shares ---------------------------------------------------------------------

    def _handed_out(self, arrays):
        """Copies of ``arrays`` (an array, or lists and dicts of them; or a function that gives them once the
        main stream has run what is enqueued there), made on the main stream behind that work and complete
        on return: the caller may read them on any stream, and no later step writes them. Raises what
        ``synchronize()`` raises."""
        self._check_open()
        copies = []
        self.backend.launch(self.backend.main, "copy_out",
                            lambda: copies.append(_copy(arrays() if callable(arrays) else arrays)))
        self.synchronize()
        return copies[0]

    def _check_open(self):
        if self.backend.closed:
            raise RuntimeError(f"this {type(self).__name__} is closed (its backend is): build a new one")

    def _check_step(self, eta, schedule, graph=False):
        """The checks of an SGD step: ``eta``, the ``schedule`` (None: ``Sequential()``), which it returns,
        and ``graph``."""
        check_eta(eta)
        schedule = self._check_schedule(schedule)
        if schedule.fused and self.check_finite:
            raise ValueError(f"check_finite needs an unfused schedule ({schedule!r} updates w before the "
                             "join, where the check runs); pass fused=False or check_finite=False")
        if not isinstance(graph, bool):
            raise TypeError(f"graph must be True or False; got {graph!r}")
        if graph and self.backend.timeline is not None:
            raise ValueError("graph=True while a timing.Timeline stamps this backend's launches: a graph step is "
                             "one launch, with nothing inside it to stamp; take the timeline of eager steps "
                             "(graph=False), or end the timeline's step() first")
        reducer.check_schedule(self.comm, schedule, graph)
        return schedule

    def _check_schedule(self, schedule):
        """``schedule`` (None: ``Sequential()``) if this network runs it, else a TypeError naming those it runs."""
        return schedules.check(schedule, self.NOUN, self.SCHEDULES)

    def _plan(self, key, make):
        """The plan of this network at ``key`` (its batch shape): ``make()`` on first use, then kept."""
        self._check_open()
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = make()
        return plan


def _copy(arrays):
    if isinstance(arrays, dict):
        return {key: _copy(value) for key, value in arrays.items()}
    if isinstance(arrays, (list, tuple)):
        return [_copy(value) for value in arrays]
    return arrays.copy()
