"""What the core gives every network, run over ``MLP``, ``RNN`` and ``DagNet``: graph mode (a replayed
step bitwise the eager one, for every schedule a network runs), ``check_finite`` (a NaN or Inf refused
before the update, named, nothing updated), and data parallelism (two mirrored ranks against one
process on the batch they make together); a bad seed refused by name."""

import threading

import numpy as np
import pytest

from leapfrog_gpu import (BPTT, MLP, RNN, Adam, DagDoubling, DagJacobi, Leapfrog, LevelSets, NaumovJacobi, NaumovScan,
                          Sequential, TimeScan, Wavefront)
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import network as core_network
from helpers import host
from networks import NAMES, TAU, Mirror, arrays, network, network_batch


SCHEDULES = {
    "MLP": [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), NaumovScan(), NaumovJacobi()],
    "RNN": [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), BPTT(), Wavefront(), TimeScan()],
    "DagNet": [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), LevelSets(), DagJacobi(), DagDoubling()],
}


CASES = [(name, schedule) for name in NAMES for schedule in SCHEDULES[name]]


@pytest.mark.parametrize("mode", ["threads", "deferred"])
@pytest.mark.parametrize("name, schedule", CASES, ids=[f"{n}-{s!r}" for n, s in CASES])
def test_a_replayed_step_is_bitwise_the_eager_step(name, schedule, mode):
    results = []
    for graph in (False, True):
        with NumpyBackend(mode=mode, order="workers-first") as backend:
            net = network(name, backend)
            for step in range(4):
                net.sgd_step(*network_batch(name, 5, seed=step), 0.1 + 0.01 * step, schedule, graph=graph)
            if graph:
                assert len(net._plans[(TAU, 5) if name == "RNN" else 5].captured) == 1
            results.append(arrays(net.parameters()))
    assert all(np.array_equal(a, b) for a, b in zip(*results))
    assert not all(np.array_equal(a, b) for a, b in zip(results[0], arrays(network(name, "numpy").parameters())))


@pytest.mark.parametrize("schedule", [Leapfrog(2), Leapfrog("auto")], ids=repr)
@pytest.mark.parametrize("name", ["RNN", "DagNet"])
def test_graph_mode_on_a_gpu_is_refused_saying_why_before_any_step(standin, name, schedule):
    """Leapfrog("auto")'s first graph step would run eagerly: refused first all the same, nothing changed."""
    with network(name, "cupy") as net:
        before = host(a for named in net.parameters().values() for a in named.values())
        with pytest.raises(ValueError, match=r"graph=True cannot capture .*(cupy.matmul|allocate)"):
            net.sgd_step(*network_batch(name, 3, seed=0), 0.1, schedule, graph=True)
        after = host(a for named in net.parameters().values() for a in named.values())
        assert all(np.array_equal(a, b) for a, b in zip(after, before))


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (1.5, TypeError), ("abc", TypeError), (True, TypeError)])
@pytest.mark.parametrize("name", NAMES)
def test_a_bad_seed_is_refused_by_name_before_a_backend_is_made(name, seed, error):
    """Refused before the network makes its backend, whose thread would outlive the refusal."""
    before = set(threading.enumerate())
    with pytest.raises(error) as refused:
        network(name, "numpy", seed=seed)
    assert str(refused.value) == f"seed must be an integer >= 0 or None; got {seed!r}"
    assert set(threading.enumerate()) == before


@pytest.mark.parametrize("name", NAMES)
def test_seed_none_draws_other_parameters_each_time_and_a_seed_the_same(name):
    drawn = {}
    for key, seed in (("none", None), ("none again", None), ("3", 3), ("3 again", 3)):
        with network(name, "numpy", seed=seed) as net:
            drawn[key] = arrays(net.parameters())
    assert not all(np.array_equal(a, b) for a, b in zip(drawn["none"], drawn["none again"]))
    assert all(np.array_equal(a, b) for a, b in zip(drawn["3"], drawn["3 again"]))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # NumPy's overflow warnings: none from the streams' ops
@pytest.mark.parametrize("mode", ["threads", "serial", "deferred"])
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_check_finite_refuses_a_non_finite_gradient_by_name_and_updates_nothing(name, graph, mode):
    """Weights × 1e15 overflow a float32 relu network: its gradients hold Inf and NaN. The refusal names
    the deepest bad array, and the steps enqueued behind it update nothing either; the overflows raise no NumPy
    warning, in any mode (the network reports them, as on a GPU)."""
    with NumpyBackend(mode=mode) as backend, network(name, backend, check_finite=True) as net:
        params = net.parameters()
        for named in params.values():
            if "w" in named:  # a layer norm's gain and shift stay as they are
                named["w"] = np.abs(named["w"]) * np.float32(1e15)
        net.set_parameters(params)
        before = arrays(net.parameters())
        for step in range(3):
            net.sgd_step(*network_batch(name, 4, seed=step), 0.1, Leapfrog(2), graph=graph)
        with pytest.raises(FloatingPointError, match=r"holds NaN or Inf; update refused, parameters unchanged") as info:
            net.synchronize()
        deepest = {"MLP": "nabla_w[5]", "RNN": f"delta[4] at t = {TAU}", "DagNet": "nabla_w[out]"}[name]
        assert str(info.value).startswith(deepest)
        assert all(np.array_equal(a, b) for a, b in zip(arrays(net.parameters()), before))
        net.feedforward(network_batch(name, 4)[0])  # overflows too (but in the DagNet, whose layer norm bounds them)
        net.set_parameters(network(name, "numpy").parameters())  # the refusal is cleared: steps update again
        net.sgd_step(*network_batch(name, 4, seed=9), 0.1, Leapfrog(2), graph=graph)
        net.synchronize()


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name, schedule", CASES, ids=[f"{n}-{s!r}" for n, s in CASES])
def test_two_mirrored_ranks_compute_one_process_on_the_batch_they_make(name, schedule, graph):
    """Rank 0 of two takes the first half of each batch, and the other holds the same gradients: the sums
    are those of one process on that half twice over, the update divided by the whole batch; fused (each
    update behind its sum) and as graphs (the sums inside them) alike."""
    results = []
    for comm in (Mirror(), None):
        with network(name, "numpy", dtype="float64", comm=comm) as net:
            for step in range(3):
                x, y = network_batch(name, 6, seed=step, dtype=np.float64)
                if comm is None:
                    x, y = (np.concatenate([a[..., :3], a[..., :3]], axis=-1) for a in (x, y))
                net.sgd_step(x, y, 0.5, schedule, graph=graph)
            results.append(arrays(net.parameters()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_repr_names_the_backend_and_a_communicator(network_name):
    """The repr says the network's backend (which ``backend="auto"`` picks), for every network; a data-parallel one
    names its communicator too."""
    with network(network_name, NumpyBackend()) as net:
        assert repr(net).endswith(f", backend={net.backend!r})"), repr(net)
    with network(network_name, "numpy", comm=Mirror(rank=1)) as net:
        assert repr(net).endswith(f", backend={net.backend!r}, comm={net.comm!r})"), repr(net)


@pytest.mark.parametrize("make", [MLP, RNN])
def test_repr_names_an_output_activation_other_than_the_one_its_activation_and_cost_give(make):
    with make([3, 4, 2], output_activation="identity", backend="numpy") as net:
        assert ", output_activation='identity'," in repr(net)
    with make([3, 4, 2], activation="tanh", backend="numpy") as net, \
            make([3, 4, 2], activation="tanh", cost="cross_entropy", backend="numpy") as entropy:
        assert "output_activation" not in repr(net) + repr(entropy)
        assert entropy.output_activation == "sigmoid"


PAST = [*range(1, core_network.PLANS + 3), 1, 2]
"""Batch sizes: PLANS + 2 of them, then the first two again."""


def steps_past_the_plans_kept(name, backend, graph):
    """An Adam step at each batch size of ``PAST``, every one enqueued before any is awaited; the parameters after
    them and the batch shapes of the plans kept, in the order last used."""
    with network(name, backend, dtype="float64") as net:
        for step, size in enumerate(PAST):
            net.train_step(*network_batch(name, size, seed=step, dtype=np.float64), Adam(0.01), graph=graph)
        kept = list(net._plans)
        return host(array for named in net.parameters().values() for array in named.values()), kept


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("mode", ["threads", "deferred"])
def test_a_network_keeps_the_plans_last_used_and_steps_past_them_alike(network_name, mode, graph, monkeypatch):
    """A network keeps the PLANS plans last used, and a plan let go while its step is enqueued still runs it
    (deferred: every step runs after the plans are let go): the same bits as a network that keeps every plan."""
    with NumpyBackend(mode=mode) as backend:
        got, kept = steps_past_the_plans_kept(network_name, backend, graph)
    monkeypatch.setattr(core_network, "PLANS", 100)
    with NumpyBackend(mode=mode) as backend:
        want, every = steps_past_the_plans_kept(network_name, backend, graph)
    shape = (lambda size: (TAU, size)) if network_name == "RNN" else (lambda size: size)
    assert kept == [shape(size) for size in PAST[4:]] and len(every) == len(PAST) - 2
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_steps_on_plans_let_go_on_the_cupy_stand_in_are_those_on_plans_kept(standin, monkeypatch):
    """On the CuPy stand-in: steps enqueued on plans let go (each held by ``backend.keep`` until the next wait) give
    the bits of a network that keeps every plan."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend:
        got, kept = steps_past_the_plans_kept("MLP", backend, False)
    monkeypatch.setattr(core_network, "PLANS", 100)
    with CupyBackend() as backend:
        want, _ = steps_past_the_plans_kept("MLP", backend, False)
    assert len(kept) == len(PAST) - 4 and all(np.array_equal(a, b) for a, b in zip(got, want))  # PLANS


@pytest.mark.parametrize("name", ["parameters", "gradients", "feedforward", "weights", "optimizer_state"])
def test_copies_handed_out_on_the_cupy_stand_in_live_on_the_callers_stream(standin, name):
    """A copy the network hands out is made on the caller's stream: the caller's work on it, queued there, and the
    copy dropped, its memory goes back to that stream's pool (made on the network's main stream, it went back to
    the main stream's, whose next allocation, a copy handed out, took it while that work was queued: use after
    free on the stand-in)."""
    import cupy

    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend, network("MLP", backend, dtype="float64") as net:
        x, y = network_batch("MLP", 5, dtype=np.float64)
        net.train_step(x, y, Adam(0.01), Leapfrog(2))
        handed = {"parameters": lambda: net.parameters()[2]["w"], "gradients": lambda: net.gradients(x, y)[2]["w"],
                  "feedforward": lambda: net.feedforward(x), "weights": lambda: net.weights[0],
                  "optimizer_state": lambda: net.optimizer_state()["exp_avg"][2]["w"]}[name]
        a = handed()
        want = cupy.asnumpy(a) * 2
        doubled = a * 2  # on the caller's stream, queued
        del a
        handed()
        np.testing.assert_array_equal(cupy.asnumpy(doubled), want)


def test_a_plan_of_no_column_is_refused_naming_its_batch(network_name):
    """``plan(B)`` (the RNN's ``plan(tau, B)``) of every network, as its steps refuse an empty batch: the RNN's and the
    DagNet's made a plan of B = 0."""
    with network(network_name, "numpy") as net:
        before = (TAU,) if network_name == "RNN" else ()
        with pytest.raises(ValueError, match=r"^batch must be an integer >= 1; got 0$"):
            net.plan(*before, 0)
        with pytest.raises(TypeError, match=r"^batch must be an integer >= 1; got True$"):
            net.plan(*before, True)
