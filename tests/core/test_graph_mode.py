"""Graph mode on host streams: a captured step replays bitwise the eager one, right, and race-free.

``sgd_step(..., graph=True)`` captures the step (forward, backward with the schedule's events and
workers, check, update) once per batch size and schedule and replays it afterwards
(``leapfrog_gpu.core.capture``, ``leapfrog_gpu.backends.host_graph``). The capture rules of CUDA are enforced
on the host, so a schedule that loses a wait fails at capture, or, where the capture is legal, in the
deferred orders and under chaos, as in eager mode.
"""

import copy
import functools
import threading

import numpy as np
import pytest

from helpers import (assert_bitwise_equal, assert_graph_steps_follow_the_reference, assert_same, batch, batch_id,
                     chaos_catches, chaos_suite, eta, layer_names, patched_ops, same, schedule_id)
from networks import arrays, network, network_batch
from leapfrog_gpu import (SGD, MLP, DagDoubling, DagJacobi, Leapfrog, LevelSets, NaumovJacobi, NaumovRNN, NaumovScan,
                          Sequential, TimeScan, Wavefront)
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.backends.host_graph import CaptureError
from leapfrog_gpu.mlp.plan import MLPPlan
from leapfrog_gpu.core import calibrate, plan
from leapfrog_gpu.core import network as core_network
from leapfrog_gpu.core.handoff import Handoff

SIZES = [7, 13, 5, 11, 3]  # L = 5
STEPS = 50


def snapshot_steps(net, backend, schedule, size, graph, steps=STEPS, dtype="float32"):
    """Parameters after every SGD step, copied in stream order (no host synchronization in between)."""
    taken, plan = [], net.plan(size)

    def snapshot():
        taken.append([p.copy() for p in list(plan.w.values()) + list(plan.b.values())])

    for step in range(steps):
        x, y = batch(SIZES, size, seed=step, dtype=dtype)
        net.sgd_step(x, y, eta(step), schedule, graph=graph)
        backend.launch(backend.main, "snapshot", snapshot)
    net.synchronize()
    return taken


def schedules():
    L = len(SIZES)
    for k in (0, 1, 2, 3, L + 1):
        for fused in (False, True):
            yield Leapfrog(k, fused) if k else Sequential(fused)


MODES = {
    "threads": {},
    "deferred main-first": {"mode": "deferred", "order": "main-first"},
    "deferred workers-first": {"mode": "deferred", "order": "workers-first"},
    "deferred random": {"mode": "deferred", "order": "random", "seed": 3},
    "chaos": {"chaos": 7, "max_delay": 5e-5},
}
"""The host backends the graph steps run on: threads, the deferred orders, and chaos (short delays)."""


@functools.cache
def eager_steps(schedule, size):
    """The eager steps the graph steps must equal: on threads, computed once per schedule and B."""
    with NumpyBackend(mode="threads") as backend:
        return snapshot_steps(MLP(SIZES, seed=5, backend=backend), backend, schedule, size, graph=False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
@pytest.mark.parametrize("schedule", list(schedules()), ids=lambda schedule: f"L{len(SIZES)}-{schedule_id(schedule)}")
def test_graph_steps_are_bitwise_the_eager_steps(schedule, size, mode):
    """50 steps, eta changing every step, captured once and replayed 49 times."""
    with NumpyBackend(**MODES[mode]) as backend:
        net = MLP(SIZES, seed=5, backend=backend)
        got = snapshot_steps(net, backend, schedule, size, graph=True)
        assert len(net.plan(size).captured) == 1
    for step, (a, b) in enumerate(zip(eager_steps(schedule, size), got)):
        assert_same(b, a, layer_names(len(SIZES), "w", "b"), f"{schedule!r}, B = {size}, {mode}: graph step {step}",
                    against="the eager step")


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True)], ids=schedule_id)
def test_graph_steps_follow_the_reference(schedule):
    with MLP(SIZES, activation="tanh", dtype="float64", seed=2, backend="numpy") as net:
        assert_graph_steps_follow_the_reference(net, schedule, 4)


def deferred_graph_run(order, schedule, seed=0, graph=True):
    """Parameters after three steps enqueued back to back in a deferred order, then one more pass's
    gradients (as ``test_schedules.deferred_run``, the steps as graphs)."""
    with NumpyBackend(mode="deferred", order=order, seed=seed) as backend:
        net = MLP(SIZES, seed=2, backend=backend)
        for step in range(3):
            x, y = batch(SIZES, 4, seed=step, dtype=np.float32)
            net.sgd_step(x, y, eta(step), schedule, graph=graph)
        nabla_b, nabla_w = net.backprop(x, y, schedule)
        return net.weights + net.biases + nabla_b + nabla_w


DEFERRED = layer_names(len(SIZES), "w", "b", "nabla_b", "nabla_w")
"""The names of what ``deferred_graph_run`` returns."""


@pytest.mark.parametrize("order,seed", [("main-first", 0), ("workers-first", 0)] + [("random", s) for s in range(4)])
def test_graph_steps_in_every_deferred_order_match_sequential(order, seed):
    want = deferred_graph_run("main-first", Sequential(), graph=False)
    for schedule in (Leapfrog(2), Leapfrog(3, fused=True), Leapfrog(1, fused=True)):
        assert_same(deferred_graph_run(order, schedule, seed), want, DEFERRED, f"{schedule!r} in order {order} {seed}")


def test_graph_steps_equal_sequential_under_chaos(chaos_steps):
    assert chaos_suite(chaos_steps, graph=True, configs=slice(None, None, 2)) is None


@pytest.mark.parametrize("mode", ["threads", "serial", "deferred"])
def test_a_graph_runs_each_stream_in_the_eager_order(mode):
    """The trace of a replayed step holds, stream by stream, the same items in the same order as an
    eager step's: the replay is the step, not an approximation of it."""
    def traced(graph):
        with NumpyBackend(mode=mode, trace=True) as backend:
            net = MLP(SIZES, seed=1, backend=backend)
            x, y = batch(SIZES, 3)
            for _ in range(2):  # the second step replays the graph the first one captured
                backend.trace.clear()
                net.sgd_step(x, y, 0.5, Leapfrog(2), graph=graph)
                net.synchronize()
            return {stream: [entry[1:] for entry in backend.trace if entry[0] == stream]
                    for stream in ("main", "worker0", "worker1")}

    eager, replayed = traced(False), traced(True)
    assert all(replayed[stream] for stream in replayed)
    assert replayed == eager


def test_a_replay_plans_nothing(monkeypatch):
    """Once captured, the step runs without the network or the schedule being asked anything."""
    with NumpyBackend() as backend:
        want = snapshot_steps(MLP(SIZES, seed=3, backend=backend), backend, Leapfrog(2), 3, graph=False, steps=4)
        net = MLP(SIZES, seed=3, backend=backend)
        got = snapshot_steps(net, backend, Leapfrog(2), 3, graph=True, steps=1)

        def planning(*args, **kwargs):
            raise AssertionError("a replay planned the step again")

        for name in ("step", "backprop", "forward", "backward", "run", "chain", "check_gradients", "update"):
            monkeypatch.setattr(MLPPlan, name, planning)
        for step in range(1, 4):
            x, y = batch(SIZES, 3, seed=step, dtype=np.float32)
            net.sgd_step(x, y, eta(step), Leapfrog(2), graph=True)
        got.append([p.copy() for p in net.weights + net.biases])
    assert same(got[0], want[0]) and same(got[-1], want[-1])


def test_a_graph_per_batch_size_and_schedule():
    with MLP(SIZES, backend="numpy") as net:
        for size, schedule in [(3, Leapfrog(2)), (3, Leapfrog(2)), (5, Leapfrog(2)), (3, Sequential()),
                               (3, Leapfrog(2, fused=True)), (3, Leapfrog(2))]:
            net.sgd_step(*batch(SIZES, size), 0.1, schedule, graph=True)
        assert len(net.plan(3).captured) == 3 and len(net.plan(5).captured) == 1


def test_the_graphs_kept_are_those_of_the_8_batch_sizes_last_stepped():
    """A network keeps the plans, and with them the graphs, of the 8 batch shapes it ran last (docs/python.md): a
    step at a size among them replays its graph, and counts as the latest use. After B = 1..8 and B = 1 again, B = 9
    lets B = 2's go, not B = 1's, whose next step captures nothing: a least-recently-used list written out over
    the steps says which capture, and which plans are kept, in the order last used."""
    sizes = [*range(1, 9), 1, 9, 1]
    kept, want = [], []
    for size in sizes:
        want.append(int(size not in kept))  # a capture: no plan of that size kept
        kept = ([b for b in kept if b != size] + [size])[-8:]
    with NumpyBackend() as backend, MLP(SIZES, backend=backend) as net:
        capture, captures = backend.capture, []
        backend.capture = lambda body: captures.append(None) or capture(body)
        got = []
        for size in sizes:
            before = len(captures)
            net.sgd_step(*batch(SIZES, size), 0.1, Leapfrog(2), graph=True)
            got.append(len(captures) - before)
        assert got == want and list(net._plans) == kept == [3, 4, 5, 6, 7, 8, 9, 1]


# -- a wait removed from the captured step is caught ------------------------------------------------


def test_a_worker_without_its_wait_cannot_join_the_capture(monkeypatch):
    """Without 'worker waits E_l' a worker never joins the capture: its first operation is refused."""
    monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
    with MLP(SIZES, backend="numpy") as net:
        with pytest.raises(CaptureError, match=r"worker\d enqueued 'gradients\[5\]' during a capture of main without "
                                               "having joined it"):
            net.sgd_step(*batch(SIZES, 3), 0.1, Leapfrog(2), graph=True)
        assert not net.plan(3).captured
        net.sgd_step(*batch(SIZES, 3), 0.1, Sequential(), graph=True)  # the backend is still usable


def test_a_worker_without_the_join_is_caught_when_the_capture_ends(monkeypatch):
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    with MLP(SIZES, backend="numpy") as net:
        with pytest.raises(CaptureError, match=r"worker\d is not joined back into main before the capture ends"):
            net.sgd_step(*batch(SIZES, 3), 0.1, Leapfrog(2), graph=True)


def test_a_fused_worker_waiting_only_for_its_own_delta_is_caught(monkeypatch):
    """The capture is legal (every worker joins and is joined back); the race it holds shows in the
    deferred order that lets workers run first, as in eager mode."""
    want = deferred_graph_run("main-first", Sequential(), graph=False)
    assert_same(deferred_graph_run("workers-first", Leapfrog(2, fused=True)), want, DEFERRED, "with every wait")
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    assert not same(deferred_graph_run("workers-first", Leapfrog(2, fused=True)), want)


@pytest.mark.parametrize("wait", ["wait", "join", "last_reader"])
def test_chaos_catches_each_missing_wait_in_graph_mode(monkeypatch, chaos_steps, wait):
    patches = {"wait": lambda self, worker, unit: None, "join": lambda self: None,
               "last_reader": lambda self, l: l}
    monkeypatch.setattr(plan.Plan if wait == "last_reader" else Handoff, wait, patches[wait])
    try:
        found = chaos_catches(chaos_steps, fused=wait == "last_reader" or None, graph=True)
    except CaptureError:
        found = True  # refused at capture
    assert found, f"removing {wait} went unnoticed in graph mode in three seeds"


# -- capture rules -----------------------------------------------------------------------------------


@pytest.fixture
def backend():
    with NumpyBackend() as host:
        yield host


def test_work_on_a_stream_that_has_not_joined_is_refused(backend):
    (worker,) = backend.workers(1)
    with pytest.raises(CaptureError, match="worker0 enqueued 'stray' during a capture of main without having joined"):
        backend.capture(lambda: backend.launch(worker, "stray", lambda: None))


def test_a_wait_on_an_event_recorded_outside_the_capture_is_refused(backend):
    (worker,) = backend.workers(1)
    outside = backend.event("outside")
    backend.record(backend.main, outside)
    with pytest.raises(CaptureError, match="waits on event 'outside' .* nothing in the capture records it"):
        backend.capture(lambda: backend.wait(worker, outside))


def test_work_after_the_last_join_is_refused(backend):
    (worker,) = backend.workers(1)
    fork, join = backend.event("fork"), backend.event("join")

    def body(late):
        backend.record(backend.main, fork)
        backend.wait(worker, fork)
        backend.launch(worker, "work", lambda: None)
        backend.record(worker, join)
        backend.wait(backend.main, join)
        if late:
            backend.launch(worker, "late", lambda: None)

    graph = backend.capture(lambda: body(False))
    captured = [item.name for stream, items in graph.streams if stream is worker for item in items]
    assert captured == ["fork", "work", "join"]
    with pytest.raises(CaptureError, match=r"worker0 is not joined back .* \(op 'late'\)"):
        backend.capture(lambda: body(True))


@pytest.mark.parametrize("call", ["synchronize", "copy_in"])
def test_the_host_cannot_be_reached_from_inside_a_capture(backend, call):
    def body():
        if call == "synchronize":
            backend.synchronize()
        else:
            backend.copy_in(backend.main, np.zeros(3), np.ones(3))

    with pytest.raises(CaptureError, match=f"{call}\\(\\) during a capture"):
        backend.capture(body)
    backend.synchronize()  # the failed capture left nothing open


def test_a_capture_is_launched_once_and_replays_with_fresh_events(backend):
    """capture() runs the body's work once; each launch runs it again and its waits match its own
    records (the events' recordings are offset past the earlier ones)."""
    (worker,) = backend.workers(1)
    fork, join = backend.event("fork"), backend.event("join")
    log = []

    def body():
        backend.launch(backend.main, "main", log.append, "main")
        backend.record(backend.main, fork)
        backend.wait(worker, fork)
        backend.launch(worker, "worker", log.append, "worker")
        backend.record(worker, join)
        backend.wait(backend.main, join)
        backend.launch(backend.main, "after", log.append, "after")

    graph = backend.capture(body)
    backend.synchronize()
    assert log == ["main", "worker", "after"]
    for _ in range(3):
        graph.launch()
    backend.synchronize()
    assert log == ["main", "worker", "after"] * 4
    assert (fork.recorded, fork.completed, join.recorded, join.completed) == (4, 4, 4, 4)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", [*MODES, "serial"])
def test_an_event_recorded_twice_in_a_capture_is_waited_on_at_its_latest_recording(mode):
    """One event forks the worker off main and joins it back: recorded twice in the capture, so twice per launch, and
    main's join waits on the second recording, the latest as of the wait (``cudaStreamWaitEvent``). Every replay
    then runs each launch once, in order, in every host mode; a join that waited on a third recording would wait
    for good (the threads mode is given 10 s, then released)."""
    with NumpyBackend(**MODES.get(mode, {"mode": mode})) as backend:
        (worker,) = backend.workers(1)
        event, log = backend.event("E"), []

        def body():
            backend.launch(backend.main, "before", log.append, "before")
            backend.record(backend.main, event)  # the fork: the event's first recording
            backend.wait(worker, event)
            backend.launch(worker, "worker", log.append, "worker")
            backend.record(worker, event)  # the join: its second
            backend.wait(backend.main, event)
            backend.launch(backend.main, "after", log.append, "after")

        graph = backend.capture(body)
        for _ in range(3):
            graph.launch()
        finished = threading.Event()
        backend.launch(backend.main, "finished", finished.set)
        if backend.mode == "threads" and not finished.wait(10):
            backend.release()  # main's thread waits for good: close() must not wait for it
            pytest.fail("the replays deadlocked: main waits on a recording of E that never comes")
        backend.synchronize()
    assert log == ["before", "worker", "after"] * 4  # the capture's eager call, then three replays
    assert graph.records == {event: 2}
    waits = {stream.name: [item.generation for item in items if item.kind == "wait"] for stream, items in graph.streams}
    assert waits == {"main": [2], "worker0": [1]}  # the join waits on the second recording, the fork on the first
    assert event.recorded == event.completed == 2 * 4


# -- what cannot be captured, and check_finite -----------------------------------------------------------


@pytest.mark.parametrize("schedule, reason", [
    (NaumovJacobi(warm_start=True), "its warm start decides when to stop from a change it reads on the host"),
])
def test_what_cannot_be_captured_is_refused_with_the_reason(schedule, reason):
    """Refused before its plan is made: the plans kept (as many as a network keeps, each with its graph) stay."""
    with MLP(SIZES, backend="numpy") as net:
        for size in range(1, core_network.PLANS + 1):
            net.sgd_step(*batch(SIZES, size), 0.1, graph=True)
        before, plans = [p.copy() for p in net.weights + net.biases], dict(net._plans)
        with pytest.raises(ValueError, match=f"graph=True cannot capture .*: {reason}"):
            net.sgd_step(*batch(SIZES, core_network.PLANS + 1), 0.1, schedule, graph=True)
        assert same(net.weights + net.biases, before) and net._plans == plans
        assert all(len(kept.captured) == 1 for kept in plans.values())


def test_leapfrog_auto_runs_its_first_step_at_a_batch_size_eagerly_then_is_captured():
    """Its calibration times eager passes: the first graph=True step at B = 3 runs eagerly and chooses k, the
    second is captured (one graph), and each steps as the sequential schedule does, to the bit."""
    with MLP(SIZES, dtype="float64", backend="numpy") as net, MLP(SIZES, dtype="float64", backend="numpy") as plain:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.1, Leapfrog("auto"), graph=True)
        plain.sgd_step(x, y, 0.1, Sequential())
        plan = net.plan(3)
        assert not plan.captured and calibrate.chosen(plan) is not None
        for _ in range(3):
            net.sgd_step(x, y, 0.1, Leapfrog("auto"), graph=True)
            plain.sgd_step(x, y, 0.1, Sequential())
        assert len(plan.captured) == 1
        assert same(net.weights + net.biases, plain.weights + plain.biases)


def test_leapfrog_auto_is_captured_once_calibrated():
    with MLP(SIZES, dtype="float64", backend="numpy") as net, MLP(SIZES, dtype="float64", backend="numpy") as plain:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.1, Leapfrog("auto"))  # calibrates at B = 3
        plain.sgd_step(x, y, 0.1, Sequential())
        for _ in range(3):
            net.sgd_step(x, y, 0.1, Leapfrog("auto"), graph=True)
            plain.sgd_step(x, y, 0.1, Sequential())
        assert same(net.weights + net.biases, plain.weights + plain.biases)


def test_naumov_schedules_without_a_warm_start_are_captured():
    with MLP(SIZES, dtype="float64", backend="numpy") as net, MLP(SIZES, dtype="float64", backend="numpy") as eager:
        for step in range(3):
            x, y = batch(SIZES, 2, seed=step)
            net.sgd_step(x, y, eta(step), NaumovScan(k=2), graph=True)
            eager.sgd_step(x, y, eta(step), NaumovScan(k=2))
        assert same(net.weights + net.biases, eager.weights + eager.biases)


@pytest.mark.parametrize("name, schedule", [
    ("MLP", NaumovScan()), ("MLP", NaumovJacobi()), ("MLP", NaumovJacobi(max_sweeps=1)), ("RNN", TimeScan()),
    ("RNN", NaumovRNN()), ("RNN", Wavefront()), ("DagNet", LevelSets()), ("DagNet", DagJacobi()),
    ("DagNet", DagDoubling())], ids=repr)
def test_a_replayed_step_leaves_the_counters_of_its_pass_in_a_new_schedule(name, schedule):
    """A graph is kept by the schedule's repr, so an equal schedule made anew launches it: its ``stats`` are
    those of an eager pass, not empty (deferred streams: the captured pass has not run when the replay is asked)."""
    x, y = network_batch(name, 3)
    with network(name, "numpy") as net:
        eager = copy.deepcopy(schedule)
        net.train_step(x, y, SGD(0.1), eager)
        net.synchronize()
    with NumpyBackend(mode="deferred", order="main-first") as backend, network(name, backend) as net:
        net.train_step(x, y, SGD(0.1), copy.deepcopy(schedule), graph=True)
        replayed = copy.deepcopy(schedule)
        net.train_step(x, y, SGD(0.1), replayed, graph=True)
        net.synchronize()
    assert eager.stats and replayed.stats == eager.stats


def test_a_replay_reports_its_own_pass_after_the_captured_schedule_ran_at_another_batch_size():
    """The counters a replay leaves are its graph's, not those the schedule it was captured with counted since."""
    x, y = batch(SIZES, 2)
    with MLP(SIZES, dtype="float64", backend="numpy") as net:
        captured, replayed = NaumovJacobi(), NaumovJacobi()
        net.train_step(x, y, SGD(0.1), captured, graph=True)
        want = dict(captured.stats)
        net.train_step(*batch(SIZES, 50), SGD(0.1), captured)  # the same object, eagerly, at B = 50
        net.train_step(x, y, SGD(0.1), replayed, graph=True)
        net.synchronize()
    assert want["flops"] != captured.stats["flops"] and replayed.stats == want


def test_graph_must_be_a_bool():
    with MLP(SIZES, backend="numpy") as net, pytest.raises(TypeError, match="graph must be True or False; got 1"):
        net.sgd_step(*batch(SIZES, 2), 0.1, graph=1)


def test_check_finite_in_a_graph_refuses_the_update_and_the_next_step_goes_on():
    """A NaN gradient in a replayed step: the update kernels read the refusal the check left in device
    memory, the next synchronize() raises, and the graph (not captured again) then steps normally."""
    calls = []

    def gradients(nabla_w, nabla_b, delta, a):  # a NaN in nabla_w^3 of the second step, as it runs
        ops_numpy.gradients(nabla_w, nabla_b, delta, a)
        if nabla_w.shape == (5, 13):
            calls.append(1)
            if len(calls) == 2:
                nabla_w[0, 0] = np.nan

    with NumpyBackend() as backend:
        net = MLP(SIZES, backend=backend, check_finite=True)
        backend.ops = patched_ops(gradients=gradients)  # what the graph captures
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)
        before = [p.copy() for p in net.weights + net.biases]
        net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)
        net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)  # enqueued behind the refusal: no update either
        with pytest.raises(FloatingPointError, match=r"nabla_w\[3\] holds NaN or Inf; update refused"):
            net.synchronize()
        assert same(net.weights + net.biases, before)
        net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)
        assert not same(net.weights + net.biases, before)
        assert len(net.plan(3).captured) == 1


@pytest.mark.parametrize("read", [False, True], ids=["step", "read"])
@pytest.mark.parametrize("kind", ["MLP", "RNN", "DagNet"])
def test_a_capture_takes_no_step_of_another_network_on_its_backend(kind, read):
    """A graph step's capture records what is enqueued on the backend's streams, and refuses a copy in or a wait,
    whichever thread enqueues or waits: another network on that backend, stepped (or its ``weights``, a property,
    read: a wait) from another thread while the capture ran, had its step refused (``CaptureError``) or recorded
    into the graph. Its call waits for the capture to end: each network trains as it does when they step one after
    the other (the capture held open half a second for it, or until it stepped)."""
    def steps(backend, held=False):
        captured, stepping = network(kind, backend, seed=1, dtype="float64"), network(kind, backend, seed=2,
                                                                                      dtype="float64")
        inside, stepped, refused = threading.Event(), threading.Event(), []
        if held:
            capture, calls = backend.capture, []

            def held_open(body):
                def recorded():  # the second call is the one recorded
                    body()
                    calls.append(1)
                    if len(calls) == 2:
                        inside.set()
                        stepped.wait(0.5)
                return capture(recorded)

            backend.capture = held_open

        def other():
            inside.wait(5)
            try:
                if read:  # a DagNet has no such property: its parameters(), a call
                    stepping.parameters() if kind == "DagNet" else stepping.weights
                stepping.train_step(*network_batch(kind, 3, seed=4), SGD(0.1))
            except CaptureError as error:
                refused.append(str(error))
            stepped.set()

        thread = threading.Thread(target=other)
        thread.start()
        captured.train_step(*network_batch(kind, 5, seed=3), SGD(0.1), Leapfrog(2), graph=True)
        inside.set()
        thread.join()
        captured.train_step(*network_batch(kind, 5, seed=5), SGD(0.1), Leapfrog(2), graph=True)  # the graph
        return refused, [array for net in (captured, stepping) for array in arrays(net.parameters())]

    with NumpyBackend() as shared, NumpyBackend() as apart:
        refused, together = steps(shared, held=True)
        assert refused == []
        assert_bitwise_equal(together, steps(apart)[1])
