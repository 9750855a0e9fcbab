"""The CuPy backend's own code on the CPU, through a CuPy stand-in (tests/fake_cupy.py) whose
RawModule runs the real kernels: the network on it agrees with the reference, leapfrog with
sequential, the fused step with the plain one; every stream is non-blocking and every worker waits."""

import sys

import numpy as np
import pytest

import cuda_cpu
from conftest import batch
from leapfrog_gpu import MLP, Leapfrog, NaumovScan, Sequential, reference

pytestmark = pytest.mark.skipif(not cuda_cpu.available(), reason="the CPU harness needs g++")

SIZES = [7, 13, 5, 11, 3]


@pytest.fixture
def backend(monkeypatch):
    import fake_cupy

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    fake_cupy.Stream.log.clear()
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cupy_backend:
        yield cupy_backend


def host(arrays):
    return [array.get() for array in arrays]


@pytest.mark.parametrize("size", [1, 4])
def test_gradients_on_the_cupy_backend_match_the_reference(backend, size):
    x, y = batch(SIZES, size)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        assert "CPU harness" in repr(net.backend)
        nabla_b, nabla_w = net.backprop(x, y, Leapfrog(2))
        want_b, want_w = reference.backprop(host(net.weights), host(net.biases), x, y, "tanh", "quadratic", "tanh")
    for got, want in zip(host(nabla_b + nabla_w), want_b + want_w):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("size", [1, 4])
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
        same = [np.array_equal(a, b) for a, b in zip(want, got)]
        if isinstance(schedule, NaumovScan):  # another order of the chain's sums: within rounding
            for a, b in zip(want, got):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        else:
            assert all(same), f"{schedule!r} differs from Sequential()"


def test_workers_wait_on_the_main_stream_and_the_main_stream_joins_them(backend):
    import fake_cupy

    with MLP(SIZES, backend=backend) as net:
        x, y = batch(SIZES, 2)
        fake_cupy.Stream.log.clear()
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        main, workers = backend.main.ptr, {w.ptr for w in backend.workers(2)}
    log = fake_cupy.Stream.log
    assert main != 0 and 0 not in workers and backend.main.non_blocking
    assert all(w.non_blocking for w in backend.workers(2))
    waits_on_main = [entry for entry in log if entry[0] == "wait" and entry[1] in workers and entry[2] == main]
    joins = [entry for entry in log if entry[0] == "wait" and entry[1] == main and entry[2] in workers]
    assert len(waits_on_main) == len(SIZES) - 1  # one E_l per layer 2..L
    assert {entry[2] for entry in joins} == workers  # the join waits for both workers


def test_check_finite_and_bad_input_on_the_cupy_backend(backend):
    with MLP(SIZES, backend=backend, check_finite=True) as net:
        x, y = batch(SIZES, 2)
        with pytest.raises(ValueError, match="x contains NaN or Inf"):
            net.backprop(backend.xp.asarray(np.full_like(x, np.nan)), y)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert all(np.isfinite(w.get()).all() for w in net.weights)
