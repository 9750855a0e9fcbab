"""What the core gives every network, run over ``MLP``, ``RNN`` and ``GraphNet``: graph mode (a replayed
step bitwise the eager one, for every schedule a network runs), ``check_finite`` (a NaN or Inf refused
before the update, named, nothing updated), and data parallelism (two mirrored ranks against one
process on the batch they make together)."""

import numpy as np
import pytest

from leapfrog_gpu import (BPTT, MLP, RNN, Add, DagDoubling, DagJacobi, Dense, GraphNet, Leapfrog, LevelSets,
                          NaumovJacobi, NaumovScan, Sequential, TimeScan, Wavefront)
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.parallel.comm import Communicator


def mlp(backend, **options):
    return MLP([3, 6, 5, 2], activation="relu", seed=1, backend=backend, **options)


def rnn(backend, **options):
    return RNN([3, 6, 5, 2], activation="relu", output="every", seed=1, backend=backend, **options)


def dag(backend, **options):
    return GraphNet(3, [("h", Dense(6, "relu"), "x"), ("g", Dense(6, "relu"), "h"), ("s", Add(), ["g", "h"]),
                        ("out", Dense(2, "relu"), "s")], seed=1, backend=backend, **options)


NETWORKS = {"MLP": mlp, "RNN": rnn, "GraphNet": dag}
SCHEDULES = {
    "MLP": [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), NaumovScan(), NaumovJacobi()],
    "RNN": [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), BPTT(), Wavefront(), TimeScan()],
    "GraphNet": [Sequential(), Leapfrog(2), Leapfrog(2, fused=True), LevelSets(), DagJacobi(), DagDoubling()],
}


def batch(name, B, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    steps = (4,) if name == "RNN" else ()  # the RNN's sequences: 4 steps, a target at each
    return rng.random((*steps, 3, B)).astype(dtype), rng.random((*steps, 2, B)).astype(dtype)


def arrays(params):
    return [np.array(array) for named in params.values() for array in named.values()]


CASES = [(name, schedule) for name in NETWORKS for schedule in SCHEDULES[name]]


@pytest.mark.parametrize("mode", ["threads", "deferred"])
@pytest.mark.parametrize("name, schedule", CASES, ids=[f"{n}-{s!r}" for n, s in CASES])
def test_a_replayed_step_is_bitwise_the_eager_step(name, schedule, mode):
    results = []
    for graph in (False, True):
        with NumpyBackend(mode=mode, order="workers-first") as backend:
            net = NETWORKS[name](backend)
            for step in range(4):
                net.sgd_step(*batch(name, 5, seed=step), 0.1 + 0.01 * step, schedule, graph=graph)
            if graph:
                assert len(net._plans[(4, 5) if name == "RNN" else 5].captured) == 1
            results.append(arrays(net.parameters()))
    assert all(np.array_equal(a, b) for a, b in zip(*results))
    assert not all(np.array_equal(a, b) for a, b in zip(results[0], arrays(NETWORKS[name]("numpy").parameters())))


@pytest.mark.parametrize("name", ["RNN", "GraphNet"])
def test_graph_mode_on_a_gpu_is_refused_saying_why(standin, name):
    with NETWORKS[name]("cupy") as net:
        with pytest.raises(ValueError, match=r"graph=True cannot capture .*(cupy.matmul|allocate)"):
            net.sgd_step(*batch(name, 3, seed=0), 0.1, Leapfrog(2), graph=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow in the stream threads, where errstate does not reach
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_check_finite_refuses_a_non_finite_gradient_by_name_and_updates_nothing(name, graph):
    """Weights × 1e15 overflow a float32 relu network: its gradients hold Inf and NaN. The refusal names
    the deepest bad array, and the steps enqueued behind it update nothing either."""
    with NETWORKS[name]("numpy", check_finite=True) as net:
        params = net.parameters()
        for named in params.values():
            named["w"] = np.abs(named["w"]) * np.float32(1e15)
        net.set_parameters(params)
        before = arrays(net.parameters())
        with np.errstate(all="ignore"):
            for step in range(3):
                net.sgd_step(*batch(name, 4, seed=step), 0.1, Leapfrog(2), graph=graph)
            with pytest.raises(FloatingPointError, match=r"holds NaN or Inf; update refused, parameters unchanged") \
                    as info:
                net.synchronize()
        deepest = {"MLP": "nabla_w[4]", "RNN": "delta[4] at t = 4", "GraphNet": "nabla_w[out]"}[name]
        assert str(info.value).startswith(deepest)
        assert all(np.array_equal(a, b) for a, b in zip(arrays(net.parameters()), before))
        net.set_parameters(NETWORKS[name]("numpy").parameters())  # the refusal is cleared: steps update again
        net.sgd_step(*batch(name, 4, seed=9), 0.1, Leapfrog(2), graph=graph)
        net.synchronize()


class Mirror(Communicator):
    """Rank 0 of two in one process; the other rank holds the very same gradients, so every sum doubles them."""

    size = 2

    def __init__(self):
        super().__init__()
        self.rank = 0

    def allgather(self, value):
        return [value, value]

    def engine(self, backend):
        return lambda part: np.multiply(part, 2, out=part)


@pytest.mark.parametrize("name, schedule", [(n, s) for n, s in CASES if not s.fused],
                         ids=[f"{n}-{s!r}" for n, s in CASES if not s.fused])
def test_two_mirrored_ranks_compute_one_process_on_the_batch_they_make(name, schedule):
    """Rank 0 of two takes the first half of each batch, and the other holds the same gradients: the sums
    are those of one process on that half twice over, the update divided by the whole batch."""
    results = []
    for comm in (Mirror(), None):
        with NETWORKS[name]("numpy", dtype="float64", comm=comm) as net:
            for step in range(3):
                x, y = batch(name, 6, seed=step, dtype=np.float64)
                if comm is None:
                    x, y = (np.concatenate([a[..., :3], a[..., :3]], axis=-1) for a in (x, y))
                net.sgd_step(x, y, 0.5, schedule)
            results.append(arrays(net.parameters()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    with NETWORKS[name]("numpy", comm=Mirror()) as net:
        with pytest.raises(ValueError, match="cannot run data-parallel"):
            net.sgd_step(*batch(name, 4, seed=0), 0.1, Leapfrog(2, fused=True))
        with pytest.raises(ValueError, match="graph=True cannot run data-parallel"):
            net.sgd_step(*batch(name, 4, seed=0), 0.1, Leapfrog(2), graph=True)
