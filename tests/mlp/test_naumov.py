"""Naumov's solvers of the backward system (docs/naumov.md) against the sequential chain (5).

Tolerances: relative error, per layer, in the Frobenius norm, computed in float64. A product of
Jacobians rounds differently from the chain (5), so float32 results differ from sequential by a few
1e-7 (up to about 3e-6 at L = 33 on these sizes); 1e-5 leaves room for that and still fails on any
wrong product. Float64 stays below 1e-13. Deep layers use tanh: with a sigmoid, delta^2 of a 33-layer
network falls below float32's normal range, where no relative error means anything.
"""

import math

import numpy as np
import pytest

from helpers import NO_GPU, batch, batch_id, case_id
from leapfrog_gpu import MLP, Sequential, reference
from leapfrog_gpu.backends import cuda_available, get_backend
from leapfrog_gpu.mlp.naumov import NaumovJacobi, NaumovScan, scan_counters

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
WIDTHS = (7, 13, 5)

BACKENDS = [
    "numpy",
    pytest.param("cupy", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not cuda_available(), reason=NO_GPU)]),
]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    with get_backend(request.param) as backend:
        yield backend


def odd_sizes(L):
    return [WIDTHS[i % 3] for i in range(L)]


def to_host(array):
    return np.asarray(array.get() if hasattr(array, "get") else array)


def relative_error(got, want):
    got, want = (np.asarray(to_host(a), dtype=np.float64) for a in (got, want))
    scale = np.linalg.norm(want)
    return np.linalg.norm(got - want) / scale if scale > 0 else np.linalg.norm(got)


def pass_with(net, x, y, schedule):
    """Run backprop under ``schedule``: (delta per layer, nabla_b, nabla_w), all copies."""
    nabla_b, nabla_w = net.backprop(x, y, schedule)
    plan = net.plan(x.shape[1])
    return [plan.delta[l].copy() for l in net.layer_numbers], nabla_b, nabla_w


SCHEDULES = {
    "scan": lambda **options: NaumovScan(k=2, **options),
    "jacobi-cold": lambda **options: NaumovJacobi(k=3, **options),
    "jacobi-warm": lambda **options: NaumovJacobi(tol=0.0, warm_start=True, k=1, **options),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("B", [1, 4], ids=batch_id)
@pytest.mark.parametrize("L", [2, 3, 4, 5, 8, 17, 33], ids=lambda L: case_id(L=L))
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_matches_sequential(backend, name, L, B, dtype):
    sizes = odd_sizes(L)
    x, y = batch(sizes, B, seed=L)
    with MLP(sizes, activation="tanh", dtype=dtype, seed=L, backend=backend) as net:
        want = pass_with(net, x, y, Sequential())
        got = pass_with(net, x, y, SCHEDULES[name]())
    for quantity, got_layers, want_layers in zip(("delta", "nabla_b", "nabla_w"), got, want):
        for l, (g, w) in enumerate(zip(got_layers, want_layers), start=2):
            error = relative_error(g, w)
            assert error <= TOLERANCE[dtype], f"{quantity}^{l}: relative error {error:.2e}"


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_matches_sequential_other_activations(backend, name, activation):
    sizes = [5, 13, 7, 13, 5, 7, 13, 3]
    x, y = batch(sizes, 4)
    with MLP(sizes, activation=activation, cost="cross_entropy", dtype="float64", seed=3, backend=backend) as net:
        want = pass_with(net, x, y, Sequential())
        got = pass_with(net, x, y, SCHEDULES[name]())
    for got_layers, want_layers in zip(got, want):
        for g, w in zip(got_layers, want_layers):
            assert relative_error(g, w) <= TOLERANCE["float64"]


def test_scan_rounds_are_ceil_log2(backend):
    """The counters of one pass: ceil(log2(L-1)) rounds, extra flops, memory as memory_needed says."""
    schedule = NaumovScan()
    for L in range(2, 34):
        sizes = odd_sizes(L)
        x, y = batch(sizes, 1)
        with MLP(sizes, backend=backend) as net:
            net.backprop(x, y, schedule)
            assert schedule.stats["rounds"] == (math.ceil(math.log2(L - 1)) if L > 2 else 0), L
            assert schedule.stats["memory_bytes"] == schedule.memory_needed(net, 1)
            assert schedule.stats == scan_counters(sizes, 1, 4)
        if L >= 4:  # at least one matrix-matrix product: more work than the chain
            assert schedule.stats["extra_flops"] > 0 and schedule.stats["extra_bytes"] > 0


def test_jacobi_from_zero_is_exact_after_L_minus_2_sweeps():
    """From zero, L-2 sweeps give exactly the chain J_l (J_{l+1} (... g)) in the same order; L-3 do not."""
    n, B = 13, 4
    for dtype in ("float32", "float64"):
        for L in (4, 5, 9, 17, 33):
            x, y = batch([n] * L, B)
            with MLP([n] * L, activation="tanh", dtype=dtype, seed=L, backend="numpy") as net:
                exact = NaumovJacobi()
                delta, _, _ = pass_with(net, x, y, exact)
                assert exact.stats["sweeps"] == L - 2 and exact.stats["converged"]
                plan = net.plan(B)
                chain = {L: np.ascontiguousarray(plan.delta[L].T[:, :, None])}
                for l in range(L - 1, 1, -1):
                    J = np.ascontiguousarray(plan.sp[l].T[:, :, None] * plan.w[l + 1].T)  # (B, n_l, n_{l+1})
                    chain[l] = np.matmul(J, chain[l + 1])
                for l, got in enumerate(delta, start=2):
                    np.testing.assert_array_equal(got, chain[l][:, :, 0].T, err_msg=f"delta^{l}, {dtype}")
                short = NaumovJacobi(max_sweeps=L - 3)
                delta, _, _ = pass_with(net, x, y, short)
                assert short.stats["sweeps"] == L - 3 and not short.stats["converged"]
                assert not delta[0].any(), "the wavefront from delta^L has not reached delta^2"
                assert relative_error(delta[1], chain[3][:, :, 0].T) == 0


def test_jacobi_warm_start_on_a_slowly_changing_network():
    """A warm start stops early only where delta changes by less than tol between steps.

    Measured here (sigmoid, 13 wide, L = 17, B = 4, float64, tol 1e-3): eta 1e-4 takes 15 sweeps, then
    1 per step, with gradients within 3e-4 of sequential; at eta 1e-2 delta moves by more than tol per
    step and every pass takes all 15.
    """
    L, B, tol = 17, 4, 1e-3
    x, y = batch([13] * L, B)
    for eta, expect_early in ((1e-4, True), (1e-2, False)):
        with MLP([13] * L, dtype="float64", seed=1, backend="numpy") as net:
            warm = NaumovJacobi(tol=tol, warm_start=True)
            sweeps = []
            for _ in range(5):
                _, _, nabla_w = pass_with(net, x, y, warm)
                sweeps.append(warm.stats["sweeps"])
                _, _, want = pass_with(net, x, y, Sequential())
                for got, w in zip(nabla_w, want):
                    assert relative_error(got, w) <= 10 * tol
                net.sgd_step(x, y, eta, Sequential())
        assert sweeps[0] == L - 2  # the first pass starts from zero
        if expect_early:
            assert max(sweeps[1:]) < L - 2, sweeps
        else:
            assert sweeps[1:] == [L - 2] * 4, sweeps


def test_jacobi_warm_start_from_a_nan_iterate_sweeps_it_out():
    """A pass whose deltas overflow to NaN leaves a NaN iterate; the next pass, warm from it, counts NaN as an
    infinite change (NaN - NaN compares as no change at all) and sweeps until the iterate is exact again: its
    gradients are the float64 reference's, not NaN with stats["converged"] True after one sweep."""
    sizes = [4, 6, 6, 6, 6, 3]
    x, y = batch(sizes, 2, dtype=np.float32)
    huge = np.full_like(y, 3.4e38)
    huge[0] = -3.4e38  # a - y overflows no float32, but w^T delta does
    with MLP(sizes, activation="tanh", output_activation="identity", dtype="float32", seed=0, backend="numpy") as net:
        weights, biases = ([p.astype(np.float64) for p in params] for params in (net.weights, net.biases))
        warm = NaumovJacobi(tol=1e-6, warm_start=True)
        net.gradients(x, y, warm)
        overflowed = net.gradients(x, huge, warm)
        assert not all(np.isfinite(named["w"]).all() for named in overflowed.values())
        for _ in range(2):
            got = net.gradients(x, y, warm)
            assert warm.stats["converged"] and warm.stats["sweeps"] >= 1
            want_b, want_w = reference.backprop(weights, biases, x.astype(np.float64), y.astype(np.float64), "tanh",
                                                output_activation="identity")
            for l, (b, w) in enumerate(zip(want_b, want_w), start=2):
                assert relative_error(got[l]["w"], w) <= 1e-5 and relative_error(got[l]["b"], b) <= 1e-5, l


def test_jacobi_warm_start_measures_the_change_of_deltas_whose_squares_underflow():
    """A saturated layer (sigma' ~ 1e-174) makes the deltas below it ~1e-174, whose squares are 0 in float64: their
    change counted as none, and a warm pass after a change of the weights above them stopped after one sweep,
    "converged", with the gradients of layers 2 and 3 wholly wrong. Each layer's change is now scaled first."""
    sizes = [3] * 7 + [2]
    with MLP(sizes, dtype="float64", seed=0, backend="numpy") as net:
        weights, biases = net.weights, net.biases
        biases[3] = biases[3] - 400.0  # layer 5 saturates
        net.set_parameters(weights, biases)
        rng = np.random.default_rng(0)
        x, y = rng.random((3, 2)), rng.random((2, 2))
        warm = NaumovJacobi(tol=1e-6, warm_start=True)
        net.backprop(x, y, warm)
        weights[1], weights[2] = -3.0 * weights[1], -2.0 * weights[2]  # the deltas of layers 2-4 change wholly
        net.set_parameters(weights, biases)
        _, got = net.backprop(x, y, warm)
        assert warm.stats["converged"] and warm.stats["sweeps"] > 1, warm.stats
        want_b, want_w = reference.backprop([w.copy() for w in weights], [b.copy() for b in biases], x, y)
        for l, (g, w) in enumerate(zip(got, want_w), start=2):
            assert 0 < np.abs(w).max() and relative_error(g / np.abs(w).max(), w / np.abs(w).max()) <= 1e-6, l


def digits_accuracy(schedule, epochs=10, B=16, eta=0.1, seed=0):
    """Nielsen-style SGD on scikit-learn's 8x8 digits; the test accuracy on the last 360 images."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).T  # (64, 1797)
    y = np.eye(10)[:, digits.target]
    train, test = slice(0, 1437), slice(1437, None)
    rng = np.random.default_rng(seed)
    with MLP([64, 24, 24, 24, 24, 10], activation="tanh", cost="cross_entropy", seed=seed, backend="numpy") as net:
        sweeps = []
        for _ in range(epochs):
            order = rng.permutation(1437)
            for start in range(0, 1437 - B + 1, B):
                cols = order[start : start + B]
                net.sgd_step(x[:, train][:, cols], y[:, train][:, cols], eta, schedule)
                if isinstance(schedule, NaumovJacobi):
                    net.synchronize()
                    sweeps.append(schedule.stats["sweeps"])
        guess = net.feedforward(x[:, test]).argmax(axis=0)
    return float(np.mean(guess == digits.target[test])), sweeps


def test_training_on_digits_matches_sequential():
    reference, _ = digits_accuracy(Sequential())
    assert reference > 0.85, f"the network did not learn: {reference:.3f}"
    for schedule in (NaumovScan(), NaumovJacobi(), NaumovJacobi(tol=1e-4, warm_start=True)):
        accuracy, sweeps = digits_accuracy(schedule)
        assert abs(accuracy - reference) <= 0.005, f"{schedule!r}: {accuracy:.4f} vs sequential {reference:.4f}"
        per_step = f", sweeps per step {np.mean(sweeps):.2f} (L - 2 = 4)" if sweeps else ""
        print(f"{schedule!r}: accuracy {accuracy:.4f} (sequential {reference:.4f}){per_step}")


def test_memory_limit_refuses_before_allocating():
    sizes, B = [13] * 9, 4
    x, y = batch(sizes, B)
    with MLP(sizes, backend="numpy") as net:
        for schedule in (NaumovScan(memory_limit=1000), NaumovJacobi(memory_limit=1000)):
            needed = schedule.memory_needed(net, B)
            assert needed > 1000
            with pytest.raises(ValueError, match=rf"needs {needed} bytes .*, over memory_limit=1000 bytes; pass a "
                                                 r"larger memory_limit or use Sequential\(\) or Leapfrog\(k\)"):
                net.backprop(x, y, schedule)
            assert not net.plan(B).naumov
        _, nabla_w = net.backprop(x, y, Sequential())  # the network is still usable
        assert all(np.isfinite(w).all() for w in nabla_w)
        for schedule in (NaumovScan(), NaumovJacobi()):
            just_enough = type(schedule)(memory_limit=schedule.memory_needed(net, B))
            assert relative_error(net.backprop(x, y, just_enough)[1][0], nabla_w[0]) <= TOLERANCE["float32"]
            held = net.plan(B).naumov[schedule.kind]
            arrays = [a for value in held.values() for a in (value if isinstance(value, tuple) else [value])]
            assert sum(a.nbytes for a in arrays if hasattr(a, "nbytes")) == schedule.memory_needed(net, B)


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: NaumovJacobi(tol=-1.0), ValueError, "tol"),
        (lambda: NaumovJacobi(tol=float("nan")), ValueError, "tol"),
        (lambda: NaumovJacobi(tol="small"), TypeError, "tol"),
        (lambda: NaumovJacobi(tol=True), TypeError, "tol"),
        (lambda: NaumovJacobi(max_sweeps=0), ValueError, "max_sweeps"),
        (lambda: NaumovJacobi(max_sweeps=2.5), TypeError, "max_sweeps"),
        (lambda: NaumovJacobi(max_sweeps=True), TypeError, "max_sweeps"),
        (lambda: NaumovJacobi(warm_start="yes"), TypeError, "warm_start"),
        (lambda: NaumovJacobi(warm_start=1), TypeError, "warm_start"),
        (lambda: NaumovJacobi(k=0), ValueError, "k must"),
        (lambda: NaumovScan(k=1.5), TypeError, "k must"),
        (lambda: NaumovScan(k="2"), TypeError, "k must"),
        (lambda: NaumovScan(memory_limit=0), ValueError, "memory_limit"),
        (lambda: NaumovScan(memory_limit=2.0**30), TypeError, "memory_limit"),
    ],
)
def test_bad_arguments(make, error, words):
    with pytest.raises(error, match=words):
        make()


@pytest.mark.parametrize("name", ["scan", "jacobi-warm"])
def test_every_interleaving_gives_the_same_bits(name):
    """Deferred host streams run the workers as early (or as late) as the events allow, chaos delays
    every operation at random and poisons dead buffers. A delta handed to a worker before it is
    written, a fused update of w^l before its last read, or a buffer reused before the join changes
    the result under some of them: all must agree bit for bit, fused or not, and with the sequential
    chain to rounding."""
    from leapfrog_gpu.backends.host import NumpyBackend

    sizes = [5, 13, 7, 13, 5, 7, 13, 3, 7]
    x, y = batch(sizes, 4)
    runs = [("sequential", "main-first", False)]
    runs += [(name, order, fused) for fused in (False, True) for order in ("main-first", "workers-first", "random", 5)]
    results = {}
    for schedule_name, order, fused in runs:
        if isinstance(order, int):
            backend = NumpyBackend(chaos=order)
        else:
            backend = NumpyBackend(mode="deferred", order=order, seed=7)
        with backend, MLP(sizes, dtype="float64", seed=2, backend=backend) as net:
            schedule = Sequential() if schedule_name == "sequential" else SCHEDULES[name](fused=fused)
            for _ in range(3):  # later steps reuse every buffer
                net.sgd_step(x, y, 0.5, schedule)
            results[schedule_name, order, fused] = [to_host(p) for p in net.weights + net.biases]
    want = results.pop(("sequential", "main-first", False))
    first = results.pop((name, "main-first", False))
    for run, got in results.items():
        for g, f in zip(got, first):
            np.testing.assert_array_equal(g, f, err_msg=str(run))
    for f, w in zip(first, want):
        assert relative_error(f, w) <= TOLERANCE["float64"]
