"""Host streams and backend choice: errors reach the caller, threads end on close, auto is visible."""

import ast
import logging
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from helpers import NO_GPU, batch
from no_gpu_cupy import CUDA_ANSWER
from leapfrog_gpu import MLP, Leapfrog, Sequential, get_backend
from leapfrog_gpu.backends import host_blas, ops_numpy
from leapfrog_gpu.backends import cuda_available
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core.checks import BLAS_THREADS

SIZES = [6, 9, 7, 5, 4]


class Boom(RuntimeError):
    pass


def failing_ops(layer_shape):
    """ops_numpy with gradients (6)(7) that raise for the layer whose nabla_w has ``layer_shape``."""
    def gradients(nabla_w, nabla_b, delta, a):
        if nabla_w.shape == layer_shape:
            raise Boom(f"injected failure for {layer_shape}")
        ops_numpy.gradients(nabla_w, nabla_b, delta, a)

    namespace = {name: getattr(ops_numpy, name) for name in dir(ops_numpy) if not name.startswith("_")}
    return types.SimpleNamespace(**{**namespace, "gradients": gradients})


def leapfrog_threads():
    return {t for t in threading.enumerate() if t.name.startswith("leapfrog-")}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", ["sigmoid", "tanh", "relu", "identity"])
@pytest.mark.parametrize("apart", [1, 2, 3, 4, 8])
def test_an_activation_of_strided_views_is_the_float64_reference(dtype, activation, apart):
    """``a = sigma(z)`` into a view of elements ``apart`` apart, from one alike: NumPy 2.4's negative read its input
    as contiguous where it lay 16 bytes apart (float32) or 64 (float64), so sigmoid took other elements' values."""
    z = np.full((24, 8), np.nan, dtype)
    z[:, 0] = np.linspace(-6, 6, 24)
    a = np.full_like(z, np.nan)
    with np.errstate(over="ignore"):
        for call in ops_numpy.sigma_calls(z.reshape(-1)[::apart][:24], a.reshape(-1)[::apart][:24], activation):
            call()
    x = z.reshape(-1)[::apart][:24].astype(np.float64)
    want = {"sigmoid": 1 / (1 + np.exp(-x)), "tanh": np.tanh(x), "relu": np.maximum(x, 0), "identity": x}[activation]
    got = a.reshape(-1)[::apart][:24]
    assert np.allclose(got, want, rtol=1e-6, atol=0, equal_nan=True) and np.isnan(got).sum() == np.isnan(x).sum()


@pytest.mark.parametrize("mode", ["threads", "serial", "deferred"])
def test_worker_exception_reaches_the_caller_and_the_backend_recovers(mode):
    x, y = batch(SIZES, 3)
    with NumpyBackend(mode=mode) as backend:
        net = MLP(SIZES, dtype="float64", backend=backend)
        want = net.backprop(x, y, Sequential())
        before = [p.copy() for p in net.weights + net.biases]
        backend.ops = failing_ops((7, 9))  # w^3
        with pytest.raises(Boom, match="injected failure"):
            net.sgd_step(x, y, 0.5, Leapfrog(2))
            net.synchronize()
        assert all(np.array_equal(p, q) for p, q in zip(before, net.weights + net.biases)), "a failed step updated"
        backend.ops = ops_numpy
        got = net.backprop(x, y, Leapfrog(2))
        assert all(np.array_equal(p, q) for p, q in zip(want[0] + want[1], got[0] + got[1]))


def test_no_thread_outlives_close():
    before = leapfrog_threads()
    backend = NumpyBackend()
    backend.workers(4)
    assert len(leapfrog_threads() - before) == 5  # main and four workers
    with MLP(SIZES, backend=backend) as net:
        net.sgd_step(*batch(SIZES, 2), 0.1, Leapfrog(4))
    backend.close()
    assert leapfrog_threads() == before
    with pytest.raises(RuntimeError, match="closed"):
        backend.synchronize()


def test_network_context_manager_closes_the_backend_it_created():
    before = leapfrog_threads()
    with MLP(SIZES, backend="numpy") as net:
        net.backprop(*batch(SIZES, 2), Leapfrog(3))
    assert net.backend.closed
    assert leapfrog_threads() == before


def test_events_follow_cuda_semantics():
    """A wait holds until the recording that was latest when the wait was enqueued; unrecorded: no-op."""
    with NumpyBackend(trace=True) as backend:
        main, (worker,) = backend.main, backend.workers(1)
        gate, event, seen = threading.Event(), backend.event("E"), []
        backend.wait(worker, backend.event("never recorded"))
        backend.launch(main, "hold", gate.wait)
        backend.record(main, event)
        backend.wait(worker, event)
        backend.launch(worker, "after", seen.append, "worker ran")
        assert not gate.is_set() and seen == []
        gate.set()
        backend.synchronize()
        assert seen == ["worker ran"]
        order = [(stream, what, name) for stream, what, name in backend.trace if name in ("E", "after")]
        assert order == [("main", "record", "E"), ("worker0", "wait", "E"), ("worker0", "start", "after"),
                         ("worker0", "end", "after")]


def test_a_wait_is_met_by_the_latest_recording_even_when_an_earlier_one_is_reached_after_it():
    """Recorded on worker1, then on worker0: main's wait holds for the second recording (the latest as of the wait),
    which workers-first reaches first, worker1 being held by a gate worker0 opens. Reaching the earlier recording
    after it must not take the event back: the wait is met and ``after`` runs (it is no deadlock)."""
    with NumpyBackend(mode="deferred", order="workers-first", trace=True) as backend:
        (w0, w1), event, gate, seen = backend.workers(2), backend.event("E"), backend.event("gate"), []
        backend.record(w0, gate)
        backend.wait(w1, gate)
        backend.record(w1, event)  # the first recording, reached last
        backend.record(w0, event)  # the second, the one main's wait holds for
        backend.wait(backend.main, event)
        backend.launch(backend.main, "after", seen.append, "main ran")
        backend.synchronize()
        reached = [(stream, what) for stream, what, name in backend.trace if name == "E"]
        assert reached == [("worker0", "record"), ("worker1", "record"), ("main", "wait")]
        assert seen == ["main ran"] and event.recorded == event.completed == 2


def test_a_host_copy_is_made_in_stream_order_and_on_the_caller_when_nothing_is_queued(monkeypatch):
    """``copy_in`` with threads: behind what is queued on its stream (a read queued before it sees the old values,
    one after it the new) and made before it returns; with nothing queued on any stream, made on the caller, no
    stream's thread woken for it. Planted: a copy always made on the caller fails the first half."""
    copies, copyto = [], np.copyto

    def traced(dst, src, casting):
        copies.append(threading.current_thread().name)
        copyto(dst, src, casting)

    monkeypatch.setattr(np, "copyto", traced)
    with NumpyBackend() as backend:
        main, (worker,) = backend.main, backend.workers(1)
        dst, seen, gate = np.zeros(3), [], threading.Event()
        backend.launch(main, "hold", gate.wait)
        backend.launch(main, "read", lambda: seen.append(dst.tolist()))
        copier = threading.Thread(target=backend.copy_in, args=(main, dst, np.ones(3)))
        copier.start()
        copier.join(0.05)
        assert copier.is_alive() and not dst.any(), "the copy ran before what was queued ahead of it"
        gate.set()
        copier.join()
        backend.launch(main, "read", lambda: seen.append(dst.tolist()))
        backend.synchronize()
        assert seen == [[0, 0, 0], [1, 1, 1]] and copies == ["leapfrog-main"]
        backend.copy_in(main, dst, np.full(3, 2.0))
        assert dst.tolist() == [2, 2, 2] and copies[1] == threading.current_thread().name
        gate.clear()
        backend.launch(worker, "hold", gate.wait)  # queued elsewhere: the copy goes to its own stream
        worker_gate = threading.Timer(0.05, gate.set)
        worker_gate.start()
        backend.copy_in(main, dst, np.full(3, 3.0))
        assert dst.tolist() == [3, 3, 3] and copies[2] == "leapfrog-main"
        worker_gate.join()
        backend.synchronize()


def test_deferred_mode_reports_a_deadlock():
    with NumpyBackend(mode="deferred") as backend:
        event = backend.event("E")
        (worker,) = backend.workers(1)
        backend.wait(worker, event)  # not recorded yet: a no-op
        backend.record(backend.main, event)
        backend.wait(backend.main, event)
        backend.synchronize()
        event.recorded += 1  # a recording that nothing will ever reach
        backend.wait(worker, event)
        with pytest.raises(RuntimeError, match="deadlock"):
            backend.synchronize()


@pytest.fixture
def blas_threads():
    """A function giving the thread counts of the BLAS libraries loaded, the backend's included."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    host_blas.load()  # the backend's BLAS, which it loads, is counted before too

    def counts():
        return {info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"}

    if not counts():
        pytest.skip("no BLAS library found by threadpoolctl")
    return counts


def test_blas_threads_are_set_and_restored(blas_threads):
    before = blas_threads()
    with NumpyBackend(blas_threads=1):
        assert blas_threads() == {1}
    assert blas_threads() == before


def test_blas_threads_of_backends_closed_in_any_order(blas_threads):
    """The newest open backend's setting holds; closing one that is not the newest keeps it; the threads
    from before come back when the last one closes, in either order, whatever older backend stays open."""
    import threadpoolctl

    below = NumpyBackend(blas_threads=1)  # open throughout, as one a caller forgot to close
    with threadpoolctl.threadpool_limits(3, user_api="blas"):  # threads from before that neither backend sets
        for last in ("first", "second"):
            first, second = NumpyBackend(blas_threads=1), None
            try:
                assert blas_threads() == {1}
                second = NumpyBackend(blas_threads=2)
                assert blas_threads() == {2}
                closing = (first, second) if last == "second" else (second, first)
                closing[0].close()
                assert blas_threads() == {2 if last == "second" else 1}
                closing[1].close()
                closing[1].close()  # twice: nothing more
                assert blas_threads() == {3}
            finally:
                first.close()
                if second is not None:
                    second.close()
    below.close()


def test_a_network_that_makes_its_backend_runs_one_blas_thread_per_stream(blas_threads):
    """As leapfrog-train's default: a backend made by name gets ``BLAS_THREADS``; one given is left as it is."""
    import threadpoolctl

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with MLP(SIZES, backend="numpy"):
            assert blas_threads() == {BLAS_THREADS} == {1}
        assert blas_threads() == {2}
        with NumpyBackend() as backend, MLP(SIZES, backend=backend):
            assert blas_threads() == {2}


def test_blas_threads_reach_the_products_blas_in_a_fresh_process():
    """Every product runs on the OpenBLAS of ``scipy-openblas32``, loaded on first use: the backend loads
    it before it sets the limit, which reaches only the libraries loaded by then."""
    code = ("import numpy as np, threadpoolctl\n"
            "from leapfrog_gpu import MLP, Sequential\n"
            "from leapfrog_gpu.backends.host import NumpyBackend\n"
            "with NumpyBackend(blas_threads=1) as backend:\n"
            "    net = MLP([4, 3, 2], backend=backend)\n"
            "    net.sgd_step(np.ones((4, 1)), np.ones((2, 1)), 0.1, Sequential())\n"
            "    net.synchronize()\n"
            "    print(sorted((i['filepath'].rsplit('/', 2)[-2], i['num_threads']) for i in "
            "threadpoolctl.threadpool_info() if i['user_api'] == 'blas'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    libraries = ast.literal_eval(done.stdout.splitlines()[-1])  # (folder, threads) of each BLAS loaded
    assert libraries and {threads for _, threads in libraries} == {1}, libraries


def test_auto_backend_is_visible(caplog):
    with caplog.at_level(logging.INFO, logger="leapfrog_gpu"):
        backend = get_backend("auto")
    try:
        expected = "cupy" if cuda_available() else "numpy"
        assert backend.name == expected
        assert f"chose '{expected}'" in caplog.text
        assert type(backend).__name__.lower().startswith(expected) and "Backend(" in repr(backend)
    finally:
        backend.close()


@pytest.mark.skipif(cuda_available(), reason="checks the error seen without a GPU")
def test_cupy_backend_without_a_gpu_says_what_to_do():
    with pytest.raises(RuntimeError, match="numpy"):
        get_backend("cupy")


def test_auto_says_once_why_an_installed_cupy_cannot_run(cupy_without_gpu, caplog):
    """CuPy installed, no usable GPU: ``auto`` runs on numpy and warns once (stderr, where logging is not
    configured) with CUDA's own error and the versions, not a silent fallback."""
    with caplog.at_level(logging.INFO, logger="leapfrog_gpu"):
        for _ in range(3):
            with get_backend("auto") as backend:
                assert backend.name == "numpy"
    warned = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert warned == [f"backend 'auto' runs on numpy: {CUDA_ANSWER}"]


def test_cupy_backend_without_cupy_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # not installed
    with pytest.raises(RuntimeError) as caught:
        get_backend("cupy")
    assert "pip install 'leapfrog_gpu[cuda12]' (in a checkout, pip install -e '.[cuda12]'" in str(caught.value)


@pytest.mark.parametrize("missing", ["headers", "nvrtc"])
def test_a_cupy_that_cannot_compile_kernels_says_what_is_missing(standin, monkeypatch, caplog, missing):
    """CuPy 14 with a GPU but without the CUDA headers (or NVRTC), which it finds through ``cuda.pathfinder``
    and needs only when the first kernel compiles: ``auto`` runs on numpy and says once what is missing and
    what brings it; ``cupy`` refuses with the same words."""
    from cuda import pathfinder

    from leapfrog_gpu import backends

    monkeypatch.setattr(backends, "_said", set())
    if missing == "headers":
        monkeypatch.setattr(pathfinder, "find_nvidia_header_directory", lambda name: None)
        words = "the CUDA runtime headers (cuda_runtime.h) not found"
    else:
        def not_found(name):
            raise pathfinder.DynamicLibNotFoundError(f"{name} not found")

        monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib", not_found)
        words = "NVRTC (libnvrtc) not found"
    why = (f"CuPy 14.2.0 cannot compile kernels here: {words}; pip install 'cupy-cuda13x[ctk]', which the "
           "leapfrog_gpu[cuda13] extra brings, or set CUDA_PATH to a CUDA toolkit")
    with caplog.at_level(logging.INFO, logger="leapfrog_gpu"):
        for _ in range(2):
            with get_backend("auto") as backend:
                assert backend.name == "numpy"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"backend 'auto' runs on numpy: {why}"]
    with pytest.raises(RuntimeError) as caught:
        get_backend("cupy")
    assert str(caught.value) == f"backend 'cupy' cannot run: {why}; use backend='numpy'"


def test_cupy_backend_says_what_cuda_answered(cupy_without_gpu):
    with pytest.raises(RuntimeError) as caught:
        get_backend("cupy")
    assert str(caught.value) == f"backend 'cupy' cannot run: {CUDA_ANSWER}; use backend='numpy'"


def test_nvtx_ranges_are_off_without_a_profiler_and_on_when_asked():
    from leapfrog_gpu.backends import annotate

    assert annotate.range("x") is annotate.range("y"), "without a profiler a range must be a shared no-op"
    code = (
        "import numpy as np; from leapfrog_gpu import MLP, Leapfrog; from leapfrog_gpu.backends import annotate;"
        "assert annotate.enabled and annotate.PROVIDER, annotate.PROVIDER;"
        "net = MLP([5, 7, 3], backend='numpy'); net.sgd_step(np.ones((5, 2)), np.zeros((3, 2)), 0.1, Leapfrog(2));"
        "net.close(); print(annotate.PROVIDER)"
    )
    env = {"LEAPFROG_NVTX": "1", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() in ("nvtx", "cupy.cuda.nvtx")


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason=NO_GPU)
def test_cupy_backend_streams_are_non_blocking():
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend:
        streams = [backend.main, *backend.workers(3)]
        assert all(s.ptr != 0 for s in streams), "the legacy null stream must not be used"
        assert len({s.ptr for s in streams}) == 4


def test_a_thousand_create_close_cycles_leak_nothing():
    before_threads, before = threading.active_count(), leapfrog_threads()  # others' in this process, if any
    for cycle in range(1000):
        with NumpyBackend() as backend:
            backend.workers(2)
            if cycle % 100 == 0:
                with MLP([3, 4, 2], backend=backend) as net:
                    net.sgd_step(np.ones(3), np.zeros(2), 0.1, Leapfrog(2))
    assert threading.active_count() == before_threads
    assert leapfrog_threads() == before
