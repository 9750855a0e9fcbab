"""The one backward driver and the one step (docs/design.md §2): the same rooms for the three networks,
gradients shaped as their parameters and equal to the float64 references, refusals by name."""

import ast
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import batch, patched_ops
from leapfrog_gpu import MLP, RNN, SGD, Adam, DagNet, Leapfrog, NaumovScan, Sequential, reference
from leapfrog_gpu.backends import host_blas
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import network as core_network
from leapfrog_gpu.core import plan as core_plan
from leapfrog_gpu.dag import Concat, Dense
from leapfrog_gpu.rnn import reference as reference_rnn

PACKAGE = Path(core_network.__file__).resolve().parent.parent
SIZES = [4, 6, 5, 3]


def make(kind, dtype="float64", backend="numpy"):
    """One network of each kind, on host streams (its own, unless ``backend`` is given)."""
    if kind == "MLP":
        return MLP(SIZES, dtype=dtype, backend=backend, seed=1)
    if kind == "RNN":
        return RNN(SIZES, dtype=dtype, backend=backend, seed=1)
    nodes = [("h", Dense(6, "sigmoid"), "x"), ("g", Dense(5, "tanh"), "h"), ("c", Concat(), ["g", "h"]),
             ("out", Dense(3, "sigmoid"), "c")]
    return DagNet(4, nodes, dtype=dtype, backend=backend, seed=1)


def data(net, B=3, seed=0):
    x, y = batch(SIZES, B, seed=seed)
    if isinstance(net, RNN):
        rng = np.random.default_rng(seed)
        return rng.standard_normal((5, SIZES[0], B)), y
    return x, y


NETWORKS = ["MLP", "RNN", "DagNet"]


def room(filename):
    """The room of the package a function is written in: the network base, the network's plan, the core
    driver, the backend; None for any other."""
    path = Path(filename).resolve()
    if PACKAGE not in path.parents:
        return None
    part = path.relative_to(PACKAGE).as_posix()
    if part == "core/network.py":
        return "network base"
    if part in ("core/plan.py", "mlp/plan.py", "rnn/plan.py", "dag/plan.py"):
        return "the network's plan"
    if part == "core/driver.py":
        return "core driver"
    if part.startswith("backends/"):
        return "backend"
    return None


def walk(net, x, y):
    """The rooms of ``sgd_step(x, y, eta, Leapfrog(2))`` in the order they are first entered."""
    entered = []

    def profile(frame, event, arg):
        if event == "call":
            where = room(frame.f_code.co_filename)
            if where is not None and where not in entered:
                entered.append(where)

    sys.setprofile(profile)
    try:
        net.sgd_step(x, y, 0.1, Leapfrog(2))
    finally:
        sys.setprofile(None)
    net.synchronize()
    return entered


@pytest.mark.parametrize("kind", NETWORKS)
def test_a_step_walks_the_same_rooms_on_every_network(kind):
    with make(kind) as net:
        x, y = data(net)
        net.sgd_step(x, y, 0.1, Leapfrog(2))  # the plan made, its first step run
        net.synchronize()
        assert walk(net, x, y) == ["network base", "backend", "the network's plan", "core driver"]


def test_no_network_runs_the_hand_off_or_defines_a_step_of_its_own():
    """The hand-off's mark, off and join() are called by core.driver alone (a string's join takes an
    argument); no network or plan class defines sgd_step; the three networks' sgd_step is the one signature."""
    for package in ("mlp", "rnn", "dag"):
        for path in (PACKAGE / package).glob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            calls = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Attribute) and (node.func.attr != "join" or not node.args)}
            names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
            assert not calls & {"mark", "off", "join", "handoff"} and "Handoff" not in names, path
            defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
            assert "sgd_step" not in defined, path
    want = inspect.signature(core_network.Network.sgd_step)
    assert str(want) == "(self, x, y, eta, schedule=None, *, graph=False, solver=None)"
    for cls in (MLP, RNN, DagNet):
        assert inspect.signature(cls.sgd_step) == want


def reference_gradients(net, x, y):
    """``{unit: {name: array}}`` in float64 from the plain references (the DagNet's from the chain rule
    written here: out reads [g; h], g reads h)."""
    if isinstance(net, MLP):
        nabla_b, nabla_w = reference.backprop(net.weights, net.biases, x, y, net.activation, net.cost,
                                              net.output_activation)
        return {l: {"w": w, "b": b} for l, w, b in zip(net.layer_numbers, nabla_w, nabla_b)}
    if isinstance(net, RNN):
        nabla_b, nabla_w, nabla_u = reference_rnn.backprop(net.weights, net.recurrent, net.biases, x, y,
                                                           net.activation, net.cost, net.output_activation,
                                                           net.output)
        grads = {l: {"w": w, "b": b} for l, w, b in zip(net.layer_numbers, nabla_w, nabla_b)}
        for l, u in zip(net.hidden, nabla_u):
            grads[l]["u"] = u
        return grads
    p = net.parameters()
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    h = sig(p["h"]["w"] @ x + p["h"]["b"][:, None])
    g = np.tanh(p["g"]["w"] @ h + p["g"]["b"][:, None])
    a = sig(p["out"]["w"] @ np.vstack([g, h]) + p["out"]["b"][:, None])
    d_out = (a - y) * a * (1 - a)
    back = p["out"]["w"].T @ d_out
    d_g = back[:5] * (1 - g ** 2)
    d_h = (back[5:] + p["g"]["w"].T @ d_g) * h * (1 - h)
    return {"h": {"w": d_h @ x.T, "b": d_h.sum(1)}, "g": {"w": d_g @ h.T, "b": d_g.sum(1)},
            "out": {"w": d_out @ np.vstack([g, h]).T, "b": d_out.sum(1)}}


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=["sequential", "k2"])
@pytest.mark.parametrize("kind", NETWORKS)
def test_gradients_are_shaped_as_parameters_and_equal_the_reference(kind, schedule):
    with make(kind) as net:
        x, y = data(net, B=4, seed=2)
        got = net.gradients(x, y, schedule)
        params = net.parameters()
        assert {u: {n: a.shape for n, a in named.items()} for u, named in got.items()} == \
            {u: {n: a.shape for n, a in named.items()} for u, named in params.items()}
        want = reference_gradients(net, x, y)
        for unit, named in want.items():
            for name, array in named.items():
                assert np.allclose(got[unit][name], array, rtol=1e-10, atol=1e-12), (unit, name)


@pytest.mark.parametrize("kind", ["RNN", "DagNet"])
def test_one_pass_is_refused_by_name_where_there_is_no_sweep(kind):
    with make(kind) as net:
        x, y = data(net)
        before = net.parameters()
        for schedule in (Sequential(one_pass=True), Leapfrog(2, one_pass=True)):
            with pytest.raises(ValueError, match=r"one_pass=True .* pass fused=True instead"):
                net.sgd_step(x, y, 0.1, schedule)
        after = net.parameters()
        assert all((after[u][n] == before[u][n]).all() for u in before for n in before[u])


def test_a_chain_that_never_frees_a_fused_unit_is_refused(monkeypatch):
    """A fused update behind a reader that never comes would be lost: the driver says which. The hand-off it
    began still ends: the BLAS threads it divided come back."""
    from leapfrog_gpu.core.calibrate import blas_limit

    monkeypatch.setattr(core_plan.Plan, "last_reader", lambda self, l: 1)
    with make("MLP") as net, blas_limit(2):
        with pytest.raises(RuntimeError, match=r"never freed the parameters of \[4, 3, 2\]"):
            net.sgd_step(*data(net), 0.1, Leapfrog(2, fused=True))
        net.synchronize()
        assert host_blas.threads() == 2


SCHEDULES = [Sequential(), Leapfrog(1), Leapfrog(2), Leapfrog(2, fused=True), Leapfrog(8)]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
@pytest.mark.parametrize("kind", NETWORKS)
def test_the_hand_off_shares_the_blas_threads_among_its_streams(kind, schedule, graph, monkeypatch):
    """From the start of a hand-off to its end, after the join, the main stream and the workers that own a unit (those
    it uses; Leapfrog(8) has more workers than units to give them) share the BLAS threads, so that no more run than
    they stand for; then the main stream takes them all again (the next forward pass). A sequential pass shares
    nothing. The share changes only where no worker runs: a worker's product runs on the threads the schedule fixes,
    whatever the timing (the busy workers were given the main stream's part at the join, so that a product of theirs
    ran on one thread or two as it started before the main stream's join or after: other bits, run to run)."""
    with NumpyBackend(trace=True, blas_threads=4) as backend:
        monkeypatch.setattr(host_blas, "share",
                            lambda streams, held: backend.trace.append(("main", "share", streams, held)))
        net = make(kind, backend=backend)
        x, y = data(net)
        for _ in range(2):  # the first makes the workers and buffers; a graph's is its capture
            backend.trace.clear()
            net.sgd_step(x, y, 0.1, schedule, graph=graph)
            net.synchronize()
        trace = backend.trace
        shares = [(i, *entry[2:]) for i, entry in enumerate(trace) if entry[1] == "share"]
        workers = {entry[0] for entry in trace if entry[0] != "main"}
        if not schedule.k:
            assert shares == [] and workers == set()
            return
        (start, streams, none), (end, one, held) = shares
        assert streams == 1 + len(workers) <= 1 + schedule.k and none == 1  # the workers that own a unit, no more
        assert (one, held) == (1, streams)
        assert [i for i, entry in enumerate(trace) if entry[0] != "main" and not start < i < end] == []
        joined = [i for i, entry in enumerate(trace) if entry[:2] == ("main", "wait") and entry[2].startswith("F_")]
        assert len(joined) == len(workers) and max(joined) < end  # the share ends once every worker is done
        after = [entry[2] for entry in trace[end:] if entry[0] == "main" and entry[1] == "start"]
        assert all(name.startswith("update[") for name in after)  # no product: the unfused updates, past the join
        assert any(entry[:2] == ("main", "start") for entry in trace[:start])  # the forward pass, all threads


def test_a_failed_hand_off_still_gives_the_blas_threads_back():
    def fail(*args):
        raise ArithmeticError("injected in gradients")

    with NumpyBackend(blas_threads=2) as backend:
        net = make("MLP", backend=backend)
        x, y = data(net)
        backend.ops = patched_ops(gradients=fail)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        with pytest.raises(ArithmeticError, match="injected in gradients"):
            net.synchronize()
        assert host_blas.threads() == 2


def test_a_hand_off_gives_back_the_blas_threads_in_force_when_it_began():
    """The threads a hand-off divides and gives back are those in force when it begins, not those the backend
    started with: a calibration limits them around its steps (``core.calibrate.blas_limit``), and a sequential
    step after a leapfrog one must still run on the limit's count."""
    from leapfrog_gpu.core.calibrate import blas_limit

    with NumpyBackend(blas_threads=1) as backend:
        net = make("MLP", backend=backend)
        x, y = data(net)
        for threads in (2, 3, 1):
            with blas_limit(threads):
                net.sgd_step(x, y, 0.1, Leapfrog(2))
                net.synchronize()
                assert host_blas.threads() == threads


def waits_before_launches(trace):
    """``{(stream, launch): event}``: the event each worker's launch waited for last, from a ``trace``."""
    last, seen = {}, {}
    for stream, what, name, *_ in trace:
        if stream != "main" and what == "wait":
            last[stream] = name
        elif stream != "main" and what == "start":
            seen[stream, name] = last[stream]
    return seen


@pytest.mark.parametrize("optimizer, B, joint", [(Adam(), 3, False), (SGD(0.1), 3, "MLP"), (Adam(), 1, "MLP")],
                         ids=["adam", "plain-sgd", "adam-host-B1"])
@pytest.mark.parametrize("kind", NETWORKS)
def test_fused_gradients_wait_for_their_own_delta_and_the_update_for_the_last_reader(kind, optimizer, B, joint):
    """Fused, a unit's gradients run behind E of the unit itself, its update behind E of its last reader; where
    the gradients' pass makes the update (the MLP's plain SGD update, its host pass at B = 1) both wait for the
    last reader."""
    schedule = Leapfrog(2, fused=True)
    with NumpyBackend(trace=True) as backend:
        net = make(kind, backend=backend)
        x, y = data(net, B=B)
        for _ in range(2):  # the first makes the workers and buffers
            backend.trace.clear()
            net.train_step(x, y, optimizer, schedule)
            net.synchronize()
        plan = net.plan(x.shape[0], B) if kind == "RNN" else net.plan(B)
        reader = {unit: f"E_{schedule.last_reader(plan, unit)}" for unit in plan.units}
        waited = waits_before_launches(backend.trace)
    assert {unit for _, launch in waited for unit in plan.units if launch.endswith(f"[{unit}]")} == set(plan.units)
    for (_, launch), event in waited.items():
        unit = next(unit for unit in plan.units if launch.endswith(f"[{unit}]"))
        together = joint is True or joint == kind
        assert event == (reader[unit] if launch.startswith("update") or together else f"E_{unit}"), launch


LONG = [512, 512, 512, 8]
"""An MLP whose w^2 and w^3 are long enough to halve (``MLPPlan.halved``: 2^18 elements), w^4 not."""


def stream_record(trace, stream):
    """What ``stream`` did in a ``trace``, in order: each launch's name, "wait X" and "record X" for events."""
    return [name if what == "start" else f"{what} {name}" for s, what, name, *_ in trace
            if s == stream and what != "end"]


def traced_step(sizes, optimizer, schedule, kind="MLP"):
    """The trace of the second ``train_step`` of a float64 network of ``kind`` (the first makes its workers)."""
    with NumpyBackend(trace=True) as backend:
        net = MLP(sizes, dtype="float64", backend=backend, seed=1) if kind == "MLP" else make(kind, backend=backend)
        x, y = data(net) if kind != "MLP" else batch(sizes, 3)
        for _ in range(2):
            backend.trace.clear()
            net.train_step(x, y, optimizer, schedule)
            net.synchronize()
        return list(backend.trace)


@pytest.mark.parametrize("optimizer", [Adam(), SGD(0.1, momentum=0.9)], ids=["adam", "momentum"])
def test_one_worker_and_the_main_stream_update_a_long_layer_in_halves(optimizer):
    """Under one worker on the host, with an optimizer that writes nabla_w first, a layer of 2^18 elements or more is
    updated in halves: its worker updates the bottom rows (and b) behind the layer's last reader, and records G_l
    after its gradients; the main stream, once its chain is done, waits for G_l and updates the top rows, the layers
    in the order the worker frees them. A shorter layer is the worker's whole."""
    trace = traced_step(LONG, optimizer, Leapfrog(1, fused=True))
    assert stream_record(trace, "worker0") == [
        "wait E_4", "gradients[4]", "wait E_3", "update[4]",
        "wait E_3", "gradients[3]", "record G_3", "wait E_2", "update[3] bottom half",
        "wait E_2", "gradients[2]", "record G_2", "update[2] bottom half", "record F_0"]
    main = stream_record(trace, "main")
    assert main[main.index("delta[2]"):] == ["delta[2]", "record E_2", "wait G_3", "update[3] top half", "wait G_2",
                                              "update[2] top half", "wait F_0", "step done"]


@pytest.mark.parametrize("kind, sizes, optimizer, schedule", [
    ("MLP", SIZES, Adam(), Leapfrog(1, fused=True)),  # no layer long enough
    ("MLP", LONG, Adam(), Leapfrog(2, fused=True)),  # two workers share the cores already
    ("MLP", LONG, Adam(), Leapfrog(1)),  # unfused: every update on the main stream, after the join
    ("MLP", LONG, SGD(0.1), Leapfrog(1, fused=True)),  # the plain step is made inside (7)
    ("MLP", LONG, Adam(), Leapfrog(1, one_pass=True)),  # the sweep updates w
    ("MLP", LONG, Adam(), NaumovScan(k=1, fused=True)),  # another chain
    ("RNN", None, Adam(), Leapfrog(1, fused=True)),  # a network that halves nothing
    ("DagNet", None, Adam(), Leapfrog(1, fused=True))],
    ids=["short", "k2", "unfused", "plain-sgd", "one-pass", "naumov", "rnn", "dag"])
def test_no_update_is_halved_where_halving_would_not_pay(kind, sizes, optimizer, schedule):
    """Halving is for one worker's ``Leapfrog`` on the host, a long layer and an update apart from its gradients:
    anywhere else no launch is a half and no G_ event is recorded."""
    trace = traced_step(sizes, optimizer, schedule, kind)
    assert [entry for entry in trace if "half" in str(entry[2]) or str(entry[2]).startswith("G_")] == []
