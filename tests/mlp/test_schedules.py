"""Leapfrog against Sequential: bitwise equality, the order of events, and races made visible."""

import numpy as np
import pytest

from helpers import assert_same, batch, batch_id, case_id, case_ids, gpu, layer_names, same
from leapfrog_gpu import MLP, Adam, Leapfrog, Sequential
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import plan
from leapfrog_gpu.core.handoff import Handoff
from leapfrog_gpu.mlp import plan as mlp_plan
from leapfrog_gpu.mlp.plan import MLPPlan

STEPS = 50
ETA = 0.5


def widths(L, seed):
    """L odd-ish widths in 1..17, different for every L."""
    return [int(n) for n in np.random.default_rng(seed).integers(1, 18, size=L)]


def cases():
    for L in (2, 3, 5, 9):
        for k in sorted({1, 2, 3, 4, L - 1, L + 2} - {0}):
            for size in (1, 7):
                yield L, k, size


CASES = list(cases())
FUSED_CASES = [(L, k, size) for L, k, size in CASES if k <= 4]


def train_pair(sizes, schedule, backend, size, dtype="float32", steps=STEPS):
    """Train two identical networks, one Sequential and one under ``schedule``; compare every step.

    The plain schedule is the reference even when ``schedule`` fuses the update into (7). A failure
    names the step and the array: ``step 3: nabla_w[5] differs from the reference: ...``.
    """
    gradients, parameters = layer_names(len(sizes), "nabla_b", "nabla_w"), layer_names(len(sizes), "w", "b")
    sequential = MLP(sizes, dtype=dtype, seed=11, backend=backend)
    leapfrog = MLP(sizes, dtype=dtype, seed=11, backend=backend)
    for step in range(steps):
        x, y = batch(sizes, size, seed=step, dtype=dtype)
        want_b, want_w = sequential.backprop(x, y, Sequential())
        got_b, got_w = leapfrog.backprop(x, y, schedule)
        assert_same(got_b + got_w, want_b + want_w, gradients, f"step {step}")
        sequential.sgd_step(x, y, ETA, Sequential())
        leapfrog.sgd_step(x, y, ETA, schedule)
    assert_same(leapfrog.weights + leapfrog.biases, sequential.weights + sequential.biases, parameters,
                f"after {steps} steps")


@pytest.mark.parametrize("L,k,size", CASES, ids=case_ids(CASES))
def test_leapfrog_is_bitwise_sequential_on_host_threads(L, k, size):
    with NumpyBackend(mode="threads") as backend:
        train_pair(widths(L, seed=L), Leapfrog(k), backend, size)


@pytest.mark.parametrize("L,k,size", FUSED_CASES, ids=case_ids(FUSED_CASES))
def test_fused_leapfrog_is_bitwise_sequential_on_host_threads(L, k, size):
    with NumpyBackend(mode="threads") as backend:
        train_pair(widths(L, seed=L + 1), Leapfrog(k, fused=True), backend, size, steps=20)


@pytest.mark.parametrize("size", [1, 7, 16], ids=batch_id)
def test_fused_update_of_layers_wider_than_the_scratch_is_bitwise(size):
    """Layers of more weights than the scratch block (``ops_numpy.SCRATCH``): at B = 1 through it in several row
    blocks, at B > 1 whole (OpenBLAS rounds a product of a block of rows otherwise than the whole one's rows, at
    [400, 300, 200, 10] and B = 16), still bitwise. One BLAS thread: at more, a leapfrog step's products run on
    fewer threads than the sequential step's, and may round otherwise."""
    with NumpyBackend(mode="threads", blas_threads=1) as backend:
        for sizes in ([300, 400, 2], [400, 300, 200, 10]):
            train_pair(sizes, Leapfrog(2, fused=True), backend, size, steps=3)
            train_pair(sizes, Sequential(fused=True), backend, size, steps=3)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 7, 64], ids=batch_id)
@pytest.mark.parametrize("k", [1, 2, 3, 8], ids=lambda k: case_id(k=k))
def test_leapfrog_is_bitwise_sequential_on_the_gpu(k, size):
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend:
        train_pair([33, 257, 31, 64, 129, 10], Leapfrog(k), backend, size)
        train_pair([33, 257, 31, 64, 129, 10], Leapfrog(k, fused=True), backend, size, steps=10)


def run_traced(L, k, schedule):
    sizes = widths(L, seed=4)
    with NumpyBackend(mode="threads", trace=True) as backend:
        net = MLP(sizes, seed=1, backend=backend)
        x, y = batch(sizes, 3)
        backend.trace.clear()
        net.sgd_step(x, y, ETA, schedule)
        net.synchronize()
        return list(backend.trace)


TRACED = [(6, 1), (6, 2), (6, 3), (4, 7)]  # L, k


@pytest.mark.parametrize("L,k", TRACED, ids=case_ids(TRACED))
def test_trace_of_a_leapfrog_step(L, k):
    trace = run_traced(L, k, Leapfrog(k))
    first_update = trace.index(("main", "start", "update[2]"))
    owning = sorted({l % k for l in range(2, L + 1)})  # the residues some layer has: worker j owns the j-th
    for l in range(2, L + 1):
        delta_ready = trace.index(("main", "record", f"E_{l}"))
        for name in (f"gradients[{l}]",):
            starts = [i for i, (stream, what, op) in enumerate(trace) if what == "start" and op == name]
            assert len(starts) == 1, f"{name} ran {len(starts)} times"
            stream = trace[starts[0]][0]
            assert stream == f"worker{owning.index(l % k)}", f"{name} ran on {stream}"
            assert starts[0] > delta_ready, f"{name} started before E_{l}"
    busy = range(len(owning))
    assert {name for stream, what, name in trace if what == "wait" and stream == "main"} == {f"F_{j}" for j in busy}
    for j in busy:
        last_end = max(i for i, (stream, what, _) in enumerate(trace) if stream == f"worker{j}" and what == "end")
        joined = trace.index(("main", "wait", f"F_{j}"))
        assert last_end < joined < first_update


def test_a_huge_k_creates_only_the_workers_it_uses():
    sizes = [5, 6, 7, 3]
    with NumpyBackend() as backend:
        net = MLP(sizes, dtype="float64", backend=backend)
        x, y = batch(sizes, 2)
        want = net.backprop(x, y, Sequential())
        got = net.backprop(x, y, Leapfrog(10**9))
        assert len(backend._workers) == len(sizes) - 1  # layers 2..L, a worker each (none idle)
    assert_same(got[0] + got[1], want[0] + want[1], layer_names(len(sizes), "nabla_b", "nabla_w"), "k = 10**9")


def test_trace_of_a_sequential_step():
    trace = run_traced(5, 0, Sequential())
    assert {stream for stream, _, _ in trace} == {"main"}
    ops = [op for _, what, op in trace if what == "start"]
    assert ops.index("gradients[5]") < ops.index("delta[4]") < ops.index("gradients[4]") < ops.index("update[2]")


# -- races: each wait of docs/design.md §2 removed, caught deterministically -----------------------------
#
# The deferred host backend runs nothing until synchronize(), then interleaves the streams in a fixed
# order that starves one side for as long as the events allow. Buffers start as NaN, so a read that
# overtakes its write shows; later steps would read the previous step's stale values instead.


def deferred_run(order, schedule, steps=3, seed=0):
    """Parameters after ``steps`` SGD steps enqueued back to back, then one more pass's gradients."""
    sizes = [9, 17, 5, 13, 7, 3]
    with NumpyBackend(mode="deferred", order=order, seed=seed) as backend:
        net = MLP(sizes, seed=2, backend=backend)
        for step in range(steps):
            x, y = batch(sizes, 4, seed=step, dtype=np.float32)
            net.sgd_step(x, y, ETA, schedule)
        nabla_b, nabla_w = net.backprop(x, y, schedule)
        return net.weights + net.biases + nabla_b + nabla_w


DEFERRED = layer_names(6, "w", "b", "nabla_b", "nabla_w")
"""The names of what ``deferred_run`` returns (its network has L = 6 layers)."""


@pytest.mark.parametrize("order,seed", [("main-first", 0), ("workers-first", 0)] + [("random", s) for s in range(5)])
def test_every_interleaving_with_all_waits_matches_sequential(order, seed):
    want = deferred_run("main-first", Sequential())
    assert_same(deferred_run(order, Leapfrog(3), seed=seed), want, DEFERRED, f"k3, {order} order, seed {seed}")
    assert_same(deferred_run(order, Leapfrog(3, fused=True), seed=seed), want, DEFERRED,
                f"k3-fused, {order} order, seed {seed}")


def test_missing_read_after_write_wait_is_caught(monkeypatch):
    """Without 'worker waits E_l', a worker that runs first reads delta^l before it is written."""
    want = deferred_run("main-first", Sequential())
    assert_same(deferred_run("workers-first", Leapfrog(2)), want, DEFERRED, "with every wait")
    monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
    assert not same(deferred_run("workers-first", Leapfrog(2)), want)


def test_fused_update_waiting_only_for_its_own_delta_is_caught(monkeypatch):
    """A fused worker must wait for delta^{l-1}, the main stream's last read of w^l, not just E_l."""
    want = deferred_run("main-first", Sequential())
    assert_same(deferred_run("workers-first", Leapfrog(2, fused=True)), want, DEFERRED, "with every wait")
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    assert not same(deferred_run("workers-first", Leapfrog(2, fused=True)), want)


def halved_run(order, schedule, steps=2):
    """The weights after ``steps`` Adam steps of an MLP whose w^2 is long enough to be updated in halves under one
    worker (``MLPPlan.halved``), enqueued back to back on host streams that run in ``order``."""
    sizes = [512, 512, 6]
    with NumpyBackend(mode="deferred", order=order) as backend:
        net = MLP(sizes, seed=2, backend=backend)
        for step in range(steps):
            net.train_step(*batch(sizes, 4, seed=step, dtype=np.float32), Adam(0.01), schedule)
        return net.weights


def test_an_update_in_halves_without_its_wait_is_caught(monkeypatch):
    """The main stream's top half of w^2's update must wait for G_2, the worker's nabla_w^2: a main stream that runs
    first without it updates by a gradient not yet written (NaN at the first step). The reference: the same steps,
    no layer halved."""
    with monkeypatch.context() as whole:
        whole.setattr(mlp_plan, "HALVED", 1 << 40)
        want = halved_run("workers-first", Leapfrog(1, fused=True))
    assert_same(halved_run("main-first", Leapfrog(1, fused=True)), want, ["w[2]", "w[3]"], "with every wait")
    monkeypatch.setattr(MLPPlan, "event", lambda self, name: self.backend.event(name) if name.startswith("G_")
                        else plan.Plan.event(self, name))
    assert not same(halved_run("main-first", Leapfrog(1, fused=True)), want)


def test_missing_join_is_caught(monkeypatch):
    """Without the join, a main stream that runs first updates w with nabla_w not yet computed."""
    want = deferred_run("main-first", Sequential())
    assert_same(deferred_run("main-first", Leapfrog(2)), want, DEFERRED, "with every wait")
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    assert not same(deferred_run("main-first", Leapfrog(2)), want)


def test_missing_join_is_caught_across_steps_without_an_update(monkeypatch):
    """The join also keeps the next pass from overwriting a^1 while a worker still reads it for nabla_w^2."""
    sizes = [9, 17, 5, 13, 3]

    def overwrite_before_read(schedule):
        with NumpyBackend(mode="deferred", order="main-first", trace=True) as backend:
            net = MLP(sizes, seed=2, backend=backend)
            backend.trace.clear()
            for step in range(2):
                x, y = batch(sizes, 4, seed=step, dtype=np.float32)
                plan = net.plan(4)
                plan.load(x, y)
                plan.backprop(schedule)  # enqueue forward and backward: no update, no sync
            backend.synchronize()
            trace = backend.trace
            copies = [i for i, entry in enumerate(trace) if entry[1:] == ("start", "copy_in")]
            read = next(i for i, entry in enumerate(trace) if entry[1:] == ("end", "gradients[2]"))
            return copies[2] < read  # copies 0, 1 are step 0's x and y; copy 2 writes a^1 again

    assert not overwrite_before_read(Sequential())
    assert not overwrite_before_read(Leapfrog(2))
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    assert overwrite_before_read(Leapfrog(2))
