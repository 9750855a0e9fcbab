"""The capture rules of the CuPy backend's graph mode (docs/design.md §4), on the CuPy stand-in: the graph
is instantiated with node priorities, so the workers' nodes keep their streams' low priority inside it;
the capture runs in thread-local mode, so a call that may synchronize fails it instead of passing; and
a capture that cannot end is reported by the next ``synchronize()``, as the backend's docstring says,
not raised out of the step."""

import numpy as np
import pytest

from helpers import batch
from leapfrog_gpu import MLP, Leapfrog

SIZES = [7, 13, 5, 11, 3]


def cupy_backend():
    from leapfrog_gpu.backends.cuda import CupyBackend

    return CupyBackend()


def host(arrays):
    return [np.array(array.get()) for array in arrays]


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
