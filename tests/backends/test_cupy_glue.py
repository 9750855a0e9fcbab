"""The CuPy backend's own code on the CPU, through the CuPy stand-in (tests/harness/fake_cupy), under each
order in which it interleaves its queues: nothing runs until the host blocks, kernels are the real
``kernels/*.cu`` on the CPU harness. Training steps, backprop, feedforward, Naumov, autotune, timing
and the bench agree with the reference there; and each hazard a review of the GPU path against CuPy
14.2 found has a test here that fails without its fix."""

import gc
import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from helpers import batch, batch_id, host, schedule_id
from leapfrog_gpu import MLP, Leapfrog, NaumovJacobi, NaumovScan, Sequential, reference
from leapfrog_gpu.mlp import autotune
from leapfrog_gpu.backends import timing

SIZES = [7, 13, 5, 11, 3]
PROFILING = Path(__file__).resolve().parents[2] / "profiling"


def reference_gradients(weights, biases, x, y, net):
    return reference.backprop(weights, biases, x, y, net.activation, net.cost, net.output_activation)


# -- the library on the stand-in -------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 4], ids=batch_id)
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), NaumovScan(k=2), NaumovJacobi(k=3)], ids=schedule_id)
def test_gradients_match_the_reference(backend, size, schedule):
    x, y = batch(SIZES, size)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        assert "CPU stand-in" in repr(net.backend)
        weights, biases = host(net.weights), host(net.biases)
        nabla_b, nabla_w = net.backprop(x, y, schedule)
        want_b, want_w = reference_gradients(weights, biases, x, y, net)
    for got, want in zip(host(nabla_b + nabla_w), want_b + want_w):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_class_labels_on_the_device_are_one_hot_encoded_there(backend):
    """y given as a CuPy array of integer class labels: the gradients of their one-hot targets (the reference's); a
    label out of range refused with its index, as on the host."""
    x, _ = batch(SIZES, 4)
    labels = np.array([0, 2, 1, 2])
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        weights, biases = host(net.weights), host(net.biases)
        nabla_b, nabla_w = net.backprop(x, backend.xp.asarray(labels))
        want_b, want_w = reference_gradients(weights, biases, x, np.eye(SIZES[-1])[:, labels], net)
        with pytest.raises(ValueError, match=r"^y holds class label 3 at index 1; labels must lie in 0\.\.2 "):
            net.backprop(x, backend.xp.asarray(np.array([0, 3, 1, 2])))
    for got, want in zip(host(nabla_b + nabla_w), want_b + want_w):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_feedforward_matches_the_reference(backend):
    x, _ = batch(SIZES, 5)
    with MLP(SIZES, activation="relu", dtype="float64", backend=backend) as net:
        want = reference.feedforward(host(net.weights), host(net.biases), x, "relu", net.output_activation)
        np.testing.assert_allclose(net.feedforward(x).get(), want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("size", [1, 4], ids=batch_id)
def test_training_steps_agree_bitwise_across_schedules(backend, size):
    nets = {s: MLP(SIZES, seed=3, backend=backend) for s in
            (Sequential(), Leapfrog(2), Leapfrog(3, fused=True), Sequential(fused=True), NaumovScan(k=2))}
    for step in range(3):
        x, y = batch(SIZES, size, seed=step, dtype=np.float32)
        x_device = backend.xp.asarray(x) if step == 2 else x  # a device array takes the other copy path
        for schedule, net in nets.items():
            net.sgd_step(x_device, y, 0.5, schedule)
    params = {s: host(net.weights + net.biases) for s, net in nets.items()}
    want = params[next(iter(params))]
    for schedule, got in params.items():
        if isinstance(schedule, NaumovScan):  # another order of the chain's sums: within rounding
            for a, b in zip(want, got):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        else:
            assert all(np.array_equal(a, b) for a, b in zip(want, got)), f"{schedule!r} differs from Sequential()"


def test_workers_wait_on_the_main_stream_and_the_main_stream_joins_them(backend, standin):
    with MLP(SIZES, backend=backend) as net:
        x, y = batch(SIZES, 2)
        net.synchronize()
        start = len(standin.trace())
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        main, workers = backend.main.ptr, {w.ptr for w in backend.workers(2)}
    log = standin.trace()[start:]
    assert all(w.is_non_blocking for w in [backend.main, *backend.workers(2)])
    waits_on_main = [entry for entry in log if entry[0] == "wait" and entry[1] in workers and entry[2] == main]
    joins = [entry for entry in log if entry[0] == "wait" and entry[1] == main and entry[2] in workers]
    assert len(waits_on_main) == len(SIZES) - 1  # one E_l per layer 2..L
    assert {entry[2] for entry in joins} == workers  # the join waits for both workers
    worker_kernels = {entry[2] for entry in log if entry[0] == "launch" and entry[1] in workers}
    assert {name[:-4] for name in worker_kernels} == {"rank_update_bias"}  # (6) and (7) left the chain, one kernel


def test_check_finite_and_bad_input(backend):
    with MLP(SIZES, backend=backend, check_finite=True) as net:
        x, y = batch(SIZES, 2)
        with pytest.raises(ValueError, match="x contains NaN or Inf"):
            net.backprop(backend.xp.asarray(np.full_like(x, np.nan)), y)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert all(np.isfinite(w.get()).all() for w in net.weights)


def test_leapfrog_auto_and_tune(backend):
    x, y = batch(SIZES, 3)
    with MLP(SIZES, dtype="float64", backend=backend) as net:
        auto = net.backprop(x, y, Leapfrog("auto"))
        plain = net.backprop(x, y, Sequential())
        for a, b in zip(host(auto[0] + auto[1]), host(plain[0] + plain[1])):
            np.testing.assert_array_equal(a, b)
        before = host(net.weights)
        tuning = autotune.tune(net, 3, ks=(1, 2), repeats=2, warmup=0)
        assert tuning.blas_threads is None and len(tuning.table) == 3  # Sequential, Leapfrog(1), Leapfrog(2)
        assert all(row[2]["median"] > 0 for row in tuning.table)
        assert all(np.array_equal(a, b) for a, b in zip(before, host(net.weights)))  # tuning steps with eta = 0


def test_timing_on_events(backend):
    xp = backend.xp
    a = xp.ones((64, 64), dtype=np.float32)
    backend.synchronize()
    ms = timing.measure(backend, lambda: backend.launch(backend.main, "square", xp.square, a, a), 3, 1)
    assert len(ms) == 3 and np.all(ms >= 0)
    assert timing.copy_bandwidth(backend, nbytes=1 << 16, repeats=2, warmup=1)["median"] > 0


def test_bench_runs(standin, tmp_path):
    from leapfrog_gpu.tools.bench import command as bench

    argv = ["--backend", "cupy", "--sizes", "12", "--layers", "3", "--batch", "1,3", "--k", "1,2",
            "--repeats", "2", "--warmup", "0", "--no-torch", "--json", str(tmp_path / "r.json")]
    with redirect_stdout(io.StringIO()):
        assert bench.main(argv) == 0
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    assert {(r["schedule"], r["k"]) for r in records} == {("sequential", 0), ("leapfrog", 1), ("leapfrog", 2)}
    assert all(r["device"] == standin.DEVICE_NAME and r["step_ms"]["median"] > 0 for r in records)


# -- the findings of the review against CuPy 14.2, one test each ------------------------------------


@pytest.fixture
def net(backend):
    """A float64 tanh network on the stand-in, its parameters on the host, and a step on another batch
    (eta = 0: it rewrites every buffer, not the parameters)."""
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as network:
        network.initial = host(network.weights), host(network.biases)
        assert all(np.isfinite(p).all() for p in network.initial[0] + network.initial[1])  # NaN would match NaN
        network.other_step = lambda eta=0.0: network.sgd_step(*batch(SIZES, 4, seed=9), eta, Leapfrog(2))
        yield network


# Arrays handed to the caller are complete and no later step writes them, even when the caller reads
# them on CuPy's default stream, which the backend's streams do not wait for (nor it for them).


def test_feedforward_returns_what_a_later_step_leaves_alone(net):
    x, _ = batch(SIZES, 4)
    a = net.feedforward(x)
    net.other_step()
    want = reference.feedforward(*net.initial, x, "tanh", net.output_activation)
    np.testing.assert_allclose(a.get(), want, rtol=1e-12)


def test_backprop_returns_what_a_later_step_leaves_alone(net):
    x, y = batch(SIZES, 4)
    nabla_b, nabla_w = net.backprop(x, y, Leapfrog(2))
    net.other_step()
    want_b, want_w = reference_gradients(*net.initial, x, y, net)
    for got, want in zip(host(nabla_b + nabla_w), want_b + want_w):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_weights_and_biases_are_what_they_were_when_read(net):
    weights, biases = net.weights, net.biases
    for _ in range(2):
        net.other_step(0.5)
    for got, want in zip(host(weights + biases), net.initial[0] + net.initial[1]):
        np.testing.assert_array_equal(got, want)


def test_check_finite_on_the_cupy_backend_stops_training_with_exit_3(standin, capsys):
    from leapfrog_gpu.tools.train import command as train

    argv = ["--backend", "cupy", "--hidden", "3x16", "--activation", "relu", "--cost", "quadratic", "--quiet",
            "--epochs", "1", "--lr", "1e20", "--check-finite"]
    assert train.main(argv) == 3
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "holds NaN or Inf; update refused, parameters unchanged: try a smaller --lr" in err


def test_a_refused_update_raises_at_synchronize_and_leaves_the_parameters(backend, monkeypatch):
    x, y = batch(SIZES, 3)
    with MLP(SIZES, backend=backend, check_finite=True) as net:
        before = host(net.weights + net.biases)
        plain = backend.ops.gradients

        def nan_gradient(nabla_w, nabla_b, delta, a):
            plain(nabla_w, nabla_b, delta, a)
            if nabla_w.shape == (5, 13):
                nabla_w[0, 0] = np.nan

        monkeypatch.setattr(backend.ops, "gradients", nan_gradient)
        net.sgd_step(x, y, 0.5, Leapfrog(3))  # enqueues; the check's error waits for synchronize()
        with pytest.raises(FloatingPointError, match=r"nabla_w\[3\] holds NaN or Inf; update refused"):
            net.synchronize()
        assert all(np.array_equal(p, q) for p, q in zip(before, host(net.weights + net.biases)))
        monkeypatch.setattr(backend.ops, "gradients", plain)
        net.sgd_step(x, y, 0.5, Leapfrog(3))
        assert not all(np.array_equal(p, q) for p, q in zip(before, host(net.weights + net.biases)))


def test_a_failing_launch_raises_at_synchronize_and_the_steps_behind_it_do_nothing(backend, monkeypatch):
    """A launch that raises ((5) on the main stream) does not raise from sgd_step: synchronize() does, and
    nothing after it in that step (the update) or in a step enqueued behind it has run. Once the fault is
    gone the next step is w - eta/B nabla_w, nabla_w from the reference."""
    x, y = batch(SIZES, 3)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        before = host(net.weights + net.biases)

        def fail(*args):
            raise ArithmeticError("injected in backward")

        with monkeypatch.context() as planted:
            planted.setattr(backend.ops, "backward", fail)
            net.sgd_step(x, y, 0.5, Leapfrog(2))
            net.sgd_step(x, y, 0.5, Leapfrog(2))
            with pytest.raises(ArithmeticError, match="injected in backward"):
                net.synchronize()
        assert all(np.array_equal(p, q) for p, q in zip(before, host(net.weights + net.biases)))
        net.sgd_step(x, y, 0.5, Leapfrog(2))
        got = host(net.weights + net.biases)
        weights, biases = before[:len(SIZES) - 1], before[len(SIZES) - 1:]
        nabla_b, nabla_w = reference_gradients(weights, biases, x, y, net)
    want = [p - 0.5 / 3 * g for p, g in zip(weights + biases, nabla_w + nabla_b)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_check_finite_does_not_wait_for_the_device(backend, standin):
    """The check of all 2(L-1) gradients leaves its verdict in device memory: a step enqueues it with no
    host wait (no read, no synchronization; a CuPy batch's own NaN check reads on the default stream),
    and synchronize() reads the verdict once."""
    with MLP(SIZES, backend=backend, check_finite=True) as net:
        x, y = (backend.xp.asarray(v) for v in batch(SIZES, 3, dtype=np.float32))
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        net.synchronize()
        waited, traced = len(standin.waits()), len(standin.trace())
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert standin.waits()[waited:] == [("get", 0)] * 2  # the batch's own checks of x and y, on the default stream
        checks = [name for kind, _, name in standin.trace()[traced:] if kind == "launch" and name.startswith("check_finite")]
        assert len(checks) == 2 * (len(SIZES) - 1)
        waited = len(standin.waits())
        net.synchronize()
        assert [what for what, _ in standin.waits()[waited:]] == ["device.synchronize", "get"]


def test_each_kernel_function_is_looked_up_once(backend, standin):
    with MLP(SIZES, backend=backend) as net:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        net.synchronize()
        first = dict(standin.RawModule.calls)
        for _ in range(3):
            net.sgd_step(x, y, 0.1, Leapfrog(2))
        net.synchronize()
    assert dict(standin.RawModule.calls) == first
    assert first["get_function"] <= 5  # bias_activation, delta_output, delta_hidden, rank_update_bias, sgd_update_layer


def test_a_numpy_batch_does_not_block_the_host(backend, standin):
    """Steps with NumPy batches run ahead of the device: no stream or device synchronization, and the
    staged batches still reach every step intact (float64, against the reference's update)."""
    batches = [batch(SIZES, 3, seed=s) for s in range(3)]
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        net.backprop(*batches[0])  # the buffers of this batch size
        weights, biases = host(net.weights), host(net.biases)
        start = len(standin.waits())
        for x, y in batches:
            net.sgd_step(x, y, 0.5, Leapfrog(2))
        blocked = standin.waits()[start:]
        queued = standin.pending()
        got = host(net.weights + net.biases)
    assert not [w for w in blocked if w[0] in ("stream.synchronize", "device.synchronize")], blocked
    assert queued > len(SIZES) * 2  # the steps were still queued when the last one returned
    for x, y in batches:
        nabla_b, nabla_w = reference_gradients(weights, biases, x, y, net)
        weights = [w - 0.5 / 3 * g for w, g in zip(weights, nabla_w)]
        biases = [b - 0.5 / 3 * g for b, g in zip(biases, nabla_b)]
    for a, b in zip(got, weights + biases):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_kernel_micro_benchmark_checks_results_it_can_trust(backend):
    sys.path.insert(0, str(PROFILING))
    try:
        import kernels
    finally:
        sys.path.remove(str(PROFILING))
    rows = list(kernels.rows(backend, [(33, 31, 1), (33, 31, 3)], "float64", repeats=2, warmup=0))
    assert [row["impl"] for row in rows] == ["ours", "matmul", "fused", "grads"] * 2
    assert all(row["ms"]["median"] >= 0 for row in rows)
    assert all(np.isfinite(row["error"]) and row["error"] <= 1e-10 for row in rows), rows


def test_nvtx_falls_back_when_cupy_was_built_without_it(standin, monkeypatch):
    from leapfrog_gpu.backends import annotate

    monkeypatch.setitem(sys.modules, "nvtx", None)  # the nvtx package is not installed
    assert annotate._provider()[0] == "cupy.cuda.nvtx"
    monkeypatch.setattr(standin.cuda, "nvtx", standin._UnavailableModule("cupy.cuda.nvtx"))
    assert annotate._provider() == (None, None, None)


@pytest.mark.parametrize("priorities", [(0, -5), (0, -1), (3, -7)])
def test_the_main_stream_has_the_highest_priority_and_workers_the_lowest(standin, monkeypatch, priorities):
    from leapfrog_gpu.backends.cuda import CupyBackend

    monkeypatch.setattr(standin.streams, "PRIORITY_RANGE", priorities)  # where Stream reads it
    least, greatest = priorities
    with CupyBackend() as backend:
        assert backend.main.priority == greatest
        assert [w.priority for w in backend.workers(3)] == [least] * 3


def test_a_dropped_network_keeps_its_buffers_until_its_work_is_done(backend):
    x, y = batch(SIZES, 3)
    net = MLP(SIZES, backend=backend)  # the backend is not the network's: dropping it does not close it
    for schedule in (Leapfrog(2), NaumovJacobi(k=2)):
        net.sgd_step(x, y, 0.1, schedule)
    del net
    gc.collect()  # its plan, weights and Naumov buffers go back to CuPy's pool, on the null stream
    backend.synchronize()
    with MLP(SIZES, seed=1, backend=backend) as other:  # the pool hands the same memory out again
        nabla_b, nabla_w = other.backprop(x, y, Leapfrog(2))
        want = reference_gradients(host(other.weights), host(other.biases), x, y, other)
        for got, expected in zip(host(nabla_b + nabla_w), want[0] + want[1]):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
