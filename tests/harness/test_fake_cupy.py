"""The CuPy stand-in itself (tests/harness/fake_cupy): what it runs when, the blocking rules of CUDA's
streams, CuPy's strictness about host transfers, the pool's reuse of freed memory, and capture.

A race the stand-in must catch is shown to give a wrong result (or an error) under at least one of
its orders, and the same code with its wait to give the right one under all of them."""

import numpy as np
import pytest

from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source

ORDERS = ("main-first", "workers-first", "random")


def upload_then_double(cp, order, ordered, **stream_options):
    """``arange(6) * 2`` computed on a new stream from an upload on the null stream, the stream waiting
    for the upload when ``ordered``; run in ``order``."""
    cp.reset(order)
    stream = cp.cuda.Stream(**stream_options)
    a = cp.asarray(np.arange(6.0))  # on the null stream
    if ordered:
        stream.wait_event(cp.cuda.get_current_stream().record())
    with stream:
        b = cp.multiply(a, 2)
    return b.get(stream=stream)


# -- when work runs ---------------------------------------------------------------------------------


def test_nothing_runs_until_the_host_blocks(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    a = standin.zeros(4)
    standin.cuda.Device().synchronize()
    with stream:
        a.fill(3.0)
    assert standin.pending() == 1 and not stream.done
    stream.synchronize()
    assert standin.waits()[-1] == ("stream.synchronize", stream.ptr)
    assert a.get(stream=stream).tolist() == [3.0] * 4


def test_an_unordered_read_is_caught_and_an_event_orders_it(standin):
    assert any(not np.array_equal(upload_then_double(standin, o, False, non_blocking=True), np.arange(6.0) * 2)
               for o in ORDERS)
    for order in ORDERS:
        np.testing.assert_array_equal(upload_then_double(standin, order, True, non_blocking=True), np.arange(6.0) * 2)


def test_blocking_streams_and_the_null_stream_wait_for_each_other(standin):
    for order in ORDERS:  # a blocking stream waits for earlier null-stream work ...
        np.testing.assert_array_equal(upload_then_double(standin, order, False), np.arange(6.0) * 2)
        standin.reset(order)
        stream = standin.cuda.Stream()
        out = standin.zeros(3)
        standin.cuda.Device().synchronize()
        with stream:
            out.fill(7.0)
        assert out.get().tolist() == [7.0] * 3  # ... and the null stream for earlier blocking-stream work


def test_get_waits_for_its_own_stream_only(standin):
    standin.reset("workers-first")  # the order that leaves other streams for last
    main = standin.cuda.Stream(non_blocking=True)
    a = standin.zeros(3)
    standin.cuda.Device().synchronize()
    with main:
        a.fill(1.0)
    standin.zeros(2).get()  # on the null stream
    assert not main.done
    assert a.get(stream=main).tolist() == [1.0] * 3


def test_an_event_never_recorded_is_complete_and_wait_takes_the_latest_recording(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    event = standin.cuda.Event()
    assert event.done
    stream.wait_event(event)  # no-op
    a = standin.zeros(2)
    event.record()
    stream.wait_event(event)
    with stream:
        b = a + 1
    assert b.get(stream=stream).tolist() == [1.0, 1.0]


def test_elapsed_time_needs_timing_and_complete_events(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    start, end = standin.cuda.Event(), standin.cuda.Event()
    start.record(stream)
    with stream:
        standin.ones(1000).sum()
    end.record(stream)
    with pytest.raises(standin.CUDARuntimeError, match="cudaErrorNotReady"):
        standin.cuda.get_elapsed_time(start, end)
    end.synchronize()
    assert standin.cuda.get_elapsed_time(start, end) >= 0
    untimed = standin.cuda.Event(disable_timing=True)
    untimed.record(stream)
    untimed.synchronize()
    with pytest.raises(standin.CUDARuntimeError, match="cudaErrorInvalidResourceHandle"):
        standin.cuda.get_elapsed_time(start, untimed)


def test_priorities_are_clamped_to_the_device_range(standin):
    least, greatest = standin.PRIORITY_RANGE
    assert standin.cuda.Stream(priority=-100).priority == greatest
    assert standin.cuda.Stream(priority=100).priority == least
    assert standin.cuda.Stream().priority == 0 and standin.cuda.Stream.null.priority == 0


# -- host transfers and arrays ----------------------------------------------------------------------


def test_set_and_get_are_as_strict_as_cupy(standin):
    a = standin.zeros((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="float64 array cannot be set to float32 array"):
        a.set(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"Shape mismatch. Old shape: \(2, 3\), new shape: \(3, 2\)"):
        a.set(np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="Only numpy.ndarray can be set"):
        a.set([[0.0] * 3] * 2)
    with pytest.raises(TypeError, match="float64 array cannot be obtained from float32 array"):
        a.get(out=np.zeros((2, 3)))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)
    with pytest.raises(TypeError, match="Unsupported type"):
        standin.add(a, np.ones((2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="basic indexing only"):
        a[[0, 1]]


def test_set_reads_pinned_memory_when_the_copy_runs_and_pageable_memory_at_once(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    pinned = np.frombuffer(standin.cuda.alloc_pinned_memory(3 * 8), np.float64, 3)
    pageable = np.zeros(3)
    a, b = standin.empty(3), standin.empty(3)
    pinned[...] = pageable[...] = 1.0
    a.set(pinned, stream=stream)
    b.set(pageable, stream=stream)
    pinned[...] = pageable[...] = 2.0  # before the copies ran: only the pinned one sees it
    assert a.get(stream=stream).tolist() == [2.0] * 3
    assert b.get(stream=stream).tolist() == [1.0] * 3


def test_operations_go_on_the_current_stream_and_views_share_memory(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    a = standin.asarray(np.arange(12.0).reshape(3, 4))
    standin.cuda.Device().synchronize()
    with stream:
        a[1:, ::2] = 0.0
        total = a.T.sum(axis=0)
        c = a.copy().reshape(4, 3)
    assert [op for op in standin.trace() if op[0] == "launch"] == []  # no kernels: these are CuPy calls
    assert standin.pending() >= 3
    want = np.arange(12.0).reshape(3, 4)
    want[1:, ::2] = 0.0
    np.testing.assert_array_equal(total.get(stream=stream), want.sum(axis=1))
    np.testing.assert_array_equal(c.get(stream=stream), want.reshape(4, 3))
    assert float(a[0, 1]) == 1.0 and a[2].shape == (4,)


def test_eye_concatenate_swapaxes_and_matmul_are_cupys_and_go_on_the_current_stream(standin):
    """What the gated cells' scans call: ``cupy.eye``, ``cupy.concatenate``, ``ndarray.swapaxes`` (a view) and ``@``
    (cuBLAS), each enqueued on the current stream and equal to NumPy's."""
    stream = standin.cuda.Stream(non_blocking=True)
    host = np.arange(24.0).reshape(2, 3, 4)
    a = standin.asarray(host)
    standin.cuda.Device().synchronize()
    with stream:
        eye = standin.eye(3, dtype=np.float32)
        shifted = standin.eye(3, 4, k=1)
        joined = standin.concatenate([a[:, :1], a], axis=1)
        flat = standin.concatenate([a[0], a[1, :1]], axis=None)
        swapped = a.swapaxes(-1, -2)
        product = swapped @ a
    assert standin.pending() >= 6 and swapped._alloc is a._alloc
    np.testing.assert_array_equal(eye.get(stream=stream), np.eye(3, dtype=np.float32))
    assert eye.dtype == np.float32 and shifted.dtype == np.float64
    np.testing.assert_array_equal(shifted.get(stream=stream), np.eye(3, 4, k=1))
    np.testing.assert_array_equal(joined.get(stream=stream), np.concatenate([host[:, :1], host], axis=1))
    np.testing.assert_array_equal(flat.get(stream=stream), np.concatenate([host[0], host[1, :1]], axis=None))
    np.testing.assert_array_equal(product.get(stream=stream), host.swapaxes(-1, -2) @ host)
    with pytest.raises(ValueError):
        standin.concatenate([a, a[:, :, :1]], axis=1)
    with pytest.raises(TypeError, match="only takes `out` or `dtype`"):
        standin.concatenate([a, a], out=standin.empty((4, 3, 4)), dtype=np.float32)
    with pytest.raises(TypeError, match="expected cupy.ndarray"):
        standin.concatenate([a, host])


# -- the pool ---------------------------------------------------------------------------------------


def test_freed_memory_is_reused_on_the_stream_that_allocated_it(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    a = standin.zeros(100)
    chunk = a._alloc.chunk
    del a
    assert standin.zeros(100)._alloc.chunk is chunk  # the null stream gets it back
    with stream:
        assert standin.zeros(100)._alloc.chunk is not chunk  # another stream does not


def test_freed_memory_is_poisoned_before_it_is_reused(standin):
    """What a freed array held is gone once its stream reaches the free: an ``empty`` array that gets the
    same memory holds every byte 0xFF (NaN in float64), not the old values."""
    a = standin.full(100, 3.0)
    chunk = a._alloc.chunk
    del a
    b = standin.empty(100)
    assert b._alloc.chunk is chunk
    got = b.get()
    assert np.isnan(got).all() and (got.view(np.uint8) == 0xFF).all(), got[:4]


def test_memory_freed_while_another_stream_uses_it_is_caught(standin):
    """Allocated on the null stream, used on a non-blocking stream, dropped before that work ran."""
    def use_then_drop(order, synchronize):
        standin.reset(order)
        stream = standin.cuda.Stream(non_blocking=True)
        a, out = standin.ones(10), standin.zeros(10)
        standin.cuda.Device().synchronize()
        with stream:
            standin.multiply(a, 2, out=out)
        if synchronize:
            stream.synchronize()
        del a
        return out.get(stream=stream)

    errors = 0
    for order in ORDERS:
        np.testing.assert_array_equal(use_then_drop(order, True), np.full(10, 2.0))
        try:
            use_then_drop(order, False)
        except standin.UseAfterFreeError as error:
            assert "keep the array alive" in str(error)
            errors += 1
    assert errors >= 1


# -- kernels and capture ----------------------------------------------------------------------------


def elementwise(cp):
    module = cp.RawModule(code=kernel_source("elementwise.cu"), options=launch.compile_options(()))
    return module.get_function("delta_hidden_f64"), module.get_function("sgd_update_f64")


def test_a_numpy_array_is_no_kernel_argument(standin):
    delta_hidden, _ = elementwise(standin)
    with pytest.raises(TypeError, match="Only numpy.ndarrays of size one can be passed by value"):
        delta_hidden((1,), (32,), (standin.zeros(4), np.zeros(4), np.int64(4)))


def capture_two_streams(cp, join=True):
    """A graph over two streams: u *= v on the first; p -= 0.5 u on the second, behind an event recorded
    after that (``join``) or before it; q -= p on the first again, behind the second's event."""
    delta_hidden, sgd_update = elementwise(cp)
    origin, worker = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    u, v, p, q = (cp.zeros(5) for _ in range(4))
    half, one = cp.asarray([0.5, 0.0]), cp.asarray([1.0, 0.0])  # sgd_update's step controls: scale, refusal
    size, grid, block = np.int64(5), (1, 1, 1), (32, 1, 1)
    cp.cuda.Device().synchronize()
    origin.begin_capture()
    early = origin.record()
    with origin:
        delta_hidden(grid, block, (u, v, size))
    worker.wait_event(origin.record() if join else early)
    with worker:
        sgd_update(grid, block, (p, u, half, size))
    origin.wait_event(worker.record())
    with origin:
        sgd_update(grid, block, (q, p, one, size))
    graph = origin.end_capture()
    graph.steps = (half, one)  # alive as long as the graph, unlike the buffers
    return graph, origin, (u, v, p, q)


def replay(cp, graph, stream, buffers, values):
    for buffer, value in zip(buffers, values):
        buffer.set(value, stream=stream)
    graph.launch(stream)
    return [buffer.get(stream=stream) for buffer in buffers]


def expected(values):
    u, v, p, q = (value.copy() for value in values)
    u *= v
    p -= 0.5 * u
    q -= p
    return [u, v, p, q]


def test_a_captured_graph_replays_kernels_on_two_streams_with_new_inputs(standin):
    graph, origin, buffers = capture_two_streams(standin)
    assert standin.pending() == 0  # captured, not run
    rng = np.random.default_rng(0)
    for _ in range(2):  # launched twice, with other inputs: the graph reads the buffers anew
        values = [rng.standard_normal(5) for _ in buffers]
        for got, want in zip(replay(standin, graph, origin, buffers, values), expected(values)):
            np.testing.assert_allclose(got, want, rtol=1e-15)


def test_the_trace_names_the_stream_a_captured_wait_waits_for(standin):
    start = len(standin.trace())
    _, origin, _ = capture_two_streams(standin)
    waits = [(stream, source) for kind, stream, source in standin.trace()[start:] if kind == "wait"]
    (worker, fork), (join, joined) = waits
    assert fork == origin.ptr and join == origin.ptr and joined == worker != origin.ptr


def test_a_missing_edge_inside_a_graph_is_caught(standin):
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(5) for _ in range(4)]
    wrong = 0
    for order in ORDERS:
        standin.reset(order)
        graph, origin, buffers = capture_two_streams(standin, join=False)
        got = replay(standin, graph, origin, buffers, values)
        wrong += not all(np.allclose(a, b) for a, b in zip(got, expected(values)))
    assert wrong >= 1


def test_capture_refuses_what_cupy_refuses(standin):
    stream = standin.cuda.Stream(non_blocking=True)
    a = standin.zeros((3, 3))
    with pytest.raises(RuntimeError, match="cannot capture on the default"):
        standin.cuda.Stream.null.begin_capture()
    stream.begin_capture()
    with stream:
        with pytest.raises(NotImplementedError, match="calling cuBLAS API during stream capture is currently unsupported"):
            standin.matmul(a, a, out=a)
        with pytest.raises(standin.CaptureAllocationError, match="allocate every buffer before begin_capture"):
            a.copy()
        with pytest.raises(RuntimeError, match="the current stream is capturing, so D2H transfers are disallowed"):
            a.get()
        with pytest.raises(RuntimeError, match="the current stream is capturing, so H2D transfers are disallowed"):
            a.set(np.zeros((3, 3)))
        with pytest.raises(standin.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            stream.synchronize()
        with pytest.raises(standin.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            standin.cuda.Device().synchronize()
        with pytest.raises(standin.CUDARuntimeError, match="cudaErrorStreamCaptureUnsupported"):
            stream.record().synchronize()
        outside = standin.cuda.Event()
        outside.record(standin.cuda.Stream.null)
        with pytest.raises(RuntimeError, match="recorded outside the capture"):
            stream.wait_event(outside)
        a.fill(1.0)  # a kernel: captured
    stream.end_capture()
    standin.matmul(a, a, out=a)  # fine again once the capture has ended


def test_a_fork_that_is_not_joined_back_ends_the_capture_with_an_error(standin):
    origin, worker = standin.cuda.Stream(non_blocking=True), standin.cuda.Stream(non_blocking=True)
    a = standin.zeros(3)
    origin.begin_capture()
    worker.wait_event(origin.record())
    with worker:
        a.fill(2.0)
    with pytest.raises(standin.CUDARuntimeError, match="cudaErrorStreamCaptureUnjoined"):
        origin.end_capture()
    assert not origin.is_capturing() and not worker.is_capturing()


def test_an_event_recorded_in_an_ended_capture_cannot_be_waited_on(standin):
    origin, other = standin.cuda.Stream(non_blocking=True), standin.cuda.Stream(non_blocking=True)
    origin.begin_capture()
    event = origin.record()
    origin.end_capture()
    with pytest.raises(standin.CUDARuntimeError, match="capture that has ended"):
        other.wait_event(event)
    event.record(origin)  # recorded again, outside any capture: an ordinary event
    other.wait_event(event)
    event.synchronize()


def test_a_graph_does_not_keep_its_buffers_alive(standin):
    graph, origin, buffers = capture_two_streams(standin)
    del buffers
    standin.cuda.Stream.null.synchronize()  # the frees, on the null stream where the buffers were made
    graph.launch(origin)
    with pytest.raises(standin.UseAfterFreeError, match="a graph node captured on"):
        origin.synchronize()
