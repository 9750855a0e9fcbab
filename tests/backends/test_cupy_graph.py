"""Graph mode on the CuPy backend, in CI: on the CuPy stand-in (tests/harness/fake_cupy) under each of its
orders. Its kernels are the real ones on the CPU harness; its stream capture refuses what CuPy refuses
(cuBLAS, host transfers, synchronization) and allocations too; its graphs replay their nodes in an
adversarial order that respects only the captured edges, and its pool catches memory freed under them.

It checks the CuPy glue of graph mode: the capture succeeds (so nothing in it calls CuPy's cuBLAS,
allocates or copies from the host), the workers join it through events and are joined back, graph steps agree to
the bit with eager steps on the same (chain) kernels and with the reference, eta changes without a new
capture, check_finite needs no host round trip, a NumPy batch is staged outside the graph without
blocking the host, a launch refused during the capture leaves no graph, and a queued replay keeps what
it uses alive. And the capture rules (docs/design.md §4): the graph is instantiated with node priorities, so
the workers' nodes keep their streams' low priority inside it; the capture runs in thread-local mode, so a
call that may synchronize fails it instead of passing; and a capture that cannot end is reported by the next
``synchronize()``, as the backend's docstring says, not raised out of the step.
"""

import contextlib
import gc
import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest

from helpers import (GPU_SIZES, assert_graph_steps_are_bitwise_eager_steps, assert_graph_steps_follow_the_reference, batch,
                     batch_id, gpu, host, schedule_id)
from leapfrog_gpu import MLP, Leapfrog, NaumovScan, Sequential, reference

SIZES = [7, 13, 5, 11, 3]


def cupy_backend(chain="cublas"):
    from leapfrog_gpu.backends.cuda import CupyBackend

    return CupyBackend(chain=chain)


@pytest.fixture
def captures(monkeypatch):
    """The streams that began a capture, in order (on the stand-in a test installs)."""
    import fake_cupy

    begun, begin = [], fake_cupy.Stream.begin_capture

    def begin_capture(stream, mode=None):
        begun.append(stream)
        begin(stream, mode)

    monkeypatch.setattr(fake_cupy.Stream, "begin_capture", begin_capture)
    return begun


def graph_launches(standin, start=0):
    """Graph launches enqueued since the stand-in's trace held ``start`` entries."""
    return sum(1 for kind, _, name in standin.trace()[start:] if kind == "launch" and name == "graph")


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


@pytest.mark.parametrize("size", [1, 4], ids=batch_id)
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(3, fused=True), Sequential(fused=True)],
                         ids=schedule_id)
def test_graph_steps_are_bitwise_eager_steps_on_the_chain_kernels(standin, captures, schedule, size):
    with cupy_backend(chain="kernels") as cuda:
        want = train(MLP(SIZES, seed=4, backend=cuda), schedule, size, graph=False)
        net = MLP(SIZES, seed=4, backend=cuda)
        start = len(standin.trace())
        got = train(net, schedule, size, graph=True)
    assert len(captures) == 1 and graph_launches(standin, start) == 4  # the first step runs eagerly
    for step, (a, b) in enumerate(zip(want, got)):
        assert all(np.array_equal(p, q) for p, q in zip(a, b)), f"graph step {step} differs from the eager one"


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2), Leapfrog(2, fused=True)], ids=schedule_id)
def test_graph_steps_follow_the_reference(standin, schedule):
    with cupy_backend() as cuda, MLP(SIZES, activation="tanh", dtype="float64", seed=2, backend=cuda) as net:
        assert_graph_steps_follow_the_reference(net, schedule, 3)


def test_without_nvmath_the_capture_calls_no_cublas_and_allocates_nothing(standin_without_nvmath, captures,
                                                                          monkeypatch):
    """Without nvmath-python, on a backend whose eager steps use CuPy's cuBLAS, the graph steps run the
    chain on our kernels: the capture, in which the stand-in refuses any CuPy cuBLAS call, allocation or
    host copy, succeeds (a refusal would leave no graph and raise at synchronize()); the eager step did
    call cuBLAS."""
    standin = standin_without_nvmath
    calls, matmul = [], standin.matmul

    def counted(*args, **kwargs):
        calls.append(standin.cuda.get_current_stream().is_capturing())
        return matmul(*args, **kwargs)

    monkeypatch.setattr(standin, "matmul", counted)
    with cupy_backend() as cuda, MLP(SIZES, seed=1, backend=cuda) as net:
        x, y = batch(SIZES, 2, dtype=np.float32)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert calls == [False] * (2 * (len(SIZES) - 1) - 1)  # (2) for every layer, (5) below the last
        calls.clear()
        start = len(standin.trace())
        for _ in range(3):
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        net.synchronize()
        assert calls == [] and len(captures) == 1 and graph_launches(standin, start) == 2
        assert len(net.plan(2).captured) == 1
        assert cuda.ops.chain == "cublas"  # the eager chain is cuBLAS again once the capture is done


@pytest.mark.parametrize("plant", ["cublas", "allocation"])
def test_a_launch_refused_during_the_capture_leaves_no_graph(standin_without_nvmath, monkeypatch, plant):
    """What CuPy refuses during a capture (its cuBLAS: the chain left on it, without nvmath-python), or
    what the stand-in refuses (an allocation in the update), planted in the step: its eager run does the
    step, no graph is kept, the next synchronize() raises the refusal, and once the plant is gone the step
    is captured."""
    standin = standin_without_nvmath
    with cupy_backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        x, y = batch(SIZES, 3)
        with monkeypatch.context() as planted:
            if plant == "cublas":
                planted.setattr(cuda.ops, "capturable_chain", contextlib.nullcontext)
                error, message = NotImplementedError, "calling cuBLAS API during stream capture"
            else:
                update = cuda.ops.update
                planted.setattr(cuda.ops, "update", lambda w, nabla_w, b, nabla_b, step, scratch:
                                update(w, nabla_w.copy(), b, nabla_b, step, scratch))
                error, message = standin.CaptureAllocationError, "allocate every buffer before begin_capture"
            before = host(net.weights)
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
            with pytest.raises(error, match=message):
                net.synchronize()
            assert net.plan(3).captured == {}
            assert not all(np.array_equal(p, q) for p, q in zip(host(net.weights), before))  # the eager run
        net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        net.synchronize()
        assert len(net.plan(3).captured) == 1


def test_the_workers_join_the_capture_through_events_and_are_joined_back(standin):
    with cupy_backend() as cuda, MLP(SIZES, backend=cuda) as net:
        x, y = batch(SIZES, 2)
        start = len(standin.trace())
        net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        waits = [entry for entry in standin.trace()[start:] if entry[0] == "wait"]
        main, workers = cuda.main.ptr, {w.ptr for w in cuda.workers(2)}
    half = len(waits) // 2  # the eager step, then the capture of the same step
    assert half > 0 and waits[:half] == waits[half:]
    assert {stream for _, stream, source in waits if source == main} == workers
    assert {source for _, stream, source in waits if stream == main} == workers


def test_eta_changes_without_a_new_capture(standin, captures):
    with cupy_backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)
        before = host(net.weights)
        start = len(standin.trace())
        net.sgd_step(x, y, 0.0, Leapfrog(2), graph=True)
        assert all(np.array_equal(p, q) for p, q in zip(host(net.weights), before))  # eta = 0: no change
        nabla_b, nabla_w = reference.backprop(before, host(net.biases), x, y)
        net.sgd_step(x, y, 0.25, Leapfrog(2), graph=True)
        for got, w, g in zip(host(net.weights), before, nabla_w):
            np.testing.assert_allclose(got, w - 0.25 / 3 * g, rtol=1e-12, atol=1e-14)
        assert len(captures) == 1 and graph_launches(standin, start) == 2


def test_check_finite_refuses_the_update_without_a_host_round_trip(standin, captures):
    with cupy_backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda, check_finite=True,
                                     output_activation="identity") as net:
        x, y = batch(SIZES, 3)
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        weights, biases = host(net.weights), host(net.biases)
        broken = [w.copy() for w in weights]
        broken[-1][...] = np.finfo(np.float64).max  # finite, but z^L = w^L a^{L-1} + b^L overflows: nabla_w is Inf
        net.set_parameters(broken, biases)
        start = len(standin.waits())
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        blocked = standin.waits()[start:]
        # no flag read, no synchronization: the host only waited to reuse a staging buffer
        assert {what for what, _ in blocked} <= {"event.synchronize"}, blocked
        with pytest.raises(FloatingPointError, match=r"nabla_w\[\d\] holds NaN or Inf; update refused"):
            net.synchronize()
        assert all(np.array_equal(p, q, equal_nan=True) for p, q in zip(host(net.weights), broken))
        net.set_parameters(weights, biases)
        net.sgd_step(x, y, 0.1, Sequential(), graph=True)
        assert not all(np.array_equal(p, q) for p, q in zip(host(net.weights), weights))
        assert len(captures) == 1


def test_check_finite_with_graph_on_the_cupy_backend_stops_training_with_exit_3(standin, capsys):
    from leapfrog_gpu.tools.train import command as train

    argv = ["--backend", "cupy", "--hidden", "3x16", "--activation", "relu", "--cost", "quadratic", "--quiet",
            "--epochs", "1", "--lr", "1e20", "--check-finite", "--graph"]
    assert train.main(argv) == 3
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "holds NaN or Inf; update refused, parameters unchanged: try a smaller --lr" in err


def test_naumov_schedules_are_refused_on_cupy(standin, captures):
    with cupy_backend() as cuda, MLP(SIZES, backend=cuda) as net:
        with pytest.raises(ValueError, match=r"graph=True cannot capture NaumovScan.*cuBLAS"):
            net.sgd_step(*batch(SIZES, 2), 0.1, NaumovScan(), graph=True)
        assert captures == []


def test_a_numpy_batch_is_staged_outside_the_graph_without_blocking_the_host(standin):
    """Each replay reads the batch its step copied in (the stand-in refuses a host copy during a
    capture, as CuPy does: the copies are outside the graph), through two pinned buffers per shape, and
    the host runs ahead of the device: no stream or device synchronization, no read."""
    batches = [batch(SIZES, 2, seed=s) for s in range(4)]
    with cupy_backend() as cuda, MLP(SIZES, activation="tanh", dtype="float64", backend=cuda) as net:
        net.sgd_step(*batches[0], 0.5, Leapfrog(2), graph=True)  # captured
        weights, biases = host(net.weights), host(net.biases)
        start = len(standin.waits())
        for x, y in batches[1:]:
            net.sgd_step(x, y, 0.5, Leapfrog(2), graph=True)
        blocked = standin.waits()[start:]
        queued = standin.pending()
        got = host(net.weights + net.biases)
        assert sorted(cuda._staging) == sorted([((7, 2), "<f8"), ((3, 2), "<f8")])
    assert {what for what, _ in blocked} <= {"event.synchronize"}, blocked
    assert queued > 0  # the last steps were still queued when the last one returned
    for x, y in batches[1:]:
        nabla_b, nabla_w = reference.backprop(weights, biases, x, y, "tanh", net.cost, net.output_activation)
        weights = [w - 0.5 / 2 * g for w, g in zip(weights, nabla_w)]
        biases = [b - 0.5 / 2 * g for b, g in zip(biases, nabla_b)]
    for a, b in zip(got, weights + biases):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_a_dropped_network_keeps_what_its_queued_graph_steps_use(standin):
    """A network whose backend is not its own, dropped with replays queued: its plan (buffers, graph)
    and step controls go back to CuPy's pool only once the replays have run."""
    x, y = batch(SIZES, 3)
    with cupy_backend() as cuda:
        net = MLP(SIZES, dtype="float64", backend=cuda)
        for _ in range(3):
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        del net
        gc.collect()
        cuda.synchronize()  # the stand-in raises UseAfterFreeError if the pool got them back too early


def test_bench_graph_rows_on_cupy(standin, tmp_path):
    from leapfrog_gpu.tools.bench import command as bench

    argv = ["--backend", "cupy", "--sizes", "12", "--layers", "3", "--batch", "1,3", "--k", "2", "--graph",
            "--repeats", "2", "--warmup", "0", "--no-torch", "--json", str(tmp_path / "r.json")]
    with redirect_stdout(io.StringIO()):
        assert bench.main(argv) == 0
    records = json.loads((tmp_path / "r.json").read_text())["records"]
    assert {r["graph"] for r in records} == {False, True}
    assert all(r["device"] == standin.DEVICE_NAME and r["step_ms"]["median"] > 0 for r in records)


# -- the capture rules (docs/design.md §4): node priorities, thread-local mode, a capture that cannot end ----


def test_graph_nodes_run_at_the_priorities_of_the_streams_they_were_captured_on(standin):
    """The chain's nodes (main stream) at the device's highest priority, the workers' at its lowest, as in
    eager steps; a graph instantiated as CuPy does it (flags 0) runs every node at the main stream's."""
    with cupy_backend() as cuda, MLP(SIZES, backend=cuda) as net:
        x, y = batch(SIZES, 2)
        for _ in range(2):  # the eager run and the capture, then a launch
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        net.synchronize()
        main, workers = cuda.main.ptr, [worker.ptr for worker in cuda.workers(2)]
    priorities = {}
    for _, stream, priority in standin.node_runs():
        priorities.setdefault(stream, set()).add(priority)
    least, greatest = standin.PRIORITY_RANGE
    assert set(priorities) == {main, *workers}
    assert priorities[main] == {greatest}
    assert [priorities[worker] for worker in workers] == [{least}, {least}], (
        "the workers' nodes ran at the main stream's priority: the graph was instantiated without "
        "cudaGraphInstantiateFlagUseNodePriority")


def test_the_capture_is_thread_local_and_a_call_that_may_synchronize_fails_it(standin, monkeypatch):
    """An event synchronized inside the captured step (planted in the update): CuPy's default relaxed mode
    lets it pass silently (the graph holds no such wait); in thread-local mode it fails the capture, the
    next synchronize() says why, no graph is kept, and once the plant is gone the step is captured."""
    modes, begin = [], standin.Stream.begin_capture

    def begin_capture(stream, mode=None):
        modes.append(mode)
        begin(stream, mode)

    monkeypatch.setattr(standin.Stream, "begin_capture", begin_capture)
    with cupy_backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        x, y = batch(SIZES, 3)
        with monkeypatch.context() as planted:
            update = cuda.ops.update

            def update_that_waits(w, nabla_w, b, nabla_b, controls, scratch):
                standin.cuda.Event().synchronize()
                update(w, nabla_w, b, nabla_b, controls, scratch)

            planted.setattr(cuda.ops, "update", update_that_waits)
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
            with pytest.raises(standin.CUDARuntimeError, match="event.synchronize during a capture in thread-local"):
                net.synchronize()
            assert net.plan(3).captured == {}
        net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        net.synchronize()
        assert len(net.plan(3).captured) == 1
    assert modes == [standin.cuda.runtime.streamCaptureModeThreadLocal] * 2


def test_a_capture_that_cannot_end_is_reported_by_synchronize(standin, monkeypatch):
    """A side stream forked inside the captured step and never joined back (planted in the update):
    ``end_capture`` fails (cudaErrorStreamCaptureUnjoined); the step returns, the next synchronize() raises
    that error, no graph is kept, and the backend captures the step once the plant is gone."""
    with cupy_backend() as cuda, MLP(SIZES, dtype="float64", backend=cuda) as net:
        x, y = batch(SIZES, 3)
        side = standin.cuda.Stream(non_blocking=True)
        with monkeypatch.context() as planted:
            update = cuda.ops.update

            def update_with_a_fork(w, nabla_w, b, nabla_b, controls, scratch):
                update(w, nabla_w, b, nabla_b, controls, scratch)
                current = standin.cuda.get_current_stream()
                if current.is_capturing():
                    side.wait_event(current.record())
                    with side:
                        b[0:1].fill(0.0)

            planted.setattr(cuda.ops, "update", update_with_a_fork)
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)  # the eager run, then the capture that fails
            with pytest.raises(standin.CUDARuntimeError, match="cudaErrorStreamCaptureUnjoined"):
                net.synchronize()
            assert net.plan(3).captured == {}
        before = host(net.weights)
        for _ in range(2):
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
        net.synchronize()
        assert len(net.plan(3).captured) == 1
        assert not any(np.array_equal(p, q) for p, q in zip(host(net.weights), before))


def test_without_cuda_bindings_cupy_launches_the_graph_with_one_warning(standin, monkeypatch):
    """With ``cuda.bindings`` hidden, graph mode still runs: CuPy's own ``Graph.launch``, whose graph steps
    agree to the bit with eager steps on the same chain kernels; every node runs at the main stream's
    priority, which one warning (for all the captures of the process) says."""
    import sys
    import warnings

    from leapfrog_gpu import Sequential
    from leapfrog_gpu.backends import cuda_graph
    from leapfrog_gpu.backends.cuda import CupyBackend

    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", None)  # import raises ImportError
    monkeypatch.setattr(cuda_graph, "_warned", [])
    schedules = (Leapfrog(2), Sequential())
    x, y = batch(SIZES, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        taken = {}
        for graph in (False, True):
            with CupyBackend(chain="kernels") as cuda, MLP(SIZES, seed=3, backend=cuda) as net:
                for step in range(4):
                    net.sgd_step(x, y, 0.1 * (step + 1), schedules[step % 2], graph=graph)
                net.synchronize()
                taken[graph] = host(net.weights + net.biases)
                if graph:
                    assert len(net.plan(3).captured) == 2
                    main = cuda.main.ptr
    assert all(np.array_equal(p, q) for p, q in zip(taken[False], taken[True]))
    runs = standin.node_runs()
    assert runs and {priority for _, _, priority in runs} == {standin.PRIORITY_RANGE[1]}
    assert {stream for _, stream, _ in runs} != {main}  # the workers' nodes too, at the main stream's priority
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "node priorities are lost" in said[0] and "cuda-bindings" in said[0], said


# -- on a GPU: real stream capture ---------------------------------------------------------------------

@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 7, 32], ids=batch_id)
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(1), Leapfrog(2), Leapfrog(3, fused=True),
                                      Leapfrog(len(GPU_SIZES) + 1)], ids=schedule_id)
def test_graph_steps_on_the_gpu_are_bitwise_eager_steps_on_the_chain_kernels(schedule, size):
    """CUDA graphs replayed 20 times, eta changing: bitwise the eager steps on the same kernels."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend(chain="kernels") as cuda:
        assert_graph_steps_are_bitwise_eager_steps(cuda, schedule, size)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2, fused=True)], ids=schedule_id)
def test_graph_steps_on_the_gpu_follow_the_reference(schedule):
    """On a backend whose chain is cuBLAS (through nvmath-python in the graph too, or, without it, our
    kernels there), in float64."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cuda, MLP(GPU_SIZES, activation="tanh", dtype="float64", seed=2, backend=cuda) as net:
        assert_graph_steps_follow_the_reference(net, schedule, 5, rtol=1e-11)
