"""Schedules of a backward pass: where the weight gradients run, and what each network takes.

Every network's chain runs on the main stream: the MLP's deltas layer by layer, the RNN's over layers
and time, a DAG's adjoints node by node. A schedule says where the gradients that nothing on the chain
needs run (``k`` worker streams through the hand-off, ``core.handoff``; ``k = 0``: the main stream, in
the chain's order) and whether the SGD update is fused into them. ``Sequential()`` and ``Leapfrog(k)``
are the schedules every network takes: the network's own chain in its own order, the gradients on the
main stream or on worker ``l mod k`` (the seed's levels mk + j). The others belong to one network each
(Naumov's solvers to the MLP, the scans over time to the RNN, the DAG's solvers to ``DagNet``), and a
network refuses a schedule it cannot run by name (``check``).

``fused=True`` folds the SGD update into the gradients during ``sgd_step`` (w -= eta/B * delta a^T, so
that nabla_w never goes to memory, but on the host at B > 1 for a layer beyond its cache block, ``mlp.plan``);
``backprop`` still returns nabla_w. ``one_pass=True`` (the MLP on the
NumPy backend; it implies ``fused``) updates w^{l+1} inside the sweep of (5) that reads it
(``mlp.plan``); a network without that sweep refuses it by name. Equation numbers follow docs/design.md §1.
"""

import numbers

from .checks import check_flag, shown


class Schedule:
    """What every schedule says: ``k`` worker streams for the gradients (at least ``least_k``) and
    ``fused``; ``stats`` holds the counters of its last pass, where it counts any."""

    least_k = 1
    auto = False
    """``Leapfrog("auto")``: k is chosen by a calibration on each plan (``core.calibrate``)."""

    def __init__(self, k, fused=False, one_pass=False):
        self.k = self._check_k(k)
        self.one_pass = check_flag("one_pass", one_pass)
        self._fused_given = check_flag("fused", fused)
        self.fused = self._fused_given or self.one_pass
        self.stats = {}

    def _check_k(self, k):
        accepted = self._accepted_k()
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be {accepted}; got {shown(k)}")
        if k < self.least_k:
            raise ValueError(f"k must be {accepted}; got {shown(k)}")
        return int(k)

    def _accepted_k(self):
        if self.least_k == 0:
            return "an integer >= 0 (worker streams; 0 runs the gradients on the main stream)"
        return "an integer >= 1 (the number of worker streams)"

    def check_memory(self, net, batch):
        """The bytes of the buffers this schedule holds of its own for ``net`` (a network or its plan) at ``batch``,
        or a ValueError when they exceed its ``memory_limit``: 0 for one that holds none."""
        return 0

    def graph_refusal(self, backend):
        """Why a step under this schedule cannot be captured as a graph on ``backend`` ("numpy" or
        "cupy"), or None."""
        return None

    def last_reader(self, plan, unit):
        """The unit after whose delta this schedule's chain on ``plan`` no longer reads ``unit``'s parameters:
        the plan's chain rule, or ``unit`` itself under ``one_pass`` (the sweep that reads w last updates it; the
        hand-off's workers update b alone)."""
        return unit if self.one_pass else plan.last_reader(unit)

    def _given(self):
        """The flags given True: ``fused``, ``one_pass``, both or neither."""
        return [flag for flag, on in (("fused", self._fused_given), ("one_pass", self.one_pass)) if on]

    def _flags(self):
        """The options ``repr`` shows, as they were given: ``, fused=True``, ``, one_pass=True``, both or nothing."""
        return "".join(f", {flag}=True" for flag in self._given())

    @property
    def unfused(self):
        """The arguments that would make this schedule update after the join: ``fused=False``, ``one_pass=False`` or
        both."""
        return " and ".join(f"{flag}=False" for flag in self._given())

    @property
    def without_one_pass(self):
        """What to pass where ``one_pass=True`` is refused: ``fused=True instead of one_pass=True``, or
        ``one_pass=False`` where ``fused=True`` was given too."""
        return "one_pass=False" if self._fused_given else "fused=True instead of one_pass=True"


class Sequential(Schedule):
    """Everything on the main stream, in the book's order."""

    name = "sequential"  # on the command line: --schedule sequential

    def __init__(self, fused=False, one_pass=False):
        super().__init__(0, fused, one_pass)

    def _check_k(self, k):
        return 0

    def __repr__(self):
        return f"Sequential({self._flags()[2:]})"


class Leapfrog(Schedule):
    """The gradients of layer l on worker stream ``l mod k`` (the seed's levels mk + j), behind E_l.

    ``Leapfrog("auto")`` (every network): the plan of a batch shape times ``Sequential()`` and
    ``Leapfrog(k)`` for a few k the first time it runs this schedule (that pass waits for the calibration),
    then runs the fastest from then on, never slower than ``Sequential()`` but for noise
    (``leapfrog_gpu.core.calibrate``).
    """

    name = "leapfrog"  # on the command line: --schedule leapfrog

    def __init__(self, k, fused=False, one_pass=False):
        self.auto = isinstance(k, str) and k == "auto"
        super().__init__(k, fused, one_pass)
        if self.auto and self.one_pass:
            raise ValueError("Leapfrog('auto') calibrates the plain and fused schedules only; give k for "
                             "one_pass=True, e.g. Leapfrog(2, one_pass=True)")
        self.chosen = {}
        """``Leapfrog("auto")``: the schedule its calibration chose for a pass of B columns, the latest by B (the plan's
        B: data-parallel, this rank's share of the batch, which a calibration times)."""

    def _check_k(self, k):
        return k if self.auto else super()._check_k(k)

    def _accepted_k(self):
        return super()._accepted_k() + " or 'auto'"

    def __repr__(self):
        return f"Leapfrog(k={self.k!r}{self._flags()})"


def check(schedule, network, accepted):
    """``schedule`` (``Sequential()`` when None) if its class is one of ``accepted``, the schedules that
    ``network`` (its name with its article, "an MLP") runs; else a TypeError naming those."""
    if schedule is None:
        return Sequential()
    if type(schedule) in accepted:
        return schedule
    names = [_signature(cls) for cls in accepted]
    choices = f"{', '.join(names[:-1])} or {names[-1]}"
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a schedule object: {choices}; got {shown(schedule)}")
    raise TypeError(f"{network} cannot run {schedule!r}; it takes {choices}")


def _signature(cls):
    """``Leapfrog(k)``: a schedule class with the arguments it needs."""
    return f"{cls.__name__}(k)" if cls is Leapfrog else f"{cls.__name__}()"
