"""The backward pass of every network, driven once: the chain on the main stream, its gradients handed off.

A network's pass (its ``core.plan.Plan``) says three things of its backward pass and nothing of streams:

- ``plan.chain(schedule, controls)``: enqueue the schedule's solve on the main stream and yield each unit (a
  layer, a node) once its gradients may run: right after its delta is final or, for an update fused into
  the gradients (``controls`` given), once the chain no longer reads the unit's parameters either. A chain may
  ``return`` the counters of its pass.
- ``schedule.last_reader(plan, unit)``: the unit after whose yield the chain no longer reads ``unit``'s
  parameters (write after read, for a fused update; ``plan.last_reader`` unless the schedule reads every
  parameter before any unit is final).
- ``plan.gradients(stream, unit, controls)``: enqueue the unit's gradients on ``stream``, and its update by
  ``controls`` when given; ``plan.update(stream, unit, controls, half=None)`` the update alone (of the ``"top"``
  or the ``"bottom"`` half of the unit's rows), ``plan.joint_update(controls)`` whether the gradients' pass
  makes the update (so that it cannot come apart), and ``plan.halved(schedule)`` the units whose update, where
  it is apart from the gradients, the main stream halves with their worker.

``run`` turns those into the hand-off (docs/design.md §2): the event E_u on the main stream at each yield, each
unit's gradients on worker ``index(u) mod k`` behind E_u (read after write) and, fused, its update on that worker
behind E of its last reader (write after read; the gradients too where the update is joint), each handed to the
sums across ranks as it is enqueued, then the join (write after read: the update and the next pass rewrite what the
workers read). A halved unit's worker updates the bottom half of its parameters, and the main stream, once its
chain is done, the top half, behind the event G_u that follows the unit's gradients: where a worker's unit is
longer than the chain's, the main stream would otherwise wait at the join. With sums across ranks a fused update
waits for its unit's sum: the worker writes the gradients alone, and the update follows the sum on the
communication stream (``parallel.reducer``). ``backward`` adds what a step's pass needs around it:
``Leapfrog("auto")`` resolved by its calibration, the NVTX range and the sums across ranks.
"""

import contextlib

from . import calibrate
from .handoff import Handoff


def backward(plan, schedule, controls=None):
    """Enqueue the backward pass of ``plan`` under ``schedule`` (one its network checked) as a step runs it:
    ``Leapfrog("auto")`` as ``core.calibrate`` chose on this plan, in an NVTX range, the gradients summed across
    ranks when the plan has a reducer; ``controls``: fuse the update where the schedule fuses. Returns the
    pass's counters."""
    if schedule.auto:
        auto, schedule = schedule, calibrate.choose(plan, fused=schedule.fused)
        auto.chosen[plan.batch] = schedule
    update = _updater(plan, controls) if controls is not None and schedule.fused else None
    summed = contextlib.nullcontext() if plan.reducer is None else plan.reducer.pass_(update)
    with plan.backend.range(plan.main, "backward"), summed:
        return run(plan, schedule, controls)


def run(plan, schedule, controls=None):
    """Enqueue the chain of ``schedule`` on ``plan`` and hand each unit's gradients off as it becomes free
    (see the module docstring); then the join. Returns the counters the chain returned (or ``{}``)."""
    schedule = plan.resolve(schedule)
    if schedule.auto:
        raise ValueError("Leapfrog('auto') stands for a calibrated choice: run it through the network "
                         "(sgd_step, gradients or backprop), which makes that choice first")
    controls = controls if schedule.fused else None
    hand = Handoff(plan, schedule.k)
    try:
        stats = _hand_off(plan, schedule, controls, hand)
        hand.join()
        return stats
    finally:
        hand.end()  # after the join; where the pass failed, where it stopped


def _hand_off(plan, schedule, controls, hand):
    """The chain of ``schedule`` on ``plan``, each unit's gradients handed off by ``hand`` as it becomes free; then,
    on the main stream, the top halves of the halved units' updates."""
    waiting = {}  # fused: the units whose update waits for a reader, by that reader
    halved, tops = plan.halved(schedule), []  # the units whose update the main stream halves; those it took, in order
    chain = plan.chain(schedule, controls)
    while True:
        try:
            unit = next(chain)
        except StopIteration as end:
            stats = end.value or {}
            break
        hand.mark(unit)
        if controls is None:
            _give(plan, hand.off(unit), unit, None)
            continue
        waiting.setdefault(schedule.last_reader(plan, unit), []).append(unit)
        freed = waiting.pop(unit, [])
        if plan.reducer is not None or plan.joint_update(controls):  # gradients and update behind the last reader
            for done in freed:
                _give(plan, hand.off(done, after=unit), done, controls)
            continue
        for done in freed:  # an update behind E of its unit's last reader
            if done != unit:
                _update(plan, hand.off(done, after=unit), done, controls, halved, tops)
        stream = hand.off(unit)
        _give(plan, stream, unit, None)  # the gradients behind E_unit
        if unit in halved:
            plan.backend.record(stream, plan.event(f"G_{unit}"))
        if unit in freed:  # its own last reader: the update follows on the same stream, behind the same event
            _update(plan, stream, unit, controls, halved, tops)
    if waiting:
        units = [unit for held in waiting.values() for unit in held]
        raise RuntimeError(f"{schedule!r}: the chain never freed the parameters of {units}")
    for unit in tops:  # the chain is done: the main stream takes the top halves, as their gradients are
        plan.backend.wait(plan.main, plan.event(f"G_{unit}"))
        plan.update(plan.main, unit, controls, "top")
    return stats


def _update(plan, stream, unit, controls, halved, tops):
    """The update of ``unit`` by ``controls`` on ``stream``, a worker; of a ``halved`` unit its bottom half alone, the
    unit then listed in ``tops`` for the main stream."""
    if unit not in halved:
        plan.update(stream, unit, controls)
        return
    plan.update(stream, unit, controls, "bottom")
    tops.append(unit)


def _give(plan, stream, unit, controls):
    """The gradients of ``unit`` on ``stream`` and, fused, its update by ``controls``; with sums across ranks,
    the gradients alone, handed to the sums as they are enqueued (the update follows the sum)."""
    if plan.reducer is None:
        plan.gradients(stream, unit, controls)
        return
    plan.gradients(stream, unit)
    plan.reducer.ready(stream, unit)


def _updater(plan, controls):
    """``update(stream, unit)``: enqueue the unit's update by ``controls`` on ``stream``."""
    return lambda stream, unit: plan.update(stream, unit, controls)
