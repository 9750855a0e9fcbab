"""The optimizer's state beside a network's parameters: the momenta and moments of ``core.optimizers``, one set
per network in its device memory, with the step count t; read and written as ``parameters()`` is, and refused
when a step brings another optimizer than the one whose state is held. The count is taken back to the steps that
updated where some failed, were refused or did not run (``Controls.done``); back to 0, so is a state that a step
made, which the network then holds as if no step had come.
"""

import copy
import numbers
from collections.abc import Mapping

import numpy as np

from . import controls, optimizers, parameters
from .checks import shown


MOST_STEPS = 2 ** 63 - 1
"""The last step count a state takes (``set_optimizer_state``, a file): a step past it is refused."""
RATES = 1024
"""Changes of lr noted between two reads of the step count (``_count_step``): a step count read tells which was the
last step's."""


class OptimizerState:
    """The part of ``core.network.Network`` that holds an optimizer's state (``_controls.state``, ``_rule``,
    ``_steps``, ``_held``, the optimizer that made it with the lr of the last step that updated it, and ``_rates``,
    ``(t, lr)`` of each step enqueued since the count was last read whose lr differs from the step's before)."""

    def optimizer_state(self):
        """Copies of the optimizer's state as the steps enqueued so far leave it: ``{"step": t, slot: {unit:
        {name: array}}}``, a slot as torch.optim names it (``"momentum_buffer"``, ``"exp_avg"``,
        ``"exp_avg_sq"``) shaped as ``parameters()``; ``{"step": 0}`` before a step that keeps one."""
        slots = {slot: {} for slot in self._held.SLOTS} if self._rule is not None else {}  # a DagNet may have none
        for unit, name, slot, array in _slots(self._controls.state if self._rule is not None else {}):
            slots.setdefault(slot, {}).setdefault(unit, {})[name] = array
        return {"step": self._steps, **self._handed_out(slots)}

    def held_optimizer(self):
        """A copy of the optimizer whose state this network holds, its lr that of the last step enqueued (once the
        steps have run, of the last that updated) or of the optimizer that set the state; None before a step that keeps
        a state: what ``core.saving`` writes beside the state."""
        self._check_open()
        if self._rule is None:
            return None
        held = copy.copy(self._held)
        if self._rates:
            held.lr = self._rates[-1][1]
        return held

    def set_optimizer_state(self, optimizer, state):
        """Take ``state`` (as ``optimizer_state()`` gives it) as the state of ``optimizer``: the step count and
        every slot of every parameter, checked before any is copied; an error changes nothing. At step 0 a slot may
        be left out, and is then 0, as no step has made it (``{"step": 0}``: the state before any step). The state of
        another optimizer than the one held replaces it (plain SGD's none: the state held goes), once the steps
        enqueued have run (raising as ``synchronize``, before anything changes): the way from one optimizer to
        another."""
        self._check_open()  # first: no other fault of a closed network's matters
        optimizer = optimizers.check(optimizer)
        self._check_optimizer(optimizer, held=False)
        if not isinstance(state, Mapping):
            raise TypeError(f"an optimizer state is a dict with 'step', as optimizer_state() gives it; got "
                            f"{type(state).__name__}")
        if "step" not in state:
            raise ValueError(f"an optimizer state is a dict with 'step', as optimizer_state() gives it; got one "
                             f"without it ({sorted(map(str, state))})")
        steps = state["step"]
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or not 0 <= steps <= MOST_STEPS:
            raise (ValueError if isinstance(steps, numbers.Integral) and not isinstance(steps, bool) else TypeError)(
                f"an optimizer state is a dict with 'step', an int from 0 to 2**63 - 1; got 'step' {shown(steps)}")
        if optimizer.plain and steps:
            raise ValueError(f"{optimizer!r} keeps no state, whose count of steps stays 0 (optimizer_state() gives "
                             f"{{'step': 0}} after its steps); got 'step' {steps}: give {{'step': 0}}")
        extra = set(state) - {"step", *optimizer.SLOTS}
        if extra or (steps and set(state) != {"step", *optimizer.SLOTS}):
            raise ValueError(f"the state of {optimizer!r} holds 'step' and {list(optimizer.SLOTS)}; got "
                             f"{sorted(state)}")
        live, xp = self._live(), self.backend.xp
        checked = [(slot, target, value) for slot in optimizer.SLOTS if slot in state
                   for target, value in parameters.check(state[slot], live, self.dtype, xp,
                                                         lambda u, n, s=slot: f"{s} of {self._label(u, n)}", slot)]
        where = {id(array): (unit, name) for unit, named in live.items() for name, array in named.items()}
        for slot, target, value in checked:
            if slot == "exp_avg_sq" and bool((value < 0).any()):
                raise ValueError(f"exp_avg_sq of {self._label(*where[id(target)])} holds a negative number; Adam's "
                                 "second moment is a running mean of squared gradients, every element >= 0")
            if slot == "momentum_buffer" and not steps and bool(value.any()):
                raise ValueError(f"momentum_buffer of {self._label(*where[id(target)])} is not 0 at step 0, where the "
                                 "first step sets it to the gradient: give 'step' as the count of the steps that "
                                 "made it")
        for slot in (slot for slot in optimizer.SLOTS if slot in state):
            given = {id(target) for s, target, _ in checked if s == slot}
            lacking = next((place for array, place in where.items() if array not in given), None)  # the first
            if lacking:
                raise ValueError(f"{slot} holds no {self._label(*lacking)}: a slot holds every parameter's, as "
                                 "optimizer_state() gives it")
        self._synchronize()  # the steps enqueued run on the state they were given; a refusal pending is raised
        if self._rule is not None and optimizer.rule() != self._rule:
            self._rule = self._held = None
            self._steps = 0
        if optimizer.plain:
            self._controls.state = {}  # none kept: the next optimizer with a state makes its own
            return
        if self._rule is None:
            self._make_state(optimizer)
        self._made_by_step = False  # a state set is the caller's: no step taken back takes it back
        self._wait()
        if not steps:  # a slot not given at step 0 is no step's: 0
            for _, _, slot, array in _slots(self._controls.state):
                if slot not in state:
                    array.fill(0)
        for slot, target, value in checked:
            unit, name = where[id(target)]
            self._controls.state[unit][name][slot][...] = xp.asarray(value)
        self._steps = int(steps)
        self._controls.set_done(self._steps)  # the count of the steps that updated (``Controls.done``)
        self._wait()
        self._held, self._rates = copy.copy(optimizer), []

    def _count_step(self, optimizer):
        """t += 1, for a step of ``optimizer`` enqueued, its lr noted where it changes (``_rates``); first, ``TAGS //
        4`` steps after the count was last read (``Controls.counted``), or ``RATES`` changes of lr after,
        ``_synchronize()``, which reads it and raises what those steps met: the device's tag of the count tells steps
        apart within ``TAGS // 2`` of it only (``controls.untag``)."""
        if self._steps - self._controls.counted >= controls.TAGS // 4 or len(self._rates) >= RATES:
            self._synchronize()
        self._steps += 1
        if optimizer.lr != (self._rates[-1][1] if self._rates else self._held.lr):
            self._rates.append((self._steps, optimizer.lr))

    def _settle(self, done):
        """The held optimizer's lr: that of step ``done``, the last that updated, once the steps noted in ``_rates``
        have run or failed."""
        lr = next((lr for t, lr in reversed(self._rates) if t <= done), None)
        if lr is not None and self._held is not None:
            self._held.lr = lr
        self._rates = []

    def _recount(self):
        """The step count: that of the last step that updated (``Controls.done``), once the steps enqueued have run
        or failed; at 0, a state that a step made is taken back too."""
        if self._rule is not None:
            self._steps = self._controls.done(self._steps)
            self._settle(self._steps)
            if not self._steps and self._made_by_step:
                self._rule = self._held = None

    def _check_count(self, done):
        """Once the steps enqueued have run with no error raised here, ``done`` of them by ``Controls.done``: raise if
        some did not (a failure on a backend shared with another network, raised to that one, stopped them), the
        count taken back."""
        self._settle(done)
        if self._rule is not None and done != self._steps:
            lost, self._steps = self._steps - done, done
            self._lost_sums()
            raise RuntimeError(f"{lost} step(s) of this {type(self).__name__} did not run: a failure on the backend "
                               "it shares with another network (raised to the first to synchronize) stopped them; "
                               f"its step count is back to {self._steps}, its parameters those after that step")

    def _check_optimizer(self, optimizer, held=True):
        """Raise if the network holds the state of another optimizer rule than ``optimizer``'s (``held``: a step's,
        which would mix them), or if one of its hyper-parameters is out of its dtype's range: beyond the largest
        number (it would be inf), or in float32 lr or eps above 0 and below the smallest normal number (0 on a GPU,
        whose kernels flush smaller float32 numbers)."""
        finfo = np.finfo(self.dtype)
        for name, value in optimizer.hyper().items():
            if max(value if isinstance(value, tuple) else (value,)) > float(finfo.max):
                raise ValueError(f"{name}={value!r} is beyond {self.dtype}'s largest number, {finfo.max:.4g}, in which "
                                 f"this {type(self).__name__} computes its steps: give a smaller {name}")
            if self.dtype == "float32" and name in ("lr", "eps") and 0 < value < float(finfo.tiny):
                said = "the learning rate" if name == "lr" else name  # lr, or sgd_step's eta
                raise ValueError(f"{said} {value!r} is below {self.dtype}'s smallest normal number, {finfo.tiny:.4g}, "
                                 f"which a GPU flushes to 0: give {said} >= {finfo.tiny:.4g}"
                                 + " or 0" * (name == "lr"))
        if held and self._rule is not None and self._steps >= MOST_STEPS and not optimizer.plain:
            raise ValueError(f"this {type(self).__name__}'s optimizer state is at step 2**63 - 1, the last a state "
                             "counts (and a file holds): set_optimizer_state(optimizer, {'step': 0}) starts it anew")
        if held and self._rule is not None and optimizer.rule() != self._rule:
            state = self._held.named({k: v for k, v in self._held.hyper().items() if k != "lr"})
            raise ValueError(f"this {type(self).__name__} holds the state of {state}; {optimizer!r} is another "
                             "optimizer (only lr may change from step to step): steps cannot mix their states; to go "
                             "on with it, net.set_optimizer_state(optimizer, {'step': 0}) first (its state starts "
                             "anew)")

    def _make_state(self, optimizer):
        """The state of ``optimizer``: zeros shaped as each parameter, one per slot, in device memory, the k-th slot
        ``ops.full_beside`` the parameter; those of a state taken back where they are its slots (the graphs captured
        with them stay right), else new ones (and the graphs go)."""
        ops, state = self.backend.ops, self._controls.state
        if state and all(set(held) == set(optimizer.SLOTS) for named in state.values() for held in named.values()):
            for *_, array in _slots(state):
                array.fill(0)
        else:
            self._controls.state = {unit: {name: {slot: ops.full_beside(array, k, 0)
                                                  for k, slot in enumerate(optimizer.SLOTS, start=1)}
                                           for name, array in named.items()} for unit, named in self._live().items()}
            for plan in self._plans.values():
                plan.captured.clear()
        self._controls.set_done(0)  # no step of it has updated (an earlier state's count stays there when it went)
        self.backend.synchronize()  # CuPy writes on its default stream, which ours do not wait for
        self._rule, self._steps, self._held, self._made_by_step = optimizer.rule(), 0, copy.copy(optimizer), True
        self._rates = []


def _slots(state):
    """``(unit, name, slot, array)`` of every array of an optimizer state ``{unit: {name: {slot: array}}}``."""
    return ((unit, name, slot, array) for unit, named in state.items() for name, held in named.items()
            for slot, array in held.items())
