"""A network dropped without ``close()`` releases the backend it made by name once it is collected: the host
streams' threads end and the BLAS setting comes back (``NumpyBackend.release``, ``blas_limits``); on the CuPy
stand-in the backend, its streams and its cuBLAS handle go (``CupyBackend.release``). The release waits for
nothing, so a collection on a stream's own thread cannot hang; a backend given to a network stays the caller's.

A thread that never ends fails its test at a generous deadline (``ended``), not by a time it must beat."""

import gc
import inspect
import itertools
import threading
import time
import weakref

import numpy as np
import pytest
import threadpoolctl

import networks
from helpers import STANDIN_ORDERS, batch, install_standin
from leapfrog_gpu import MLP, RNN, Adam, DagNet, Leapfrog, reference
from leapfrog_gpu.backends import blas_limits, cuda
from leapfrog_gpu.backends.host import NumpyBackend

pytestmark = pytest.mark.timeout(240)  # a finalizer that waits hangs: the run goes on
DEADLINE = 60.0
"""Seconds to wait for threads that must end: a bound that only a thread that never ends reaches."""
NETWORKS = 50
KINDS = {"MLP": MLP, "RNN": RNN, "DagNet": DagNet}


def ended(threads):
    """Collect garbage and join ``threads`` until each has ended, or ``DEADLINE`` has passed; those still alive."""
    deadline = time.monotonic() + DEADLINE
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        gc.collect()
        for thread in threads:
            thread.join(0.05)
    return [t.name for t in threads if t.is_alive()]


def blas_threads():
    return {info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"}


@pytest.fixture
def three_blas_threads():
    """BLAS at 3 threads (what no backend here sets) for the test, with the backend's BLAS library loaded."""
    NumpyBackend().close()  # loads it: a limit reaches only the libraries loaded by then
    if not blas_threads():
        pytest.skip("no BLAS library found by threadpoolctl")
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        yield


def test_networks_dropped_unclosed_end_their_threads_and_give_blas_back(network_name, three_blas_threads):
    before, count = set(threading.enumerate()), threading.active_count()
    x, y = networks.network_batch(network_name)
    for _ in range(NETWORKS):
        net = networks.network(network_name, "numpy")  # the one before it is dropped here, its step queued
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert blas_threads() == {1}
    net.synchronize()  # the last is collected on this thread, which gives its BLAS setting back (blas_limits)
    del net
    gc.collect()
    left = [t for t in threading.enumerate() if t not in before]
    assert all(t.name.startswith("leapfrog-") for t in left)
    assert ended(left) == []
    assert threading.active_count() <= count  # == but for a thread from before that ended meanwhile
    # A network dropped before the last may be freed on its stream thread after the last is: its ticket, then the
    # newest, comes off at this thread's next backend made or closed (blas_limits), as docs/design.md says.
    NumpyBackend(blas_threads=1).close()
    assert blas_threads() == {3}


def test_a_network_dropped_with_its_step_queued_ends_its_threads_with_no_collection(network_name,
                                                                                      three_blas_threads):
    """Collections off, its backend holds it till its step has run (``NumpyBackend.keep``: the operations of an
    RNN or a DagNet read it as they run), then it goes, and with it the threads: no plan holds it in a reference
    cycle. It goes on a stream thread, so its BLAS setting comes back at this thread's next backend made or
    closed."""
    x, y = networks.network_batch(network_name)
    net = networks.network(network_name, "numpy")
    backend, gate, freed, step = net.backend, threading.Event(), [], Leapfrog(2, fused=True)
    net.sgd_step(x, y, 0.1, step)  # the first makes the step's plan, which waits for what is queued
    weakref.finalize(net, freed.append, True)
    gc.disable()
    try:
        backend.launch(backend.workers(1)[0], "gate", gate.wait)  # the step's worker operations queue behind it
        net.sgd_step(x, y, 0.1, step)
        threads = [s.thread for s in backend._streams]
        del net
        assert freed == []
        gate.set()
        for thread in threads:
            thread.join(DEADLINE)
        assert [t.name for t in threads if t.is_alive()] == []
        assert freed == [True]
    finally:
        gc.enable()
    NumpyBackend(blas_threads=2).close()
    assert blas_threads() == {3}


@pytest.mark.parametrize("backend_name", ["numpy", "cupy"])
def test_a_network_whose_step_failed_goes_with_its_threads_once_dropped_with_no_collection(network_name, backend_name,
                                                                                          three_blas_threads,
                                                                                          monkeypatch):
    """An operation that raised on a stream, its error raised by ``synchronize()`` and caught: the error's traceback
    holds the frames it went through, the network's among them; the frame that re-raised it must not hold it (a
    cycle that kept the network, its threads and its BLAS setting until a collection). On the host and on the
    CuPy stand-in."""
    if backend_name == "cupy":
        install_standin(monkeypatch, STANDIN_ORDERS[0])
    x, y = networks.network_batch(network_name)
    net = networks.network(network_name, backend_name)
    net.sgd_step(x, y, 0.1, Leapfrog(2))

    def fail():
        raise ArithmeticError("an operation that failed")

    net.backend.launch(net.backend.workers(1)[0], "fail", fail)
    gc.disable()
    try:
        try:  # not pytest.raises, whose record of the error would hold the network
            net.synchronize()
        except ArithmeticError as error:
            raised = str(error)
        assert raised == "an operation that failed"
        dropped, threads = weakref.ref(net), [s.thread for s in net.backend._streams if backend_name == "numpy"]
        del net
        assert dropped() is None
        for thread in threads:
            thread.join(DEADLINE)
        assert [t.name for t in threads if t.is_alive()] == []
    finally:
        gc.enable()
    assert blas_threads() == {3}


@pytest.mark.parametrize("name, schedule", [(name, cls) for name in networks.NAMES for cls in KINDS[name].SCHEDULES])
def test_a_dropped_network_is_held_until_its_queued_step_has_run(name, schedule):
    """Every schedule's fused step, queued on a deferred backend the network was given, then the network dropped
    and collected: the backend holds it until ``synchronize()`` has run that step, which raises nothing (an
    operation that read the network after it went would raise ReferenceError there), and then lets it go."""
    x, y = networks.network_batch(name)
    options = {"k": 2} if "k" in inspect.signature(schedule).parameters else {}
    with NumpyBackend(mode="deferred") as backend:
        net = networks.network(name, backend)
        net.train_step(x, y, Adam(), schedule(fused=True, **options))
        dropped = weakref.ref(net)
        del net
        gc.collect()
        assert dropped() is not None
        backend.synchronize()
        assert dropped() is None


def test_a_network_freed_on_a_stream_thread_releases_its_backend_without_a_wait(three_blas_threads):
    """An operation on the network's own worker drops its last reference: its release runs on that thread, in
    the middle of that operation (a release that waited for the operation would hang)."""
    x, y = networks.network_batch("DagNet")
    net = networks.network("DagNet", "numpy")
    net.sgd_step(x, y, 0.1, Leapfrog(2))
    net.synchronize()
    backend, threads = net.backend, [s.thread for s in net.backend._streams]
    where = []
    weakref.finalize(net, lambda: where.append(threading.current_thread().name))
    gate, dropped, last = threading.Event(), threading.Event(), [net]
    del net
    worker = backend.workers(1)[0]
    backend.launch(worker, "gate", gate.wait)
    backend.launch(worker, "drop", last.clear)
    backend.launch(worker, "dropped", dropped.set)
    gate.set()
    assert dropped.wait(DEADLINE), "the worker's operation did not return: its release waits"
    assert ended(threads) == []
    assert where == ["leapfrog-worker0"]
    assert backend.closed
    assert blas_threads() == {1}  # given back on a thread that threadpoolctl does not heed: kept for this one
    NumpyBackend(blas_threads=2).close()  # this thread's next hold and release take it off
    assert blas_threads() == {3}


def test_close_twice_then_collect(three_blas_threads):
    net = MLP([3, 4, 2], backend="numpy")
    net.sgd_step(np.ones(3), np.zeros(2), 0.1, Leapfrog(2))
    threads = [s.thread for s in net.backend._streams]
    net.close()
    net.close()
    assert net.backend.closed and not any(t.is_alive() for t in threads)
    assert blas_threads() == {3}
    del net
    gc.collect()
    assert blas_threads() == {3}


def test_an_interrupt_as_a_stream_thread_starts_leaves_no_thread_after_close(monkeypatch):
    """Ctrl-C lands in ``Thread.start``'s wait once the new thread runs (simulated: raised right after the real
    start): that stream is the backend's all the same, and ``close()`` ends its thread."""
    start, threads = threading.Thread.start, []

    def interrupted(thread):
        start(thread)
        if thread.name == "leapfrog-worker1":
            threads.append(thread)
            raise KeyboardInterrupt

    net = MLP([4, 8, 8, 3], backend="numpy")
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        net.sgd_step(np.ones((4, 2)), np.ones((3, 2)), 0.1, Leapfrog(2))
    monkeypatch.undo()
    net.close()
    assert threads and ended(threads) == []


def test_a_given_backend_stays_open_and_usable_when_its_network_is_collected():
    x, y = batch([3, 4, 2], 2)
    with NumpyBackend() as backend:
        net = MLP([3, 4, 2], backend=backend)
        net.sgd_step(x, y, 0.1, Leapfrog(2))
        collected = weakref.ref(net)
        del net
        backend.synchronize()  # its queued step holds it till then
        assert collected() is None
        assert not backend.closed and all(s.thread.is_alive() for s in backend._streams)
        with MLP([3, 4, 2], dtype="float64", seed=1, backend=backend) as other:
            weights, biases = [np.array(w) for w in other.weights], [np.array(b) for b in other.biases]
            nabla_b, nabla_w = other.backprop(x, y, Leapfrog(2))
        want_b, want_w = reference.backprop(weights, biases, x, y, "sigmoid", other.cost, other.output_activation)
        for got, want in zip(nabla_b + nabla_w, want_b + want_w):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_a_backend_dropped_unclosed_runs_what_it_queued_then_ends_its_threads():
    """A backend one made and dropped without ``close()``, with work queued behind a gate: the work runs once the
    gate opens, and then the backend is freed, with no collection, and every thread of its ends (a thread that
    held its backend would keep it, and itself, forever)."""
    gc.disable()
    try:
        gate, ran = threading.Event(), []
        backend = NumpyBackend()
        workers = backend.workers(2)
        backend.launch(workers[0], "gated", gate.wait)
        backend.launch(workers[0], "after the gate", ran.append, "ran")
        threads, freed = [s.thread for s in backend._streams], weakref.ref(backend)
        del backend, workers
        assert freed() is not None and not ran  # its queued work holds it
        gate.set()
        deadline = time.monotonic() + DEADLINE
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0))
        assert [t.name for t in threads if t.is_alive()] == [] and ran == ["ran"] and freed() is None
    finally:
        gc.enable()


def test_a_backend_released_is_stopped_once_what_it_queued_has_run():
    """``release()`` returns at once, the backend closed; ``stopped`` once its threads, done with the work queued
    before it, have ended (a communicator gives the backend's duplicate to another backend then, not before)."""
    gate = threading.Event()
    backend = NumpyBackend()
    backend.launch(backend.comm_stream(), "gated", gate.wait)
    assert not backend.stopped
    backend.release()
    assert backend.closed and not backend.stopped
    gate.set()
    assert ended([s.thread for s in backend._streams]) == []
    assert backend.stopped


# -- blas_limits: a release never waits, and the threads come back on the thread that set them -----------


def test_a_release_inside_a_hold_on_its_thread_neither_hangs_nor_loses_the_threads(three_blas_threads, monkeypatch):
    """As a collection inside ``hold`` that frees a network: the release finds the stack taken by this very
    thread; the hold takes the ticket off as it lets go, and the threads from before come back at the end."""
    first = blas_limits.hold(1)
    limits = threadpoolctl.threadpool_limits

    def collected_meanwhile(*args, **kwargs):
        limiter = limits(*args, **kwargs)  # the threads before it (1) read and 2 set: then the collection
        blas_limits.release(first)
        return limiter

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", collected_meanwhile)
    second = blas_limits.hold(2)
    monkeypatch.undo()
    assert blas_threads() == {2}
    blas_limits.release(second)
    assert blas_threads() == {3}


def elsewhere(call, *args):
    """``call(*args)`` on a thread of its own, waited for."""
    thread = threading.Thread(target=call, args=args)
    thread.start()
    thread.join()


def test_the_newest_ticket_released_on_another_thread_comes_off_on_its_own(three_blas_threads):
    """threadpoolctl heeds only the thread that set OpenBLAS's threads: a release elsewhere waits for it."""
    below, newest = blas_limits.hold(1), blas_limits.hold(2)
    for ticket in (below, newest):
        elsewhere(blas_limits.release, ticket)
    assert blas_threads() == {2}
    NumpyBackend(blas_threads=1).close()
    assert blas_threads() == {3}


def test_threads_handed_up_to_a_holder_on_another_thread_come_back_on_the_thread_that_set_them(three_blas_threads):
    """This thread holds a ticket; a stream thread releases it (a network freed there) while it is the newest; another
    thread then holds and releases one above it, which now restores what this thread's ticket found. That restore is
    this thread's to make: its next hold or release brings the threads it set back (made on the other thread, it
    was never heeded here, and the threads stayed at 1 for good)."""
    elsewhere(blas_limits.release, blas_limits.hold(1))
    elsewhere(lambda: blas_limits.release(blas_limits.hold(2)))
    assert blas_threads() == {1}
    NumpyBackend(blas_threads=1).close()
    assert blas_threads() == {3}


def test_a_stack_released_elsewhere_comes_off_in_its_order_where_the_setting_is_process_wide(monkeypatch):
    """Where the BLAS threads are one setting for the process (MKL, BLIS): a ticket held here, one held above it on
    thread X, both released on a third thread; this thread's next hold and release, then X's, leave the setting
    from before either (restored out of order, X's limiter would bring back this thread's setting last)."""
    setting = ["before"]

    class Limiter:  # threadpoolctl's, on one process-wide setting
        def __init__(self, threads, user_api=None):
            self.found, setting[0] = setting[0], threads

        def restore_original_limits(self):
            setting[0] = self.found

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", Limiter)
    mine, above, go = blas_limits.hold(1), [], threading.Event()

    def x():
        above.append(blas_limits.hold(2))
        go.wait()
        blas_limits.release(blas_limits.hold(4))

    thread_x = threading.Thread(target=x)
    thread_x.start()
    while not above:
        time.sleep(0.001)
    for ticket in (above[0], mine):
        elsewhere(blas_limits.release, ticket)
    blas_limits.release(blas_limits.hold(3))
    go.set()
    thread_x.join()
    assert setting == ["before"]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_libraries_loaded_between_holds_get_their_threads_back_in_any_order_of_release(monkeypatch, order):
    """Three holds, a BLAS library loaded before each of the last two (Numba importing SciPy's OpenBLAS during a
    first Adam step): a library only the holders above knew gets its threads back however they are released
    (handed up, the released holder's limiter replaced the one above it, which alone knew that library)."""
    libraries = {"numpy": 3, "ours": 3}

    class Limiter:  # threadpoolctl's: each library loaded now set to ``threads``, its own setting found
        def __init__(self, threads, user_api=None):
            self.found = dict(libraries)
            libraries.update(dict.fromkeys(libraries, threads))

        def restore_original_limits(self):
            libraries.update(self.found)

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", Limiter)
    tickets = [blas_limits.hold(1)]
    for library, threads in (("scipy", 2), ("other", 4)):
        libraries[library] = threads
        tickets.append(blas_limits.hold(1))
    for place in order:
        blas_limits.release(tickets[place])
    assert libraries == {"numpy": 3, "ours": 3, "scipy": 2, "other": 4}


# -- the CuPy stand-in ------------------------------------------------------------------------------------


def test_cupy_networks_dropped_unclosed_free_their_backend_and_cublas_handle(standin):
    """Their backends are collected, and with them what CuPy frees as it collects (streams, events, graphs);
    the cuBLAS handle, whose destruction waits for the device, is
    destroyed by the next backend made or closed, once the device has run what was queued (the stand-in raises
    if memory a queued step uses went back to the pool first)."""
    x, y = batch([7, 13, 5, 3], 3)
    handles = len(standin.nvmath._handles)
    gone = []
    for graph in (False, True):
        net = MLP([7, 13, 5, 3], dtype="float64", backend="cupy")  # destroys the handle dropped before it
        for _ in range(2):
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=graph)
        gone += [weakref.ref(net), weakref.ref(net.backend)]  # the stand-in's device keeps every stream it made
        del net
        gc.collect()
        assert all(ref() is None for ref in gone)
        assert len(cuda._abandoned) == 1 and len(standin.nvmath._handles) == handles + 1
    with MLP([7, 13, 5, 3], dtype="float64", backend="cupy") as other:
        assert cuda._abandoned == [] and len(standin.nvmath._handles) == handles + 1  # its own
        other.sgd_step(x, y, 0.1, Leapfrog(2))
        other.synchronize()
    assert len(standin.nvmath._handles) == handles


def test_a_cupy_network_without_cublas_dropped_unclosed_has_the_next_backend_wait_for_the_device(
        standin_without_nvmath, monkeypatch):
    """Memory its streams' launches freed went back to pools kept by those streams' handles, which the driver may
    give a stream made later: with no cuBLAS handle to destroy either, the next backend made waits for the device
    before it makes a stream."""
    x, y = batch([7, 13, 5, 3], 3)
    net = MLP([7, 13, 5, 3], dtype="float64", backend="cupy")
    net.sgd_step(x, y, 0.1, Leapfrog(2))
    del net
    gc.collect()
    assert cuda._abandoned == [None]
    streams, waits = standin_without_nvmath.queues.device.streams, []
    wait = standin_without_nvmath.cuda.Device.synchronize
    monkeypatch.setattr(standin_without_nvmath.cuda.Device, "synchronize",
                        lambda self: (waits.append(len(streams)), wait(self))[1])
    made = len(streams)
    with cuda.CupyBackend() as other:
        assert cuda._abandoned == [] and waits[:1] == [made] and streams[-1] is other.main


@pytest.mark.parametrize("name", ["RNN", "DagNet"])
def test_cupy_recurrent_and_dag_networks_dropped_unclosed_go_with_no_collection(standin, name):
    """Their plans refer to them weakly, and a launch reads them only as it is enqueued: dropped with steps
    queued, they go at once, collections off; the next backend made runs what was queued and destroys the
    cuBLAS handle (the stand-in raises if memory a queued step uses went back to the pool first)."""
    x, y = networks.network_batch(name)
    handles = len(standin.nvmath._handles)
    net = networks.network(name, "cupy", dtype="float64")
    gc.disable()
    try:
        for _ in range(2):
            net.train_step(x, y, Adam(), Leapfrog(2, fused=True))
        dropped = weakref.ref(net)
        del net
        assert dropped() is None
    finally:
        gc.enable()
    with networks.network(name, "cupy", dtype="float64") as other:
        assert cuda._abandoned == []
        other.train_step(x, y, Adam(), Leapfrog(2, fused=True))
        other.synchronize()
    assert len(standin.nvmath._handles) == handles
