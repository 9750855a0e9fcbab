"""Data parallelism (``leapfrog_gpu.parallel``): P ranks under mpiexec compute what one process computes on
the whole batches, every rank to the same bit; in one process, a stand-in of two ranks makes each wait
of the communication stream fail its test when removed; one process alone is what it was."""

import gc
import json
import os
import re
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import mpi_cases
import mpirun
from helpers import Gate, batch, batch_id, gpu, install_standin, schedule_id, to_numpy
from networks import Mirror, arrays, network, network_batch
from leapfrog_gpu import (MLP, RNN, SGD, Adam, DagNet, Dense, ForwardNewton, Leapfrog, NaumovJacobi, NaumovScan,
                          Sequential, TimeNewton, reference)
from leapfrog_gpu.rnn import reference as reference_rnn
from leapfrog_gpu.mlp.plan import MLPPlan
from leapfrog_gpu.parallel import reducer as data_parallel, comm as parallel
from leapfrog_gpu.backends import collective
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.parallel.reducer import Reducer
from leapfrog_gpu.parallel.comm import Communicator

pytestmark = pytest.mark.slow

SIZES = [9, 17, 5, 13, 7, 3]
ETA = 0.5
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
"""Relative error ||P ranks - one process|| / ||one process|| of every parameter after 20 steps: the
ranks add their partial sums in another order than one process adds the samples (a few ulps a step,
grown by the training); the runs here stay below 1e-14 and 4e-7."""


def reference_steps(weights, biases, steps, rank=0, ranks=2):
    """Parameters after SGD steps on ``steps`` [(x, y)] in float64 by the plain reference, where the
    gradient is ``ranks`` times that of this rank's share (every other rank holds the same share)."""
    weights, biases = [w.astype(np.float64) for w in weights], [b.astype(np.float64) for b in biases]
    comm = _ranked(rank, ranks)
    for x, y in steps:
        share = comm.share(x.shape[1])
        nabla_b, nabla_w = reference.backprop(weights, biases, x[:, share], y[:, share],
                                              "sigmoid", "quadratic", "sigmoid")
        scale = ETA / x.shape[1]
        weights = [w - scale * ranks * g for w, g in zip(weights, nabla_w)]
        biases = [b - scale * ranks * g for b, g in zip(biases, nabla_b)]
    return weights + biases


def relative_error(got, want):
    return max(np.linalg.norm(np.asarray(g, np.float64) - w) / np.linalg.norm(w) for g, w in zip(got, want))


# -- one process ---------------------------------------------------------------------------------------


def test_alone_no_mpi_is_imported_and_the_network_is_what_it_was():
    code = ("import sys; from leapfrog_gpu import MLP, parallel; comm = parallel.world(); "
            "net = MLP([3, 4, 2], backend='numpy', comm=comm); "
            "print(comm.rank, comm.size, net.comm, 'mpi4py' in sys.modules, repr(net))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MV2_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:4] == ["0", "1", "None", "False"]
    assert "comm=" not in out.stdout


def test_a_one_process_communicator_changes_no_bit():
    steps = [batch(SIZES, 4, seed=step, dtype=np.float32) for step in range(5)]
    params = []
    for comm in (None, Communicator(), Communicator(bucket_bytes=1 << 20)):
        with MLP(SIZES, seed=3, backend="numpy", comm=comm) as net:
            assert net.comm is None
            for x, y in steps:
                net.sgd_step(x, y, ETA, Leapfrog(2))
            assert net.plan(4).reducer is None and net.backend._comm is None  # no communication stream
            params.append([p.tobytes() for p in net.weights + net.biases])
    assert params[0] == params[1] == params[2]


def test_a_launcher_without_mpi4py_is_refused(monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py raises ImportError
    with pytest.raises(RuntimeError, match=r"a launcher started 2 processes, but mpi4py is not installed: "
                                           r"pip install 'leapfrog_gpu\[mpi\]'"):
        parallel.world()


@mpirun.needs_mpi
def test_a_launcher_of_another_mpi_is_refused():
    """Started by another MPI's launcher, each process would see itself alone and train on its own."""
    env = {**os.environ, "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}
    out = subprocess.run([sys.executable, "-W", "ignore", "-m", "leapfrog_gpu", "--epochs", "1"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("leapfrog-train: error: a launcher started 2 processes, but MPI sees 1: mpiexec and mpi4py "
                           "come from different MPI libraries; use the mpiexec of ")


@pytest.mark.parametrize("count,ranks", [(0, 2), (1, 3), (7, 3), (9, 3), (64, 2), (5, 8)])
def test_shares_are_contiguous_cover_the_batch_and_differ_by_one_at_most(count, ranks):
    shares = [_ranked(r, ranks).share(count) for r in range(ranks)]
    assert shares[0].start == 0 and shares[-1].stop == count
    assert all(a.stop == b.start for a, b in zip(shares, shares[1:]))
    lengths = [s.stop - s.start for s in shares]
    assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)


def _ranked(rank, size):
    comm = Communicator()
    comm.rank, comm.size = rank, size
    return comm


@pytest.mark.parametrize("bucket_bytes,want", [
    (0, [[5], [4], [3], [2]]),
    (150, [[5, 4], [3], [2]]),  # float32 bytes: layer 5 4*(4+1)*4 = 80, 4: 64, 3: 3*(6+1)*4 = 84, 2: 72
    (10**9, [[5, 4, 3, 2]]),
])
def test_buckets_group_consecutive_layers_up_to_their_size(bucket_bytes, want):
    with MLP([2, 6, 3, 4, 4], backend="numpy") as net:
        assert net.gradient_layout() == mlp_layout([2, 6, 3, 4, 4])
    assert data_parallel.buckets(mlp_layout([2, 6, 3, 4, 4]), 4, bucket_bytes) == want


def mlp_layout(sizes):
    """An MLP's gradients in the order its schedules hand them over: layer L first, w^l then b^l."""
    return [(l, {"w": (sizes[l - 1], sizes[l - 2]), "b": (sizes[l - 1],)}) for l in range(len(sizes), 1, -1)]


def test_gradients_are_views_of_one_flat_buffer_in_the_order_they_are_handed_over():
    with MLP(SIZES, backend="numpy", comm=Mirror()) as net:
        plan = net.plan(3)
        flat, offset = plan.reducer.flat, 0
        for l in range(net.L, 1, -1):
            for array in (plan.nabla_w[l], plan.nabla_b[l]):
                assert array.base is flat or array.base.base is flat
                assert array.__array_interface__["data"][0] == flat.__array_interface__["data"][0] + offset * 4
                offset += array.size
        assert offset == flat.size


def test_every_rank_must_build_the_same_network():
    class Other(Mirror):
        def allgather(self, value):
            if value is None:  # what each rank met building its network: nothing
                return [None, None]
            other = dict(value, sizes=[9, 17, 5]) if isinstance(value, dict) else "another digest"
            return [value, other]

    with pytest.raises(ValueError, match=r"every rank must use the same network, but they differ in sizes: "
                                         r"\[9, 17, 5\] on rank 1, \[9, 17, 5, 13, 7, 3\] on rank 0"):
        MLP(SIZES, backend="numpy", comm=Other())


@pytest.mark.parametrize("given, kind", [
    ({"bucket_bytes": "1"}, TypeError), ({"bucket_bytes": 1.5}, TypeError), ({"bucket_bytes": True}, TypeError),
    ({"bucket_bytes": -1}, ValueError), ({"timeout": "5"}, TypeError), ({"timeout": True}, TypeError),
    ({"timeout": 0}, ValueError), ({"timeout": -1.0}, ValueError), ({"timeout": float("nan")}, ValueError)])
def test_world_refuses_a_bad_argument_in_one_process_as_under_mpiexec(given, kind):
    """A wrong type is a TypeError, a wrong value a ValueError, naming the argument; in one process as under
    mpiexec (the timeout was checked only by MPI's communicator)."""
    (name, value), = given.items()
    with pytest.raises(kind, match=rf"^{name} must be .*; got {re.escape(repr(value))}$"):
        parallel.world(**given)


def test_ranks_that_differ_in_check_finite_are_refused():
    """One rank checking its gradients and the other not would step apart at the first NaN (one refuses the update,
    the other takes it), or leave a fused one waiting."""
    class Other(Mirror):
        def allgather(self, value):
            if value is None:
                return [None, None]
            other = dict(value, check_finite=True) if isinstance(value, dict) else "another digest"
            return [value, other]

    with pytest.raises(ValueError, match=r"every rank must use the same network, but they differ in check_finite: "
                                         r"True on rank 1, False on rank 0$"):
        MLP(SIZES, backend="numpy", comm=Other())


class Scaled(Gate):
    """``Gate`` with an option, whose ``repr`` does not show it (the default ``Layer.__repr__``)."""

    def __init__(self, factor=1.0):
        self.factor = factor

    def options(self):
        return {"factor": self.factor}


def test_ranks_tell_apart_layers_of_their_own_that_differ_in_an_option_alone():
    """The digests the ranks compare differ for Scaled(1.0) and Scaled(5.0), whose reprs are alike."""
    class Digests(Mirror):
        def allgather(self, value):
            if isinstance(value, str):
                said.append(value)
            return [value, value]

    said = []
    for factor in (1.0, 5.0):
        assert repr(Scaled(factor)) == "Scaled()"
        with DagNet(3, [("s", Scaled(factor), "x"), ("out", Dense(2), "s")], backend="numpy", comm=Digests()):
            pass
    assert len(said) == 2 and said[0] != said[1]


def test_a_schedules_memory_is_checked_at_the_largest_share_on_every_rank():
    """B = 3 on two ranks: shares of 2 and 1 columns. A limit between what 1 and 2 columns need is refused by rank 1
    too, as by rank 0, rather than rank 1 alone going on to wait for rank 0's sums."""
    with MLP([4, 8, 8, 8, 2], backend="numpy") as alone:
        need = {B: NaumovScan(k=2).check_memory(alone, B) for B in (1, 2)}
    limit = (need[1] + need[2]) // 2
    x, y = batch([4, 2], 3)
    for rank in (0, 1):
        with MLP([4, 8, 8, 8, 2], backend="numpy", comm=Mirror(rank)) as net:
            before = arrays(net.parameters())
            with pytest.raises(ValueError, match=rf"^NaumovScan needs {need[2]} bytes .* batch B=2 "):
                net.sgd_step(x, y, 0.1, NaumovScan(k=2, memory_limit=limit))
            assert all(np.array_equal(a, b) for a, b in zip(arrays(net.parameters()), before))


@pytest.mark.parametrize("name", ["MLP", "RNN", "DagNet"])
def test_a_network_one_rank_cannot_hold_is_refused_on_every_rank(name):
    """Rank 1 ran out of memory drawing its parameters: rank 0, which drew its own, raises that too, rather than
    wait for rank 1 in the comparison of the two networks (where rank 1 never comes)."""
    class Failed(Mirror):
        def allgather(self, value):
            return [value, (MemoryError, "Unable to allocate 74.5 GiB")]

    with pytest.raises(MemoryError, match="^rank 1: Unable to allocate 74.5 GiB$") as raised:
        network(name, "numpy", comm=Failed())
    assert raised.value.every_rank


@pytest.mark.parametrize("make", [lambda comm: RNN([3, 4, 2], cell="gruu", backend="numpy", comm=comm),
                                  lambda comm: RNN([3, 4, 2], recurrent_norm="1", backend="numpy", comm=comm),
                                  lambda comm: DagNet(3, [("a", Dense(4), ["zz"])], backend="numpy", comm=comm),
                                  lambda comm: DagNet("3", [("a", Dense(4), ["input"])], backend="numpy", comm=comm),
                                  lambda comm: MLP([3, 0, 2], backend="numpy", comm=comm)],
                         ids=["RNN cell", "RNN recurrent_norm", "DagNet node", "DagNet n_input", "MLP sizes"])
def test_an_argument_one_rank_refuses_is_refused_on_every_rank(make):
    """A rank that refuses its network's arguments says so to the others, which would otherwise wait for it in the
    comparison of the networks (``reducer.building``): the error is raised on every rank (its ``every_rank``)."""
    with pytest.raises((ValueError, TypeError)) as raised:
        make(Mirror())
    assert raised.value.every_rank


@pytest.mark.parametrize("mode", ["threads", "serial"])
@pytest.mark.parametrize("network_name", ["DagNet", "RNN"])
def test_a_step_that_failed_on_one_rank_ends_its_sums(network_name, mode):
    """A strict solver that fails on this rank's share raises here (at the wait, or on the serial streams as the step
    is enqueued), its step's sums never issued, which the other ranks wait in: a later step's sums would pair with
    theirs (another step's gradients, summed without a word), so every later summed pass over the communicator is
    refused. A step ``check_finite`` refuses, on the summed gradients and so on every rank alike, and a forward pass
    alone, which sums nothing, leave the ranks paired. One process goes on after any of them."""
    def solver():
        return (ForwardNewton if network_name == "DagNet" else TimeNewton)(tol=1e-10, strict=True)

    for comm in (Mirror(), None):
        with NumpyBackend(mode=mode) as backend, \
                network(network_name, backend, dtype="float64", comm=comm, check_finite=True) as net:
            x, y = network_batch(network_name, 4, dtype=np.float64)
            huge = x.copy()
            huge[..., 0] = np.finfo(np.float64).max  # in rank 0's share
            drawn = net.parameters()
            net.set_parameters({unit: {name: np.full_like(array, 1e300) for name, array in named.items()}
                                for unit, named in drawn.items()})
            net.train_step(x, y, SGD(0.1))
            with pytest.raises(FloatingPointError, match="update refused"):
                net.synchronize()
            net.set_parameters(drawn)
            with pytest.raises(RuntimeError, match="stopped after"):
                net.feedforward(huge, solver=solver())
            net.train_step(x, y, SGD(0.1))
            with pytest.raises(RuntimeError, match="stopped after"):
                net.train_step(huge, y, SGD(0.1), solver=solver())
                net.synchronize()
            if comm is None:
                net.train_step(x, y, SGD(0.1))
                continue
            message = (f"^a step of this {network_name} failed on rank 0, and its sums of the gradients, in which "
                       "the other ranks wait, never left it: a later step's would pair with theirs")
            with pytest.raises(RuntimeError, match=message):
                net.train_step(x, y, SGD(0.1))
            with pytest.raises(RuntimeError, match=message):
                net.gradients(x, y)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(1), Leapfrog(3), NaumovScan(k=2), NaumovJacobi(k=2)],
                         ids=schedule_id)
@pytest.mark.parametrize("bucket_bytes", [0, 500, 10**9])
def test_two_mirrored_ranks_against_the_reference(schedule, bucket_bytes):
    comm = Mirror(bucket_bytes=bucket_bytes)
    steps = [batch(SIZES, count, seed=count) for count in (6, 7, 1, 2, 5)]
    with MLP(SIZES, dtype="float64", seed=3, backend="numpy", comm=comm) as net:
        want = reference_steps(net.weights, net.biases, steps)
        for x, y in steps:
            net.sgd_step(x, y, ETA, schedule)
        assert relative_error(net.weights + net.biases, want) < 1e-12
    buckets = len(data_parallel.buckets(mlp_layout(SIZES), 8, bucket_bytes))
    assert len(comm.sums) == len(steps) * buckets


def test_a_rank_without_samples_adds_zeros():
    """Rank 1 of 2 takes no column of a batch of 1: it sums zero gradients, and the update still runs."""
    comm = Mirror(rank=1)
    with MLP(SIZES, dtype="float64", backend="numpy", comm=comm) as net:
        before = [p.copy() for p in net.weights + net.biases]
        x, y = batch(SIZES, 1)
        nabla_b, nabla_w = net.backprop(x, y, Leapfrog(2))
        assert all(not g.any() for g in nabla_b + nabla_w)
        net.sgd_step(x, y, ETA, Leapfrog(2))
        assert all(np.array_equal(a, b) for a, b in zip(before, net.weights + net.biases))
        x, y = batch(SIZES, 3)  # then rank 1 takes the last column
        want = reference_steps(before[:5], before[5:], [(x, y)], rank=1)
        net.sgd_step(x, y, ETA, Leapfrog(2))
        assert relative_error(net.weights + net.biases, want) < 1e-12


@pytest.mark.parametrize("rank", [0, 1])
def test_two_mirrored_ranks_evaluate_what_one_process_does(rank):
    """Two ranks, run in turn in one process: the other rank scores its half of 8 distinct samples first, and what
    it sums is added to this rank's sums. ``evaluate``'s loss, mse and accuracy are then one process's on the whole
    set (an mse of this rank's squared errors alone came out half of it; a rank scoring the other's half, or not
    summing, or dividing by its own count, is off too). The expected values are written out in float64 from
    ``feedforward`` of the whole set by a network alone."""

    class Summing(Mirror):
        def __init__(self, rank, other=None):
            super().__init__(rank=rank)
            self.given, self.other = [], other

        def sum(self, values):
            self.given.append(np.array(values, dtype=np.float64))
            return self.given[-1] + (self.other.pop(0) if self.other is not None else 0)

    x, y = batch(SIZES, 8, seed=5)
    labels = np.array([0, 2, 1, 2, 1, 0, 2, 1])
    with MLP(SIZES, dtype="float64", seed=3, backend="numpy") as alone:
        a = alone.feedforward(x)
    first = Summing(rank=1 - rank)
    with MLP(SIZES, dtype="float64", seed=3, backend="numpy", comm=first) as other:
        other.evaluate(x, y), other.evaluate(x, labels)
    with MLP(SIZES, dtype="float64", seed=3, backend="numpy", comm=Summing(rank, list(first.given))) as net:
        scores, classes = net.evaluate(x, y), net.evaluate(x, labels)
    assert scores.keys() == {"loss", "mse"} and classes.keys() == {"loss", "accuracy"}
    assert np.isclose(scores["mse"], np.mean((a - y) ** 2), rtol=1e-14, atol=0)
    assert np.isclose(scores["loss"], 0.5 * np.sum((a - y) ** 2) / 8, rtol=1e-14, atol=0)
    one_hot = np.eye(3)[:, labels]
    assert np.isclose(classes["loss"], 0.5 * np.sum((a - one_hot) ** 2) / 8, rtol=1e-14, atol=0)
    assert classes["accuracy"] == np.mean(np.argmax(a, axis=0) == labels)


def test_the_one_pass_sweep_is_refused():
    """It updates w^{l+1} inside the chain's (5), before any sum across ranks; fused=True updates behind them."""
    with MLP(SIZES, backend="numpy", comm=Mirror()) as net:
        x, y = batch(SIZES, 4)
        before = [p.copy() for p in net.weights]
        with pytest.raises(ValueError, match=r"Leapfrog\(k=2, one_pass=True\) cannot run data-parallel: the one-pass "
                                             r"sweep updates w inside the chain's \(5\), before the sum across ranks "
                                             r"of its gradient; pass fused=True instead of one_pass=True"):
            net.sgd_step(x, y, ETA, Leapfrog(2, one_pass=True))
        with pytest.raises(ValueError, match=r"of its gradient; pass one_pass=False$"):  # fused=True was given
            net.sgd_step(x, y, ETA, Leapfrog(2, fused=True, one_pass=True))
        assert all(np.array_equal(a, b) for a, b in zip(before, net.weights))


STEPS = {"fused": (Leapfrog(2, fused=True), False), "graph": (Leapfrog(2), True),
         "fused+graph": (Leapfrog(2, fused=True), True), "sequential-fused+graph": (Sequential(fused=True), True)}
"""A schedule and graph mode, by name: a fused update, a step as a graph, and both."""


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("bucket_bytes", [0, 600, 10**9])
@pytest.mark.parametrize("rank", [0, 1])
def test_fused_and_graph_steps_against_the_reference(steps, bucket_bytes, rank):
    """Rank 1 takes no column of the batch of 1 (its share adds zeros) and fewer of the odd ones; every step,
    a graph's launches too, sums each bucket once."""
    schedule, graph = STEPS[steps]
    comm = Mirror(rank=rank, bucket_bytes=bucket_bytes)
    data = [batch(SIZES, count, seed=count) for count in (6, 7, 1, 2, 5, 7, 1)]
    with MLP(SIZES, dtype="float64", seed=3, backend="numpy", comm=comm) as net:
        want = reference_steps(net.weights, net.biases, data, rank=rank)
        for x, y in data:
            net.sgd_step(x, y, ETA, schedule, graph=graph)
        assert relative_error(net.weights + net.biases, want) < 1e-12
    buckets = len(data_parallel.buckets(mlp_layout(SIZES), 8, bucket_bytes))
    assert len(comm.sums) == len(data) * buckets


@pytest.mark.parametrize("rank", [0, 1])
def test_fused_and_graph_steps_are_the_eager_ones_to_the_bit(network_name, rank):
    """Adam on every network, rank 1 with an empty share now and then: an update behind its sum on the
    communication stream, or replayed in a graph, is the eager update behind the join, bit for bit (the
    same kernels on the same sums). Adam moves the parameters even where the gradients are zero, so an
    empty share's missing update shows."""
    results = {}
    for steps in ("eager", *STEPS):
        schedule, graph = STEPS.get(steps, (Leapfrog(2), False))
        comm = Mirror(rank=rank, bucket_bytes=100)
        with network(network_name, "numpy", dtype="float64", comm=comm) as net:
            for count in (3, 1, 4, 1, 3):
                net.train_step(*network_batch(network_name, count, seed=count, dtype=np.float64), Adam(0.01),
                               schedule, graph=graph)
            results[steps] = arrays(net.parameters())
    for steps, got in results.items():
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, results["eager"])), steps


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=schedule_id)
def test_check_finite_checks_the_sums_not_an_empty_shares_deltas(network_name, schedule):
    """``check_finite`` checks the gradients summed across ranks: rank 1 of a batch of one has no sample, and
    finite sums (zeros) to check, whatever its unwritten deltas hold (the RNN's checked them: NaN, as they are
    made, so that rank alone refused the step). Zero gradients under weight decay: w - lr * (wd * w)."""
    lr, wd = 0.1, 0.5
    with network(network_name, "numpy", dtype="float64", comm=Mirror(rank=1), check_finite=True) as net:
        before = arrays(net.parameters())
        net.train_step(*network_batch(network_name, 1, seed=1, dtype=np.float64), SGD(lr, weight_decay=wd),
                       schedule)
        net.synchronize()
        after = arrays(net.parameters())
    for got, w in zip(after, before):
        np.testing.assert_array_equal(got, w - lr * (wd * w))


@pytest.mark.parametrize("bucket_bytes,order", [
    (0, ["allreduce[6]", "update[6]", "allreduce[5]", "update[5]", "allreduce[4]", "update[4]", "allreduce[3]",
         "update[3]", "allreduce[2]", "update[2]"]),
    (1600, ["allreduce[6..4]", "update[6]", "update[5]", "update[4]", "allreduce[3]", "update[3]", "allreduce[2]",
            "update[2]"]),
    (10**9, ["allreduce[6..2]", "update[6]", "update[5]", "update[4]", "update[3]", "update[2]"]),
])
def test_a_fused_step_updates_each_layer_behind_its_buckets_sum_on_the_communication_stream(bucket_bytes, order):
    """The communication stream alone calls the engine, the buckets in the layout's order; each layer's update
    follows its bucket's sum there, and nothing updates on the main stream or a worker."""
    with NumpyBackend(mode="serial", trace=True) as backend:
        with MLP(SIZES, dtype="float64", backend=backend, comm=Mirror(bucket_bytes=bucket_bytes)) as net:
            net.sgd_step(*batch(SIZES, 4), ETA, Leapfrog(2))  # the plans and streams made
            backend.trace.clear()
            net.sgd_step(*batch(SIZES, 4), ETA, Leapfrog(2, fused=True))
    started = [(stream, name) for stream, what, name in backend.trace if what == "start"]
    assert [name for stream, name in started if stream == "comm" and not name.startswith("wait")] == order
    assert not [name for stream, name in started if stream != "comm" and name.startswith(("update", "fused"))]


def test_every_rank_captures_its_graphs_at_the_same_steps(monkeypatch):
    """A graph is kept by the whole batch's size: batches of 4 and 3 give rank 0 the same share (2) and rank 1
    two (2 and 1), and a batch of 1 gives rank 1 none. Kept by the plan alone, rank 0 would launch at step 1
    what rank 1 captures there; NCCL wants every rank to capture a collective at the same step. So it is with
    Leapfrog("auto"), whose first graph step at each B runs eagerly on every rank: rank 0 has calibrated a share of 2
    at the batch of 4 when the batch of 3 comes, and rank 1 calibrates nothing with an empty share."""
    captured = []
    capture = NumpyBackend.capture

    def counted(backend, body):
        captured[-1].append(step)
        return capture(backend, body)

    monkeypatch.setattr(NumpyBackend, "capture", counted)
    for schedule, want in ((Leapfrog(2), [0, 1, 4]), (Leapfrog("auto"), [2, 3, 5])):
        captured.clear()
        for rank in (0, 1):
            captured.append([])
            with MLP(SIZES, backend="numpy", comm=Mirror(rank=rank)) as net:
                for step, count in enumerate((4, 3, 4, 3, 1, 1)):
                    net.sgd_step(*batch(SIZES, count), ETA, schedule, graph=True)
        assert captured == [want, want], schedule


def test_ranks_keep_every_plan_and_capture_at_the_same_steps_past_the_plans_a_network_keeps(monkeypatch):
    """Batches of 3 and 4, then of 6 to 18 and 3 again: rank 1 meets nine shares (1 to 9), rank 0 eight. Each rank kept
    the plans it used last, by its own shares, and rank 1 let go its share of 3's plan, with its graph, which rank 0
    kept: at the last step it captured again, where rank 0 launched. Data-parallel, every plan is kept."""
    captured, capture = [], NumpyBackend.capture

    def counted(backend, body):
        captured[-1].append(step)
        return capture(backend, body)

    monkeypatch.setattr(NumpyBackend, "capture", counted)
    counts = [3, 4, *range(6, 19, 2), 3]
    for rank in (0, 1):
        captured.append([])
        with MLP(SIZES, backend="numpy", comm=Mirror(rank=rank)) as net:
            for step, count in enumerate(counts):
                net.sgd_step(*batch(SIZES, count), ETA, Leapfrog(2), graph=True)
            assert len(net._plans) == (8 if rank == 0 else 9)
    assert captured == [list(range(len(counts) - 1))] * 2  # the last B = 3 launches its graph on every rank


def test_a_calibration_sums_nothing():
    """Leapfrog('auto') times backward passes on one rank only: they must not call a collective."""
    comm = Mirror()
    with MLP(SIZES, backend="numpy", comm=comm) as net:
        x, y = batch(SIZES, 4)
        net.sgd_step(x, y, ETA, Leapfrog("auto"))
        net.synchronize()
    assert len(comm.sums) == len(SIZES) - 1  # one pass, one sum per layer


def test_sums_leave_in_the_layouts_order_whatever_order_the_gradients_come_in(monkeypatch):
    """Collectives must leave in the same order on every rank: a schedule that hands layer 2 over first
    (``LevelSets`` hands a DAG's nodes over by height) still has them summed L first, each once the
    layers before it in that order are in."""
    def chain(plan, schedule, controls=None):
        for l in plan.layer_numbers:  # layer 2 first
            plan.error(l)
            yield l

    monkeypatch.setattr(MLPPlan, "chain", chain)
    with NumpyBackend(mode="serial", trace=True) as backend, MLP(SIZES, backend=backend, comm=Mirror()) as net:
        backend.trace.clear()
        net.backprop(*batch(SIZES, 2))
        sums = [name for stream, what, name in backend.trace if name.startswith("allreduce") and what == "start"]
        assert sums == [f"allreduce[{l}]" for l in range(len(SIZES), 1, -1)]


def test_gradients_handed_over_twice_or_not_at_all_are_refused(monkeypatch):
    for layers, message in ((lambda L: range(L, 2, -1), r"did not hand over the gradients of 2; every rank must sum"),
                            (lambda L: [L, L], "handed over the gradients of 6 twice")):
        def chain(plan, schedule, controls=None, layers=layers):
            yield from layers(plan.L)

        monkeypatch.setattr(MLPPlan, "chain", chain)
        with MLP(SIZES, backend="numpy", comm=Mirror()) as net, pytest.raises(RuntimeError, match=message):
            net.backprop(*batch(SIZES, 2))


# -- the waits of the communication stream, each removed ------------------------------------------------


def deferred_run(order, schedule, seed=0):
    """Whether three steps enqueued back to back on two mirrored ranks give the reference's parameters.

    The workers are made before the communication stream, which then comes last among the streams that
    are not the main one: "main-first" runs it as late as the events allow, "workers-first" as early."""
    with NumpyBackend(mode="deferred", order=order, seed=seed) as backend:
        backend.workers(2)
        net = MLP(SIZES, seed=2, dtype="float64", backend=backend, comm=Mirror(bucket_bytes=600))
        steps = [batch(SIZES, 4, seed=step) for step in range(3)]
        want = reference_steps(net.weights, net.biases, steps)
        for x, y in steps:
            net.sgd_step(x, y, ETA, schedule)
        return relative_error(net.weights + net.biases, want) < 1e-12


@pytest.mark.parametrize("order,seed", [("main-first", 0), ("workers-first", 0)] + [("random", s) for s in range(4)])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True)], ids=schedule_id)
def test_every_interleaving_with_all_waits_is_right(order, seed, schedule):
    assert deferred_run(order, schedule, seed)


def test_chaos_with_all_waits_is_right():
    for seed in range(3):
        with NumpyBackend(chaos=seed) as backend:
            net = MLP(SIZES, seed=2, dtype="float64", backend=backend, comm=Mirror(bucket_bytes=600))
            steps = [batch(SIZES, 5, seed=step) for step in range(4)]
            want = reference_steps(net.weights, net.biases, steps)
            for x, y in steps:
                net.sgd_step(x, y, ETA, Leapfrog(3))
            assert relative_error(net.weights + net.biases, want) < 1e-12


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=schedule_id)
def test_a_sum_that_does_not_wait_for_its_gradients_is_caught(monkeypatch, schedule):
    """Without 'the communication stream waits G_l', it sums the buffer before (6)(7) write it."""
    monkeypatch.setattr(Reducer, "wait_for_gradients", lambda self, unit: None)
    assert not deferred_run("workers-first", schedule)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True)], ids=schedule_id)
def test_an_update_that_does_not_wait_for_the_sums_is_caught(monkeypatch, schedule):
    """Without 'the main stream waits R', the update reads gradients not yet summed (fused: the next step's
    forward pass reads parameters not yet updated)."""
    monkeypatch.setattr(Reducer, "join", lambda self: None)
    assert not deferred_run("main-first", schedule)


def test_a_fused_update_that_does_not_wait_for_the_last_read_of_its_parameters_is_caught(monkeypatch):
    """The update of w^l follows its sum on the communication stream, which waits for G_l; G_l follows (6)(7),
    handed off behind the last reader of w^l (delta^{l-1}). Handed off behind E_l instead, the update
    overwrites w^l before (5) reads it."""
    assert deferred_run("workers-first", Leapfrog(2, fused=True))
    monkeypatch.setattr(MLPPlan, "last_reader", lambda self, l: l)
    assert not deferred_run("workers-first", Leapfrog(2, fused=True))


def bucketed_run(bucket_bytes):
    """Whether three steps of Leapfrog(2) on two mirrored ranks, enqueued back to back in the deferred
    order "main-first", give the reference's parameters, with buckets of several layers.

    The communication stream is made between worker 0 and worker 1: once the main stream has enqueued
    the whole pass, worker 0 (layers 6, 4, 2) runs, then the communication stream as far as its waits
    allow, then worker 1 (layers 5, 3). A bucket whose sum waits only for some of its layers is then
    summed before worker 1 has written the others."""
    with NumpyBackend(mode="deferred", order="main-first") as backend:
        backend.workers(1)
        backend.comm_stream()
        backend.workers(2)
        net = MLP(SIZES, seed=2, dtype="float64", backend=backend, comm=Mirror(bucket_bytes=bucket_bytes))
        steps = [batch(SIZES, 4, seed=step) for step in range(3)]
        want = reference_steps(net.weights, net.biases, steps)
        for x, y in steps:
            net.sgd_step(x, y, ETA, Leapfrog(2))
        return relative_error(net.weights + net.biases, want) < 1e-12


@pytest.mark.parametrize("bucket_bytes,groups", [(1600, [[6, 5, 4], [3], [2]]), (10**9, [[6, 5, 4, 3, 2]])])
def test_a_bucket_of_several_layers_waits_for_each_of_them(monkeypatch, bucket_bytes, groups):
    """Every layer's G_l is waited for, not only that of the bucket's last layer (the one whose hand-over
    launches the sum)."""
    assert data_parallel.buckets(mlp_layout(SIZES), 8, bucket_bytes) == groups
    assert bucketed_run(bucket_bytes)
    wait = Reducer.wait_for_gradients

    def last_of_bucket_only(self, unit):
        if unit in self.buckets:
            wait(self, unit)

    monkeypatch.setattr(Reducer, "wait_for_gradients", last_of_bucket_only)
    assert not bucketed_run(bucket_bytes)


# -- the watchdog and the agreements ------------------------------------------------------------------


def test_the_watchdog_gives_up_on_a_call_that_outlasts_its_deadline():
    expired = []
    watchdog = parallel._Watchdog(0.2, expired.append)
    with watchdog.watch("a quick sum"):
        pass
    with watchdog.watch("a sum nobody answers"):
        time.sleep(1.0)
    assert expired == ["a sum nobody answers"]


def test_a_watchdog_that_cannot_start_its_thread_lets_the_call_run_unwatched(monkeypatch):
    """Python 3.12.0 and 3.12.1 start no thread at exit, where the ranks' last sums are watched: the call raised,
    its deadline stayed behind, and a thread never started stood for the watchdog's, so that no later call was
    watched."""
    watchdog = parallel._Watchdog(0.2, pytest.fail)

    def refused(thread):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refused)
        with watchdog.watch("a sum at exit"):
            ran = True
    assert ran and watchdog._thread is None and not watchdog._open
    with watchdog.watch("a later sum"):
        assert watchdog._thread.is_alive()


def test_the_watchdogs_thread_ends_once_no_call_is_watched_and_the_next_call_starts_another():
    """It ran for ever, one thread per communicator, every ``world()`` of a program that made several."""
    expired = []
    watchdog = parallel._Watchdog(0.2, expired.append)
    for call in ("a first sum", "a second sum"):
        with watchdog.watch(call):
            thread = watchdog._thread
            assert thread.is_alive()
        thread.join(timeout=60)  # a guard against a thread that never ends
        assert not thread.is_alive() and watchdog._thread is None
    with watchdog.watch("a sum nobody answers"):
        time.sleep(1.0)
    assert expired == ["a sum nobody answers"]


INTERRUPTED_COLLECTIVE = """
import signal, sys, time
from pathlib import Path
from leapfrog_gpu.parallel import comm as parallel
comm, said, joined, call = parallel.world(), Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
value = {"sum": [1.0], "allgather": "a value", "bcast": "a value"}[call]
waiting = 1 if call == "bcast" else 0  # rank 0 sends its broadcast without waiting
if comm.rank == waiting:
    signal.signal(signal.SIGALRM, signal.default_int_handler)  # Ctrl-C, half a second into the call
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        getattr(comm, call)(value)
    except KeyboardInterrupt:
        said.write_text("after the other rank joined" if joined.exists() else "before the other rank joined")
    comm.abort(130, quiet=True)
deadline = time.monotonic() + 60
while not said.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
joined.touch()
getattr(comm, call)(value)  # releases a rank that Ctrl-C could not stop in the call
time.sleep(60)
"""
"""A rank interrupted in a collective of the program's thread (``sys.argv[3]``) that the other rank joins only once
the first has said so (or after 60 s)."""


@pytest.mark.parametrize("call", ["sum", "allgather", "bcast"])
def test_ctrl_c_stops_a_rank_waiting_in_a_collective_for_the_others(tmp_path, call):
    """Ctrl-C reaches a rank that waits for the others in the sum of a metric (``evaluate``'s), a gather (the ranks'
    comparisons) or a broadcast at once: under mpiexec every rank gets it, and one that raised it at once would end
    the job while another, in a blocking collective, could not."""
    script, said = tmp_path / "collective.py", tmp_path / "said"
    script.write_text(INTERRUPTED_COLLECTIVE)
    job = mpirun.launch(2, sys.executable, script, said, tmp_path / "joined", call)
    returncode, _, err = mpirun.finish(job, timeout=120)
    assert returncode == 130, err
    assert said.read_text() == "before the other rank joined"


LAST_STEP_NOT_WAITED_FOR = """
import sys, time
import numpy as np
from leapfrog_gpu import MLP, parallel
comm = parallel.world(timeout=600)  # a rank left waiting fails the test by its guard, not by the watchdog
net = MLP([16, 64, 4], backend="numpy", comm=comm)
x, y = np.ones((16, 8)), np.zeros((4, 8))
net.sgd_step(x, y, 0.1)
net.synchronize()
if comm.rank == 1:
    time.sleep(0.5)  # rank 0's sums of the next step wait for this rank while rank 0's program ends
net.sgd_step(x, y, 0.1)  # rank 0 ends with this step queued, as docs/data-parallel.md's example does
if comm.rank == 1:
    net.synchronize()
    open(sys.argv[1], "w").write(str(float(net.weights[0].sum())))
"""


@mpirun.needs_mpi
def test_a_program_that_ends_with_its_last_step_queued_ends_once_its_sums_are_done(tmp_path):
    """The last step of a script, not waited for: its sums run before MPI is finalized (the communication stream,
    inside MPI_Allreduce at exit, crashed the process or left the other rank waiting)."""
    script, said = tmp_path / "last_step.py", tmp_path / "said"
    script.write_text(LAST_STEP_NOT_WAITED_FOR)
    mpirun.run(2, sys.executable, script, said, timeout=120)
    assert np.isfinite(float(said.read_text()))


ENDED_BY_AN_EXCEPTION_A_STEP_APART = """
import numpy as np
from leapfrog_gpu import MLP, parallel
comm = parallel.world(timeout=float("inf"))  # no watchdog to end a wait
net = MLP([16, 64, 4], backend="numpy", comm=comm)
x, y = np.ones((16, 8)), np.zeros((4, 8))
net.sgd_step(x, y, 0.1)
net.synchronize()
if comm.rank == 0:
    net.sgd_step(x, y, 0.1)  # sums the other rank never joins
raise KeyboardInterrupt
"""


@mpirun.needs_mpi
def test_a_program_an_exception_ends_with_sums_no_other_rank_joins_ends_the_job(tmp_path):
    """Rank 0's queued sums wait for rank 1, which an exception ends: rank 0 gives them a few seconds at exit
    (``DRAIN_SECONDS``), then ends the job, rather than wait for ever or crash inside MPI."""
    script = tmp_path / "apart.py"
    script.write_text(ENDED_BY_AN_EXCEPTION_A_STEP_APART)
    returncode, _, err = mpirun.finish(mpirun.launch(2, sys.executable, script), timeout=60)
    # each rank's traceback names it twice, its line and its end (the ranks' lines may interleave)
    assert returncode != 0 and err.count("KeyboardInterrupt") == 4 and "Segmentation" not in err, err


ENDED_BY_AN_EXCEPTION_ALONE = """
import numpy as np
from leapfrog_gpu import MLP, parallel
comm = parallel.world(timeout=600)  # a rank left waiting fails the test by its guard, not by the watchdog
net = MLP([16, 64, 4], backend="numpy", comm=comm)
x, y = np.ones((16, 8)), np.zeros((4, 8))
net.sgd_step(x, y, 0.1)
net.synchronize()  # nothing queued on either rank
if comm.rank == 1:
    raise RuntimeError("rank 1 fails between two steps")
net.sgd_step(x, y, 0.1)  # sums rank 1 never joins
net.synchronize()
"""


@mpirun.needs_mpi
def test_a_rank_an_exception_ends_with_no_sum_queued_ends_the_job(tmp_path):
    """Rank 1 ended with nothing queued: it finalized MPI and left, and rank 0 waited in its next step's sums until
    the communicator's timeout (120 s by default). It now ends the job as it ends."""
    script = tmp_path / "alone.py"
    script.write_text(ENDED_BY_AN_EXCEPTION_ALONE)
    returncode, _, err = mpirun.finish(mpirun.launch(2, sys.executable, script), timeout=60)
    assert returncode != 0 and "\nRuntimeError: rank 1 fails between two steps\n" in err, err
    assert "has waited" not in err and "Segmentation" not in err, err


ENDED_BY_AN_EXCEPTION_ON_EVERY_RANK = """
import atexit, sys
from leapfrog_gpu import parallel
logs = []
atexit.register(lambda: logs[0].write("the program's own exit handler ran\\n"))  # runs after the communicator's
comm = parallel.world(timeout=600)  # a rank left waiting fails the test by its guard, not by the watchdog
logs.append(open(f"{sys.argv[1]}/log{comm.rank}.txt", "w"))  # buffered: written as Python ends
logs[0].write(f"rank {comm.rank} of {comm.size}\\n")
raise RuntimeError("every rank fails alike")
"""


@mpirun.needs_mpi
def test_a_program_an_exception_ends_on_every_rank_ends_each_rank_as_python_does(tmp_path):
    """The ranks meet at exit: none is left waiting, so none ends the job, and each ends as Python ends a program
    (its files flushed, the program's exit handlers run). A rank that aborted the job at once lost both."""
    script = tmp_path / "every.py"
    script.write_text(ENDED_BY_AN_EXCEPTION_ON_EVERY_RANK)
    returncode, _, err = mpirun.finish(mpirun.launch(2, sys.executable, script, tmp_path), timeout=60)
    assert returncode != 0 and "every rank fails alike" in err, err  # the ranks' lines may interleave
    for rank in range(2):
        assert (tmp_path / f"log{rank}.txt").read_text() == (f"rank {rank} of 2\n"
                                                              "the program's own exit handler ran\n")


FIT_ON_RANKS = """
import json, sys
import numpy as np
from leapfrog_gpu import MLP, SGD, parallel
comm = parallel.world(timeout=600)  # a rank left waiting fails the test by its guard, not by the watchdog
rng = np.random.default_rng(0)
x, y = rng.standard_normal((5, 8)), rng.integers(0, 3, 8)
said = {}
with MLP([5, 7, 3], backend="numpy", dtype="float64", seed=3, comm=comm) as net:
    said["start"] = [[w.tolist() for w in net.weights], [b.tolist() for b in net.biases]]
    net.fit(x, y, 1, 8, SGD(0.5), seed=None, progress=False)  # one batch of every sample, in any order
    said["weights"] = net.weights[0].tolist()
    wrong = y.copy()
    wrong[3] = 7 if comm.rank == 1 else wrong[3]  # a label beyond the classes, on rank 1 alone
    other = x + (comm.rank == 1)  # other data on rank 1
    for name, call in [("fit label", lambda: net.fit(x, wrong, 1, 4, 0.1, progress=False)),
                       ("evaluate label", lambda: net.evaluate(x, wrong)),
                       ("fit data", lambda: net.fit(other, y, 1, 4, 0.1, progress=False)),
                       ("evaluate data", lambda: net.evaluate(other, y)),
                       ("fit seed", lambda: net.fit(x, y, 1, 4, 0.1, seed=comm.rank or None, progress=False))]:
        try:
            call()
            said[name] = "accepted"
        except ValueError as error:
            said[name] = str(error)
open(sys.argv[1] + f"/rank{comm.rank}.json", "w").write(json.dumps(said))
"""
"""``fit`` and ``evaluate`` of a data-parallel MLP: ``fit(seed=None)``'s weights after one batch of all samples, and
what each call given other labels, data or seed on rank 1 alone raises on each rank."""


def test_fit_and_evaluate_refuse_on_every_rank_what_one_rank_was_given_and_share_a_fresh_seed(tmp_path):
    """Each rank takes its share of the same batches: ``fit(seed=None)`` draws them by rank 0's fresh entropy (each
    rank's own drew another permutation on each, whose shares counted some samples twice and others never), so one
    batch of every sample is the whole batch's step (float64 NumPy, here). A bad label on one rank is refused on every
    rank, naming it (that rank raised alone, and the others waited in the run's collectives until the watchdog ended
    the job), and so are other data or another seed on one rank (which trained on a mix of batches)."""
    script = tmp_path / "fit.py"
    script.write_text(FIT_ON_RANKS)
    mpirun.run(2, sys.executable, script, tmp_path, timeout=120)
    said = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    rng = np.random.default_rng(0)
    x, labels = rng.standard_normal((5, 8)), rng.integers(0, 3, 8)
    y = np.eye(3)[:, labels]
    weights, biases = ([np.array(array) for array in arrays] for arrays in said[0]["start"])
    expected = weights[0] - 0.5 / 8 * reference.backprop(weights, biases, x, y)[1][0]  # sigmoid, quadratic: MLP's
    for rank in range(2):
        np.testing.assert_allclose(said[rank]["weights"], expected, rtol=1e-12, atol=1e-14)
        assert said[rank]["fit label"] == said[rank]["evaluate label"]
        assert said[rank]["fit label"].startswith("rank 1: y holds class label 7 at index 3; labels must lie in 0..2")
        for call in ("fit", "evaluate"):
            assert said[rank][f"{call} data"].startswith(f"every rank must use the same data and arguments of {call}")
            assert " x: " in said[rank][f"{call} data"] and "on rank 1" in said[rank][f"{call} data"]
        assert said[rank]["fit seed"].endswith("differ in seed: 1 on rank 1, None on rank 0")


def test_an_error_on_some_ranks_is_raised_on_every_rank_with_its_rank():
    class Gather(Mirror):
        def __init__(self, others):
            super().__init__()
            self.others = others

        def allgather(self, value):
            return [value, *self.others]

    with pytest.raises(KeyError, match="rank 1: no such file") as raised:
        with Gather([(KeyError, "no such file")]).together(KeyError):
            pass
    assert raised.value.every_rank
    with pytest.raises(ValueError, match="^bad option$"):  # every rank failed alike: no rank named
        with Gather([(ValueError, "bad option")]).together(ValueError):
            raise ValueError("bad option")


def test_an_error_raised_on_every_rank_holds_no_frame_once_dropped():
    """The error ``together`` raises alone holds its traceback, and with it the frames it went through (a network's,
    its threads): caught and dropped, they go with no collection (``together``'s frame named it, a cycle)."""

    class Gather(Mirror):
        def allgather(self, value):
            return [value, (KeyError, "no such file")]

    class Held:  # what a caller's frame holds
        pass

    def caller(held):
        with Gather().together(KeyError):
            pass

    held = Held()
    gone = weakref.ref(held)
    gc.disable()
    try:
        try:
            caller(held)
        except KeyError as error:
            raised = str(error)
        del held
        assert raised == "'rank 1: no such file'" and gone() is None
    finally:
        gc.enable()


# -- under mpiexec ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[2, 3], ids=lambda p: f"P={p}")
def ranks_run(request, tmp_path_factory):
    """Every case of ``mpi_cases`` trained by P ranks: ``(P, [results of each rank], [what each was told])``."""
    if mpirun.MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec: pip install -e '.[mpi]'")
    ranks = request.param
    out = tmp_path_factory.mktemp(f"ranks{ranks}")
    mpirun.run(ranks, sys.executable, "tests/harness/mpi_cases.py", out, timeout=120)
    results = [dict(np.load(out / f"rank{r}.npz")) for r in range(ranks)]
    told = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
    return ranks, results, told


@mpirun.needs_mpi
def test_every_rank_holds_the_same_bits(ranks_run):
    ranks, results, _ = ranks_run
    assert {key.rpartition("/")[0] for key in results[0]} == set(mpi_cases.cases(ranks))
    for name, case in mpi_cases.cases(ranks).items():  # w and b of every layer (or Dense node), u of the RNN's
        layers = len(case["sizes"]) - 1
        count = {"mlp": 2 * layers, "dag": 2 * layers, "rnn": 3 * layers - 1}[case.get("network", "mlp")]
        assert {key for key in results[0] if key.rpartition("/")[0] == name} == {f"{name}/{i}" for i in range(count)}
    for key, first in results[0].items():
        for rank in range(1, ranks):
            assert results[rank][key].tobytes() == first.tobytes(), f"rank {rank} differs from rank 0 in {key}"


@mpirun.needs_mpi
def test_ranks_compute_what_one_process_computes_on_the_whole_batches(ranks_run):
    """One process with batch B·P and rank 0's seed; the ranks started from other seeds, so this also shows
    that rank 0's parameters were broadcast."""
    ranks, results, _ = ranks_run
    for name, case in mpi_cases.cases(ranks).items():
        want = mpi_cases.train(case)
        got = [results[0][f"{name}/{i}"] for i in range(len(want))]
        error = relative_error(got, want)
        assert error < TOLERANCE[case["dtype"]], f"{name}: relative error {error:.2e}"


@mpirun.needs_mpi
def test_ranks_against_the_reference(ranks_run):
    """Independently of the network: the plain reference on the whole batches, in float64."""
    ranks, results, _ = ranks_run
    case = mpi_cases.cases(ranks)["float64/leapfrog2/uneven"]
    with MLP(case["sizes"], activation="tanh", dtype="float64", seed=5, backend="numpy") as net:
        weights, biases = [w.copy() for w in net.weights], [b.copy() for b in net.biases]
    for x, y in mpi_cases.data(case["sizes"], case["batches"], "float64"):
        nabla_b, nabla_w = reference.backprop(weights, biases, x, y, "tanh", "quadratic", "tanh")
        weights = [w - mpi_cases.ETA / x.shape[1] * g for w, g in zip(weights, nabla_w)]
        biases = [b - mpi_cases.ETA / x.shape[1] * g for b, g in zip(biases, nabla_b)]
    got = [results[0][f"float64/leapfrog2/uneven/{i}"] for i in range(2 * len(weights))]
    assert relative_error(got, [array for w, b in zip(weights, biases) for array in (w, b)]) < 1e-12


@mpirun.needs_mpi
def test_recurrent_ranks_against_the_reference(ranks_run):
    """The RNN's sums across ranks against the plain float64 BPTT on the whole batches."""
    ranks, results, _ = ranks_run
    case = mpi_cases.cases(ranks)["rnn/float64/leapfrog2/uneven"]
    with RNN(case["sizes"], output="every", dtype="float64", seed=5, backend="numpy") as net:
        weights, recurrent, biases = net.weights, net.recurrent, net.biases
    for x, y in mpi_cases.data(case["sizes"], case["batches"], "float64", "rnn"):
        nabla_b, nabla_w, nabla_u = reference_rnn.backprop(weights, recurrent, biases, x, y, "tanh", "quadratic",
                                                           "tanh", "every")
        step = mpi_cases.ETA / x.shape[2]
        weights = [w - step * g for w, g in zip(weights, nabla_w)]
        recurrent = [u - step * g for u, g in zip(recurrent, nabla_u)]
        biases = [b - step * g for b, g in zip(biases, nabla_b)]
    want = [array for l in range(len(weights)) for array in
            ((weights[l], recurrent[l], biases[l]) if l < len(recurrent) else (weights[l], biases[l]))]
    got = [results[0][f"rnn/float64/leapfrog2/uneven/{i}"] for i in range(len(want))]
    assert relative_error(got, want) < 1e-12


@mpirun.needs_mpi
def test_a_rank_that_builds_another_network_is_refused_on_every_rank(ranks_run):
    ranks, _, told = ranks_run
    for rank in range(ranks):
        assert told[rank]["other network"].startswith(
            "every rank must use the same network, but they differ in sizes: [7, 13, 5, 11, 4] on rank 1")


# -- NCCL: the CuPy backend's path ----------------------------------------------------------------------


class Gpus(Mirror):
    """Rank 0 of ``size`` GPUs summing through NCCL: on a GPU one rank (the sum is the buffer itself); on
    the CuPy stand-in, whose NCCL makes the other ranks hold the same buffers, two mirrored ranks."""

    def __init__(self, size):
        super().__init__()
        self.size = size

    @property
    def reduces(self):
        return True

    def allgather(self, value):
        return [value] * self.size

    def engine(self, backend):
        if not hasattr(self, "nccl"):
            self.nccl = collective.NcclSum(backend.xp, self.size, 0, collective.nccl_unique_id())
        return self.nccl


def nccl_run(backend, schedule, ranks, steps=3, size=4, graph=False):
    """Whether SGD steps (as graphs, with ``graph``) of a network summing through NCCL over ``ranks`` give the
    reference's parameters (its share's gradients times ``ranks``, the update divided by the whole batch)."""
    with MLP(SIZES, seed=3, dtype="float64", backend=backend, comm=Gpus(ranks)) as net:
        data = [batch(SIZES, size, seed=step) for step in range(steps)]
        want = reference_steps(to_numpy_all(net.weights), to_numpy_all(net.biases), data, ranks=ranks)
        for x, y in data:
            net.sgd_step(x, y, ETA, schedule, graph=graph)
        return relative_error(to_numpy_all(net.weights + net.biases), want) < 1e-12


def to_numpy_all(arrays):
    return [to_numpy(a) for a in arrays]


def cupy_backend(fake, workers_first=True):
    """The CuPy backend on the stand-in; its workers made before the communication stream, which is then
    the newest stream: "main-first" runs it as late as the events allow, "workers-first" as early."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    backend = CupyBackend()
    if workers_first:
        backend.workers(2)
    return backend


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=schedule_id)
def test_nccl_on_the_standin_against_the_reference(standin, schedule):
    with cupy_backend(standin) as backend:
        assert nccl_run(backend, schedule, ranks=2)
        comm, others = backend.comm_stream(), {backend.main.ptr, *(w.ptr for w in backend.workers(2))}
    sums = [entry for entry in standin.trace() if entry[2] == "ncclAllReduce"]
    assert len(sums) == 3 * (len(SIZES) - 1) and {stream for _, stream, _ in sums} == {comm.ptr}
    assert comm.is_non_blocking and comm.ptr not in others


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("schedule", [Leapfrog(2), Leapfrog(2, fused=True)], ids=schedule_id)
def test_nccl_fused_and_in_a_graph_on_the_standin(standin, schedule, graph):
    """A fused update follows its sum on the communication stream; a graph holds the NCCL calls (the stand-in
    records them in the capture, and each launch sums again: three steps, two of them launches)."""
    with cupy_backend(standin) as backend:
        assert nccl_run(backend, schedule, ranks=2, graph=graph)
        comm = backend.comm_stream()
    sums = [entry for entry in standin.trace() if entry[2] == "ncclAllReduce"]
    assert len(sums) == (2 if graph else 3) * (len(SIZES) - 1) and {stream for _, stream, _ in sums} == {comm.ptr}


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=schedule_id)
def test_nccl_sums_that_do_not_wait_for_their_gradients_are_caught(monkeypatch, schedule):
    monkeypatch.setattr(Reducer, "wait_for_gradients", lambda self, unit: None)
    with cupy_backend(install_standin(monkeypatch, "workers-first")) as backend:
        assert not nccl_run(backend, schedule, ranks=2)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=schedule_id)
def test_an_update_that_does_not_wait_for_nccl_is_caught(monkeypatch, schedule):
    monkeypatch.setattr(Reducer, "join", lambda self: None)
    with cupy_backend(install_standin(monkeypatch, "main-first")) as backend:
        assert not nccl_run(backend, schedule, ranks=2)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("size", [1, 64], ids=batch_id)
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True)], ids=schedule_id)
def test_nccl_one_rank_on_the_gpu(schedule, size, graph):
    """NCCL with one rank: the sum is the buffer itself, and the update divides by the whole batch; with
    ``graph``, ncclAllReduce captured in the CUDA graph and launched by it."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend:
        assert nccl_run(backend, schedule, ranks=1, steps=5, size=size, graph=graph)
