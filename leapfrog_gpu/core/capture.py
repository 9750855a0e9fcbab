"""Graph mode (docs/design.md §4): a step captured once per plan, schedule and update (``key``), then launched.

A network's ``train_step(..., graph=True)`` copies the batch into its plan's fixed buffers and eta / B (or lr, 1 / B and
the step count t) into its controls (``Controls``, device memory) as in eager mode, then calls ``step`` here for the
rest: the pass with the schedule's events and worker streams, the check of the gradients and the update. The first call
for a plan and schedule hands that work to ``backend.capture``, which runs it eagerly (so that what it creates on first
use, buffers, streams, events, compiled kernels, exists outside the capture), captures it and returns the graph (a CUDA
graph on CuPy, its chain on cuBLAS through nvmath-python, or on our kernels without it; a ``HostGraph`` on host
streams); later calls launch the graph, so no Python runs between the copies and the step but one launch.

A graph fixes what it was captured with: buffers, streams, events, kernels and their scalar arguments. What may change
between steps lives in device memory (eta / B, lr, 1 / B, t, the refusal code; the optimizer's state), and a schedule
whose step needs the host part-way, or a call CuPy cannot capture, is refused (``refusal``).

Data-parallel, the sums across ranks are launches on the communication stream like any other (docs/data-parallel.md):
a graph holds them, in the layout's order, and each launch sums again. A graph is kept by the whole batch's size B, not
by the plan alone: a rank's share of B picks its plan, and two batch sizes may give one rank the same share and another
rank two shares, or an empty one (which adds zeros to the sums instead of a pass, on the plan of one column). Kept by B,
every rank captures at the same steps and launches at the others, as NCCL requires of captured collectives.
"""

from . import calibrate


def key(samples, schedule, check_finite, rule):
    """What a graph of the step of ``schedule`` by an optimizer of ``rule`` (``core.optimizers``) is kept by in its
    plan's ``captured``, with ``samples``, the whole batch's size B (data-parallel, the plan holds this rank's share
    of it)."""
    return samples, type(schedule), repr(schedule), check_finite, rule


def ready(plan, key, schedule):
    """Whether the step of ``schedule`` by ``key`` runs as a graph; False for ``Leapfrog("auto")``'s first at the
    whole batch's size B (and while ``plan`` has not chosen its k), which runs eagerly, choosing k by timing eager
    passes where this rank's plan has not (``core.calibrate``). Kept by B, as graphs are, so that every rank, whatever
    its share (an empty one chooses nothing), captures at the same step. (A step that cannot be captured was refused
    before its plan was made: ``check``.)"""
    if schedule.auto:
        first = key not in plan.eager
        plan.eager.add(key)
        return not (first or (not plan.empty and calibrate.chosen(plan, schedule.fused) is None))
    return True


def step(plan, key, body, schedule):
    """Enqueue ``body()``, the step of ``schedule`` by ``key`` (``ready``), as the graph kept in ``plan.captured`` by
    it: captured on first use. A launch repeats the captured pass, so ``schedule.stats`` are the counters the capture
    left (the very dict, which what the pass counts as it runs fills in), whatever the schedule it was captured with
    (an equal one: the key holds its ``repr``) has run since."""
    if key in plan.captured:
        graph, schedule.stats = plan.captured[key]
        graph.launch()
        return
    graph = plan.backend.capture(body)
    if graph is not None:  # None: a launch failed (the next synchronize() says why); capture again next time
        plan.captured[key] = graph, schedule.stats


def refusal(net, schedule):
    """Why the step of ``schedule`` on ``net`` cannot be captured, or None: the network's reason on its backend
    (``CAPTURE_REFUSALS``), or the schedule's own."""
    backend = net.backend.name
    return net.CAPTURE_REFUSALS.get(backend) or schedule.graph_refusal(backend)


def check(net, schedule):
    """Raise a ``ValueError`` if the step of ``schedule`` on ``net`` cannot be captured: before a step changes
    anything (its plan made, the eager step that comes first)."""
    reason = refusal(net, schedule)
    if reason is not None:
        raise ValueError(f"graph=True cannot capture {schedule!r}: {reason}")
