"""Graph mode on the CuPy backend, in CI: on the stand-in of tests/fake_cupy_capture.py, whose kernels
are the real ones on the CPU harness and whose stream capture refuses what CuPy refuses (cuBLAS),
allocations and anything else but raw kernels, events and waits.

It checks the CuPy glue of graph mode: the capture succeeds with no cuBLAS call and no allocation in
it, the workers join it through events and are joined back, the graph steps agree to the bit with
eager steps on the same (chain) kernels and with the reference, eta changes without a new capture,
check_finite needs no host round trip, and a NumPy batch is staged without synchronizing the host.
"""

import sys

import numpy as np
import pytest

import cuda_cpu
from conftest import batch, gpu
from leapfrog_gpu import MLP, Leapfrog, NaumovScan, Sequential, reference
from test_graphs import assert_graph_steps_follow_the_reference

harness = pytest.mark.skipif(not cuda_cpu.available(), reason="the CPU harness needs g++")

SIZES = [7, 13, 5, 11, 3]


@pytest.fixture
def cupy(monkeypatch):
    if not cuda_cpu.available():
        pytest.skip("the CPU harness needs g++")
    import fake_cupy_capture

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy_capture)
    fake_cupy_capture.reset()
    return fake_cupy_capture


def backend(chain="cublas"):
    from leapfrog_gpu.backends.cuda import CupyBackend

    return CupyBackend(chain=chain)


def host(arrays):
    return [np.array(array.get()) for array in arrays]


def etas(steps):
    return [0.5, 0.1, 0.3, 0.0, 0.2][:steps]


def train(net, schedule, size, graph, steps=5, dtype=np.float32):
    """Parameters (on the host) after each of ``steps`` SGD steps, eta changing every step."""
    taken = []
    for step, eta in enumerate(etas(steps)):
        x, y = batch(SIZES, size, seed=step, dtype=dtype)
        net.sgd_step(x, y, eta, schedule, graph=graph)
        taken.append(host(net.weights + net.biases))
    return taken


@pytest.mark.parametrize("size", [1, 4])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(3, fused=True), Sequential(fused=True)],
                         ids=repr)
def test_graph_steps_are_bitwise_eager_steps_on_the_chain_kernels(cupy, schedule, size):
    with backend(chain="kernels") as cuda:
        want = train(MLP(SIZES, seed=4, backend=cuda), schedule, size, graph=False)
        net = MLP(SIZES, seed=4, backend=cuda)
        got = train(net, schedule, size, graph=True)
    assert cupy.counts["captures"] == 1 and cupy.counts["launches"] == 4  # the first step runs eagerly
    for step, (a, b) in enumerate(zip(want, got)):
        assert all(np.array_equal(p, q) for p, q in zip(a, b)), f"graph step {step} differs from the eager one"


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True)], ids=repr)
def test_graph_steps_follow_the_reference(cupy, schedule):
    with backend() as cuda, MLP(SIZES, activation="tanh", dtype="float64", seed=2, backend=cuda) as net:
        assert_graph_steps_follow_the_reference(net, schedule, 3)


def test_the_capture_calls_no_cublas_and_allocates_nothing(cupy):
    """On a backend whose eager steps use cuBLAS, the graph steps run the chain on our kernels: the
    capture, which refuses any cuBLAS call or allocation, succeeds; the eager steps did call cuBLAS."""
    with backend() as cuda, MLP(SIZES, seed=1, backend=cuda) as net:
        x, y = batch(SIZES, 2, dtype=np.float32)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert cupy.counts["cublas"] == 2 * (len(SIZES) - 1) - 1  # (2) for every layer, (5) below the last
        cupy.counts["cublas"] = 0
        for _ in range(3):
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        assert cupy.counts["cublas"] == 0 and cupy.counts["captures"] == 1 and cupy.counts["launches"] == 2
        assert repr(cuda).count("chain") == 0  # the eager chain is cuBLAS again once the capture is done


def test_the_workers_join_the_capture_through_events_and_are_joined_back(cupy):
    import fake_cupy

    with backend() as cuda, MLP(SIZES, backend=cuda) as net:
        x, y = batch(SIZES, 2)
        net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        log = [entry for entry in fake_cupy.Stream.log if entry[0] == "wait"]
        half = len(log) // 2  # the eager step, then the capture of the same step
        assert log[:half] == log[half:]
        main, workers = cuda.main.ptr, {w.ptr for w in cuda.workers(2)}
        assert {entry[1] for entry in log if entry[0] == "wait" and entry[2] == main} == workers
        assert {entry[2] for entry in log if entry[0] == "wait" and entry[1] == main} == workers


def test_eta_changes_without_a_new_capture(cupy):
    with backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)
        before = host(net.weights)
        net.sgd_step(x, y, 0.0, Leapfrog(2), graph=True)
        assert all(np.array_equal(p, q) for p, q in zip(host(net.weights), before))  # eta = 0: no change
        nabla_b, nabla_w = reference.backprop(before, host(net.biases), x, y)
        net.sgd_step(x, y, 0.25, Leapfrog(2), graph=True)
        for got, w, g in zip(host(net.weights), before, nabla_w):
            np.testing.assert_allclose(got, w - 0.25 / 3 * g, rtol=1e-12, atol=1e-14)
        assert cupy.counts["captures"] == 1 and cupy.counts["launches"] == 2


def test_check_finite_refuses_the_update_without_a_host_round_trip(cupy):
    with backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda, check_finite=True) as net:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        weights, biases = host(net.weights), host(net.biases)
        broken = [w.copy() for w in weights]
        broken[1][2, 3] = np.nan
        net.set_parameters(broken, biases)
        cupy.counts["synchronize"] = 0
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        assert cupy.counts["synchronize"] == 0  # the steps were enqueued without waiting for the device
        with pytest.raises(FloatingPointError, match=r"nabla_w\[\d\] holds NaN or Inf; update refused"):
            net.synchronize()
        assert all(np.array_equal(p, q, equal_nan=True) for p, q in zip(host(net.weights), broken))
        net.set_parameters(weights, biases)
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        assert not all(np.array_equal(p, q) for p, q in zip(host(net.weights), weights))
        assert cupy.counts["captures"] == 1


def test_naumov_schedules_are_refused_on_cupy(cupy):
    with backend() as cuda, MLP(SIZES, backend=cuda) as net:
        with pytest.raises(ValueError, match=r"graph=True cannot capture NaumovScan.*cuBLAS"):
            net.sgd_step(*batch(SIZES, 2), 0.1, NaumovScan(), graph=True)
        assert cupy.counts["captures"] == 0


def test_a_numpy_batch_is_staged_through_pinned_buffers_without_a_host_sync(cupy):
    with backend() as cuda, MLP(SIZES, backend=cuda) as net:
        for step in range(4):
            if step == 1:  # the first step allocated its plan, and waited for that
                cupy.counts["synchronize"] = 0
            net.sgd_step(*batch(SIZES, 2, seed=step), 0.1, Leapfrog(2), graph=True)
        assert cupy.counts["synchronize"] == 0
        assert sorted(cuda._staging) == sorted([((7, 2), "<f4"), ((3, 2), "<f4")])


# -- the stand-in refuses what CuPy refuses during a capture -------------------------------------------


@harness
def test_the_stand_in_refuses_cublas_allocation_and_strays_during_a_capture(cupy):
    import fake_cupy_capture as fake

    stream, other = fake.cuda.Stream(non_blocking=True), fake.cuda.Stream(non_blocking=True)
    a = fake.zeros((3, 3), dtype=np.float32)
    refusals = {
        "cuBLAS": (lambda: fake.matmul(a, a, out=a), NotImplementedError),
        "allocation": (lambda: fake.empty((3,)), fake.CaptureRefused),
        "asarray": (lambda: fake.asarray(np.ones(3)), fake.CaptureRefused),
        "copy": (lambda: a.copy(), fake.CaptureRefused),
        "ufunc": (lambda: fake.multiply(a, 2, out=a), fake.CaptureRefused),
        "in-place ufunc": (lambda: a.__imul__(2), fake.CaptureRefused),
        "get": (lambda: a.get(), fake.CaptureRefused),
        "host sync": (lambda: stream.synchronize(), fake.CaptureRefused),
        "stray kernel": (lambda: _launch_on(fake, other, a), fake.CaptureRefused),
    }
    for name, (call, error) in refusals.items():
        stream.begin_capture()
        with stream, pytest.raises(error):
            call()
        stream.end_capture()
    with pytest.raises(RuntimeError, match="default"):
        fake.cuda.Stream(null=True).begin_capture()


@harness
def test_the_stand_in_refuses_a_stream_not_joined_back(cupy):
    import fake_cupy_capture as fake

    main, worker = fake.cuda.Stream(non_blocking=True), fake.cuda.Stream(non_blocking=True)
    fork, join = fake.cuda.Event(), fake.cuda.Event()
    a = fake.zeros((4,), dtype=np.float32)
    for joined in (True, False):
        main.begin_capture()
        fork.record(main)
        worker.wait_event(fork)
        _launch_on(fake, worker, a)
        join.record(worker)
        if joined:
            main.wait_event(join)
            graph = main.end_capture()
        else:
            with pytest.raises(fake.CaptureRefused, match="Unjoined"):
                main.end_capture()
    assert np.all(a.get() == 0)  # captured, not run
    graph.launch(main)
    assert np.all(a.get() == 1)


def _launch_on(fake, stream, array):
    """Add 1 to every element of ``array``, with a real kernel, on ``stream``."""
    from leapfrog_gpu.backends.ops_cuda import CudaOps

    ones = np.ones(array.shape, array.dtype).view(fake.ndarray)
    step = np.array([-1, 0], array.dtype).view(fake.ndarray)  # param -= -1 * ones
    with stream:
        CudaOps(fake).sgd_update(array, ones, step, None)


# -- on a GPU: real stream capture ---------------------------------------------------------------------

GPU_SIZES = [33, 257, 31, 64, 129, 10]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 7, 32])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(1), Leapfrog(2), Leapfrog(3, fused=True),
                                      Leapfrog(len(GPU_SIZES) + 1)], ids=repr)
def test_graph_steps_on_the_gpu_are_bitwise_eager_steps_on_the_chain_kernels(schedule, size):
    """CUDA graphs replayed 20 times, eta changing: bitwise the eager steps on the same kernels."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend(chain="kernels") as cuda:
        nets = [MLP(GPU_SIZES, seed=4, backend=cuda) for _ in range(2)]
        for step in range(20):
            x, y = batch(GPU_SIZES, size, seed=step, dtype=np.float32)
            for net, graph in zip(nets, (False, True)):
                net.sgd_step(x, y, 0.05 * (1 + step % 3), schedule, graph=graph)
            eager, graph = (host(net.weights + net.biases) for net in nets)
            assert all(np.array_equal(p, q) for p, q in zip(eager, graph)), f"step {step} differs"
        assert len(nets[1]._plans[size].graphs) == 1


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2, fused=True)], ids=repr)
def test_graph_steps_on_the_gpu_follow_the_reference(schedule):
    """On a backend whose eager chain is cuBLAS (which CuPy cannot capture), in float64."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cuda, MLP(GPU_SIZES, activation="tanh", dtype="float64", seed=2, backend=cuda) as net:
        assert_graph_steps_follow_the_reference(net, schedule, 5, rtol=1e-11)
