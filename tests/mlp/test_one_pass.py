"""The one-pass backward (``one_pass=True``): delta^l and the update of w^{l+1} in one sweep over w^{l+1}.

Its bits: delta^l's sum runs block by block in row order, so it is bitwise (5)'s when w^{l+1} is one
block and within rounding otherwise; every w^l is updated by ``ops_numpy.rank_update`` (BLAS's ger, or
gemm with beta = 1, in place), each element within rounding of the exact update, as the plain step's is;
b^l as in the plain step. Whatever the stream count, the interleaving or the timing, a step gives the
same bits.
"""

import numpy as np
import pytest

from helpers import assert_same, batch, batch_id, case_id, layer_names, patched_ops, same
from leapfrog_gpu import MLP, SGD, Adam, Leapfrog, NaumovJacobi, NaumovScan, Sequential, reference
from leapfrog_gpu.backends import host_blas, ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core.handoff import Handoff

ETA = 0.5
SMALL = [9, 17, 5, 13, 7, 3]  # every layer one block of the sweep
WIDE = [300, 400, 500, 2]  # w^3 and w^4 several blocks under the sweep's block of the fixture below
KS = (1, 2, 3, 6)
EPS = np.finfo(np.float32).eps


@pytest.fixture(autouse=True)
def small_sweep_blocks(monkeypatch):
    """Blocks of 64 KiB, so that WIDE's w^3 (500 x 400) and w^4 sweep in several, as a 4096-wide layer does."""
    monkeypatch.setattr(ops_numpy, "SWEEP", 1 << 16)


def train(sizes, schedule, size, steps=3, dtype="float32", backend=None, seed=0):
    """Parameters after ``steps`` SGD steps under ``schedule`` (a backend of the default mode unless given)."""
    with backend or NumpyBackend() as backend:
        net = MLP(sizes, dtype=dtype, seed=5, backend=backend)
        for step in range(steps):
            x, y = batch(sizes, size, seed=seed + step, dtype=dtype)
            net.sgd_step(x, y, ETA, schedule)
        return net.weights + net.biases


def names(sizes):
    return layer_names(len(sizes), "w", "b")


def update_bound(w, delta, a, scale):
    """``(exact, bound)``: ``w - scale delta a^T`` from the float32 operands in float64, and what rounding
    may add to it in float32: the result's own rounding, and that of the product and its sum over B."""
    exact = w.astype(np.float64) - scale * (delta.astype(np.float64) @ a.astype(np.float64).T)
    terms = np.abs(scale) * (np.abs(delta.astype(np.float64)) @ np.abs(a.astype(np.float64)).T)
    return exact, EPS * np.abs(exact) + (delta.shape[1] + 3) * EPS * terms


@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
def test_one_step_against_the_exact_update(size):
    """One step from the same parameters: each delta is the plain step's bit for bit (every w one block),
    so b is too; each w^l lands within rounding of w^l - eta/B delta^l (a^{l-1})^T computed exactly from
    the plain step's delta and a, as the plain step's own w^l does; and every k gives the same bits."""
    x, y = batch(SMALL, size, dtype=np.float32)
    with NumpyBackend() as backend:
        start = MLP(SMALL, seed=5, backend=backend)
        plain = MLP(SMALL, seed=5, backend=backend)
        plain.sgd_step(x, y, ETA, Sequential())
        plain_weights, plain_biases = plain.weights, plain.biases
        start.backprop(x, y, Sequential())
        plan = start.plan(size)
        bounds = [update_bound(w, plan.delta[l], plan.a[l - 1], ETA / size)
                  for l, w in zip(start.layer_numbers, start.weights)]
    want = train(SMALL, Sequential(one_pass=True), size, steps=1)
    for l, got_w, plain_w, (exact, bound) in zip(start.layer_numbers, want, plain_weights, bounds):
        for which, w in (("one-pass", got_w), ("plain", plain_w)):
            over = np.abs(w - exact) - bound
            assert over.max() <= 0, f"{which} w[{l}] off the exact update by {over.max():.3g} over the bound"
    assert_same(want[len(start.layer_numbers):], plain_biases, layer_names(len(SMALL), "b"), "the plain step's biases")
    for schedule in [Leapfrog(k, one_pass=True) for k in KS]:
        assert_same(train(SMALL, schedule, size, steps=1), want, names(SMALL), repr(schedule))


@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
def test_wide_layers_match_the_reference_in_float64(size):
    """Several blocks: the parameters follow the book's SGD step within rounding."""
    net_sizes, steps = WIDE, 3
    with NumpyBackend() as backend:
        net = MLP(net_sizes, dtype="float64", seed=5, backend=backend)
        weights, biases = [w.copy() for w in net.weights], [b.copy() for b in net.biases]
        for step in range(steps):
            x, y = batch(net_sizes, size, seed=step)
            net.sgd_step(x, y, ETA, Leapfrog(2, one_pass=True))
            nabla_b, nabla_w = reference.backprop(weights, biases, x, y)
            weights = [w - ETA / size * nw for w, nw in zip(weights, nabla_w)]
            biases = [b - ETA / size * nb for b, nb in zip(biases, nabla_b)]
        got = net.weights + net.biases
    for name, g, w in zip(names(net_sizes), got, weights + biases):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=name)
    assert not same(got, train(net_sizes, Sequential(), size, dtype="float64")), "wide layers should round otherwise"


@pytest.mark.parametrize("size", [1, 7], ids=batch_id)
def test_bitwise_equal_across_reruns_k_and_timings(size):
    """float32, several blocks a layer: threads, chaos delays, and every deferred order give the same bits."""
    want = train(WIDE, Sequential(one_pass=True), size)
    assert_same(train(WIDE, Sequential(one_pass=True), size), want, names(WIDE), "rerun")
    for k in KS:
        schedule = Leapfrog(k, one_pass=True)
        assert_same(train(WIDE, schedule, size), want, names(WIDE), f"k{k}")
        assert_same(train(WIDE, schedule, size, backend=NumpyBackend(chaos=k, max_delay=1e-4)), want,
                    names(WIDE), f"k{k}, chaos")
        for order in ("main-first", "workers-first", "random"):
            backend = NumpyBackend(mode="deferred", order=order, seed=k)
            assert_same(train(WIDE, schedule, size, backend=backend), want, names(WIDE), f"k{k}, {order}")


@pytest.mark.parametrize("sizes", [[30, 1, 21, 40, 3], [1, 2, 1, 3, 1]], ids=str)
@pytest.mark.parametrize("optimizer", [Adam(0.01), SGD(0.3, momentum=0.9)], ids=repr)
def test_an_optimizers_sweep_in_halves_gives_the_same_bits_for_every_k(optimizer, sizes):
    """At B = 1 an optimizer's compiled sweep runs in two halves of each w's rows, the bottom one on worker 0 under a
    leapfrog schedule: float32, layers of one row (no bottom half: w^2 first, then w^3 in the chain), threads, chaos
    delays and every deferred order give the sequential step's bits."""

    def trained(schedule, backend=None):
        with backend or NumpyBackend() as made, MLP(sizes, seed=5, backend=made) as net:
            for step in range(3):
                net.train_step(*batch(sizes, 1, seed=step, dtype="float32"), optimizer, schedule)
            return net.weights + net.biases

    want = trained(Sequential(one_pass=True))
    for k in KS:
        schedule = Leapfrog(k, one_pass=True)
        assert_same(trained(schedule), want, names(sizes), f"k{k}")
        assert_same(trained(schedule, NumpyBackend(chaos=k, max_delay=1e-4)), want, names(sizes), f"k{k}, chaos")
        for order in ("main-first", "workers-first", "random"):
            assert_same(trained(schedule, NumpyBackend(mode="deferred", order=order, seed=k)), want, names(sizes),
                        f"k{k}, {order}")


@pytest.mark.parametrize("optimizer", [Adam(0.01), SGD(0.3, momentum=0.9)], ids=repr)
def test_an_optimizers_scratch_blocks_leave_delta_the_chain_s_in_one_sweep_block(optimizer, monkeypatch):
    """Above B = 1 an optimizer updates w^{l+1} a scratch block at a time, fewer rows than the sum's block: delta^l
    is still summed in the sum's blocks, bitwise (5)'s where w^{l+1} is one of them, and so b^l and its state are the
    plain step's to the bit (the sum took the scratch's blocks: 116 of b^2's 257 apart after one Adam step at
    [200, 257, 256, 10], B = 4, in float32)."""
    monkeypatch.setattr(ops_numpy, "SCRATCH", 1 << 10)  # w^3 (40 x 30) two scratch blocks, one block of the sum
    sizes = [20, 30, 40, 5]
    got = {}
    for one_pass in (False, True):
        with MLP(sizes, dtype="float32", seed=5, backend="numpy") as net:
            for step in range(3):
                net.train_step(*batch(sizes, 4, seed=step), optimizer, Sequential(one_pass=one_pass))
            got[one_pass] = net.parameters(), net.optimizer_state()
    (plain, plain_state), (swept, swept_state) = got[False], got[True]
    for l in plain:
        assert np.array_equal(swept[l]["b"], plain[l]["b"]), l
        for slot in set(plain_state) - {"step"}:
            assert np.array_equal(swept_state[slot][l]["b"], plain_state[slot][l]["b"]), (slot, l)


@pytest.mark.parametrize("rows", [1, 7, 40, 1000])
def test_an_update_of_its_own_in_parts_of_some_rows_leaves_delta_the_one_block_sum(rows):
    """The op with an update of its own (an optimizer's) in parts of ``rows`` rows: delta bitwise ``backward``'s
    where w is one block of the sum, whatever ``rows``; each part updated once, in order, after the sum read it."""
    rng = np.random.default_rng(rows)
    w, delta_next = rng.standard_normal((40, 30)).astype(np.float32), rng.standard_normal((40, 4)).astype(np.float32)
    a, sp = rng.random((30, 4)).astype(np.float32), rng.random((30, 4)).astype(np.float32)
    want, got = np.full((30, 4), np.nan, np.float32), np.full((30, 4), np.nan, np.float32)
    ops_numpy.backward(want, w, delta_next, sp)
    parts = []
    ops_numpy.backward_update(got, w, delta_next, sp, a, np.array([0.01, 0], np.float32),
                              lambda part: parts.append((part.start, part.stop, np.isnan(got).all())), rows)
    assert np.array_equal(got, want)
    assert [(start, stop) for start, stop, _ in parts] == [(r, min(r + rows, 40)) for r in range(0, 40, rows)]
    assert not any(unread for _, _, unread in parts)


@pytest.mark.parametrize("n,m,size", [(7, 5, 1), (7, 5, 3), (300, 400, 1), (300, 400, 5), (1, 70000, 2),
                                      (40, 1, 3)], ids=lambda v: str(v))
def test_the_sweep_against_backward_and_the_exact_update(n, m, size, monkeypatch):
    """The op on its own: delta bitwise ``backward``'s in one block, within a few ulps in several; w^{l+1}
    bitwise ``rank_update``'s at B = 1 (ger adds row by row, whatever the blocks), within rounding of the
    exact update always. Zeros in delta^{l+1} and a leave their rows and columns of w as they were."""
    products = []  # the row count of each block's product into delta
    monkeypatch.setattr(ops_numpy, "matmul", lambda out, x, y, **kw: (
        products.append(x.shape[1]) if out.shape == (m, size) else None, host_blas.matmul(out, x, y, **kw)))
    rng = np.random.default_rng(n + m + size)
    w, delta_next = rng.standard_normal((n, m)).astype(np.float32), rng.standard_normal((n, size)).astype(np.float32)
    a, sp = rng.random((m, size)).astype(np.float32), rng.random((m, size)).astype(np.float32)
    delta_next[n // 2] = 0
    a[m // 2] = 0
    controls = np.array([0.01, 0], np.float32)
    exact, bound = update_bound(w, delta_next, a, controls[0])
    want_w, want_delta = w.copy(), np.full((m, size), np.nan, np.float32)
    ops_numpy.backward(want_delta, want_w, delta_next, sp)
    ops_numpy.rank_update(want_w, delta_next, a, controls)
    got_delta = np.full((m, size), np.nan, np.float32)
    before = w.copy()
    products.clear()
    ops_numpy.backward_update(got_delta, w, delta_next, sp, a, controls)
    blocks = -(-n * m * 4 // ops_numpy.SWEEP) if n > 1 else 1
    assert len(products) >= min(blocks, n) and sum(products) == n, f"the sweep took w's {n} rows as {products}"
    assert np.all(np.abs(w - exact) <= bound)
    assert np.array_equal(w[n // 2], before[n // 2]) and np.array_equal(w[:, m // 2], before[:, m // 2])
    if size == 1:
        assert np.array_equal(w, want_w)
    if n * m * 4 <= ops_numpy.SWEEP or n == 1:
        assert np.array_equal(got_delta, want_delta)
    else:
        bound = 8 * EPS * (np.abs(before).T @ np.abs(delta_next)) * sp
        assert np.all(np.abs(got_delta - want_delta) <= bound)


def test_a_refused_update_writes_nothing():
    """``controls[1]`` set: the sweep still computes delta, and neither op touches w."""
    rng = np.random.default_rng(1)
    w, delta_next = rng.standard_normal((300, 400)).astype(np.float32), rng.standard_normal((300, 2)).astype(np.float32)
    a, sp = rng.random((400, 2)).astype(np.float32), rng.random((400, 2)).astype(np.float32)
    controls, before = np.array([0.01, 7], np.float32), w.copy()
    got = np.full((400, 2), np.nan, np.float32)
    ops_numpy.backward_update(got, w, delta_next, sp, a, controls)
    ops_numpy.rank_update(w, delta_next, a, controls)
    assert np.array_equal(w, before)
    np.testing.assert_allclose(got, (before.T.astype(np.float64) @ delta_next) * sp, rtol=1e-5, atol=1e-5)


def test_backprop_is_unchanged():
    """``backprop`` under a one-pass schedule is the plain pass: nabla_w written, nothing updated. At one BLAS
    thread: the bits are a schedule's at a fixed thread count, and a leapfrog pass shares two among its streams
    (OpenBLAS's kernels for AVX2 sum (5) otherwise on one thread than on two, at B = 4)."""
    x, y = batch(WIDE, 4, dtype=np.float32)
    with NumpyBackend(blas_threads=1) as backend:
        net = MLP(WIDE, seed=5, backend=backend)
        want = net.backprop(x, y, Sequential())
        before = net.weights
        for schedule in (Sequential(one_pass=True), Leapfrog(2, one_pass=True)):
            got = net.backprop(x, y, schedule)
            assert_same(got[0] + got[1], want[0] + want[1], layer_names(4, "nabla_b", "nabla_w"), repr(schedule))
        assert_same(net.weights, before, layer_names(4, "w"), "after backprop")


@pytest.mark.parametrize("then", [NaumovScan(k=2, fused=True), NaumovJacobi(fused=True), NaumovScan(), NaumovJacobi()],
                         ids=repr)
def test_a_naumov_step_after_a_one_pass_step_is_the_step_of_a_network_that_took_no_sweep(then):
    """Every pass says whether it sweeps, Naumov's too: after a one-pass step, a Naumov step at the same batch size
    is that of a network whose first step was plain, to the bit, w included (a sweep left on fused none of the
    w, and an unfused step found no controls)."""
    x, y = batch(SMALL, 3, dtype=np.float64)
    with MLP(SMALL, dtype="float64", seed=5, backend="numpy") as net, \
            MLP(SMALL, dtype="float64", seed=5, backend="numpy") as plain:
        net.sgd_step(x, y, ETA, Sequential(one_pass=True))
        plain.sgd_step(x, y, ETA, Sequential(fused=True))
        assert_same(net.weights + net.biases, plain.weights + plain.biases, names(SMALL), "the first step")
        for model in (net, plain):
            model.sgd_step(x, y, ETA, then)
        assert_same(net.weights + net.biases, plain.weights + plain.biases, names(SMALL), repr(then))


def test_a_graph_step_is_the_eager_step():
    want = train(WIDE, Leapfrog(2, one_pass=True), 3)
    with NumpyBackend() as backend:
        net = MLP(WIDE, seed=5, backend=backend)
        for step in range(3):
            x, y = batch(WIDE, 3, seed=step, dtype=np.float32)
            net.sgd_step(x, y, ETA, Leapfrog(2, one_pass=True), graph=True)
        assert_same(net.weights + net.biases, want, names(WIDE), "graph")


# -- the hazards of the sweep, each guard removed and caught deterministically ---------------------------


def updated_then_read(delta, w_next, delta_next, sp, a, controls):
    """The sweep with its guard removed: each row block updated before the chain reads it."""
    step = max(1, ops_numpy.SWEEP // (w_next.shape[1] * w_next.itemsize))
    for r0 in range(0, w_next.shape[0], step):
        w, delta_rows = w_next[r0 : r0 + step], delta_next[r0 : r0 + step]
        ops_numpy.rank_update(w, delta_rows, a, controls)
        host_blas.matmul(delta, w.T, delta_rows, beta=1.0 if r0 else 0.0)
    ops_numpy.delta_hidden(delta, sp)


@pytest.mark.parametrize("sizes", [SMALL, WIDE], ids=("one-block", "several-blocks"))
def test_a_block_updated_before_the_chain_reads_it_is_caught(sizes):
    want = train(sizes, Sequential(one_pass=True), 1)
    backend = NumpyBackend(mode="deferred")
    backend.ops = patched_ops(backward_update=updated_then_read)
    assert not same(train(sizes, Sequential(one_pass=True), 1, backend=backend), want)


@pytest.mark.parametrize("k", [1, 2], ids=lambda k: case_id(k=k))
def test_a_worker_not_waiting_for_delta_is_caught(monkeypatch, k):
    """The workers' (6) and update of b^l read delta^l: without E_l, a worker that runs first reads it unwritten."""
    want = train(SMALL, Sequential(one_pass=True), 4)
    schedule = Leapfrog(k, one_pass=True)
    assert_same(train(SMALL, schedule, 4, backend=NumpyBackend(mode="deferred", order="workers-first")), want,
                names(SMALL), "with every wait")
    monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
    assert not same(train(SMALL, schedule, 4, backend=NumpyBackend(mode="deferred", order="workers-first")), want)


def test_a_missing_join_is_caught(monkeypatch):
    """Without the join, the next step's forward reads b^l and w^2 before a worker updates them."""
    want = train(SMALL, Sequential(one_pass=True), 4)
    schedule = Leapfrog(2, one_pass=True)
    assert_same(train(SMALL, schedule, 4, backend=NumpyBackend(mode="deferred", order="main-first")), want,
                names(SMALL), "with every wait")
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    assert not same(train(SMALL, schedule, 4, backend=NumpyBackend(mode="deferred", order="main-first")), want)


# -- what it refuses --------------------------------------------------------------------------------------


def test_the_cupy_backend_refuses_it(standin):
    from leapfrog_gpu.backends.cuda import CupyBackend

    x, y = batch(SMALL, 2, dtype=np.float32)
    with CupyBackend() as backend, MLP(SMALL, backend=backend) as net:
        for schedule in (Sequential(one_pass=True), Leapfrog(2, one_pass=True)):
            with pytest.raises(ValueError, match="NumPy backend only.*pass fused=True instead of one_pass=True"):
                net.sgd_step(x, y, ETA, schedule)
        with pytest.raises(ValueError, match="NumPy backend only.*the update; pass one_pass=False$"):
            net.sgd_step(x, y, ETA, Leapfrog(2, fused=True, one_pass=True))
        net.sgd_step(x, y, ETA, Leapfrog(2, fused=True))  # the GPU's fused step runs
        net.synchronize()


def test_refusals_and_names():
    assert repr(Sequential(one_pass=True)) == "Sequential(one_pass=True)"
    assert repr(Leapfrog(3, one_pass=True)) == "Leapfrog(k=3, one_pass=True)"
    assert Leapfrog(3, one_pass=True).fused and repr(Sequential()) == "Sequential()"
    with pytest.raises(ValueError, match="give k for one_pass=True"):
        Leapfrog("auto", one_pass=True)
    x, y = batch(SMALL, 2, dtype=np.float32)
    with NumpyBackend() as backend, MLP(SMALL, backend=backend, check_finite=True) as net:
        with pytest.raises(ValueError, match="check_finite needs an unfused schedule"):
            net.sgd_step(x, y, ETA, Sequential(one_pass=True))
