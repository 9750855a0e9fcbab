"""The recurrent network's schedules: Leapfrog(k) bitwise BPTT() over 30 SGD steps on real threads and in
the deferred orders, TimeScan against the float64 reference at every tau from 1 to 9, every removed wait
caught deterministically, the order of a traced step, the rounds each schedule reports against its formula,
the counters, and NaumovRNN's memory check."""

import functools

import numpy as np
import pytest

from helpers import batch
from leapfrog_gpu import BPTT, RNN, Leapfrog, NaumovRNN, Sequential, TimeScan, Wavefront
from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.core import plan
from leapfrog_gpu.core.handoff import Handoff
from leapfrog_gpu.core.triangular import ceil_log2
from leapfrog_gpu.rnn import reference

from helpers import rnn_lists

ETA = 0.3
SIZES = [5, 9, 7, 11, 3]


def same(got, want):
    return len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def trained(backend, schedule, sizes=SIZES, B=5, output="every", steps=30, tau=6):
    """Parameters after ``steps`` SGD steps enqueued back to back, then one more pass's gradients."""
    with RNN(sizes, output=output, seed=3, backend=backend) as net:
        for step in range(steps):
            x, y = batch(sizes, B, step, np.float32, tau=tau, output=output)
            net.sgd_step(x, y, ETA, schedule)
        nabla_b, nabla_w, nabla_u = rnn_lists(net.backprop(x, y, schedule))
        return net.weights + net.recurrent + net.biases + nabla_b + nabla_w + nabla_u


@pytest.mark.parametrize("output", ["last", "every"])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_leapfrog_is_bitwise_bptt_over_30_steps_on_host_threads(k, B, output):
    with get_backend("numpy", mode="threads") as backend:
        want = trained(backend, BPTT(), B=B, output=output)
        assert same(trained(backend, Leapfrog(k), B=B, output=output), want)
        assert same(trained(backend, Leapfrog(k, fused=True), B=B, output=output), want)
        assert same(trained(backend, Sequential(fused=True), B=B, output=output), want)


@pytest.mark.parametrize("order,seed", [("main-first", 0), ("workers-first", 0)] + [("random", s) for s in range(4)])
def test_leapfrog_is_bitwise_bptt_over_30_steps_in_every_deferred_order(order, seed):
    with get_backend("numpy", mode="serial") as backend:
        want = trained(backend, BPTT())
    for schedule in (Leapfrog(2), Leapfrog(3, fused=True)):
        with get_backend("numpy", mode="deferred", order=order, seed=seed) as backend:
            assert same(trained(backend, schedule), want), f"{schedule!r} in order {order}"


@pytest.mark.parametrize("kind", [Wavefront, TimeScan, NaumovRNN])
def test_the_scans_on_workers_are_bitwise_the_scans_on_the_main_stream(kind):
    want = trained("numpy", kind(k=0), steps=4)
    with get_backend("numpy", mode="threads") as backend:
        assert same(trained(backend, kind(k=2), steps=4), want)
        assert same(trained(backend, kind(k=3, fused=True), steps=4), want)
    with get_backend("numpy", mode="deferred", order="workers-first") as backend:
        assert same(trained(backend, kind(k=2, fused=True), steps=4), want)


@pytest.mark.parametrize("tau", range(1, 10))
@pytest.mark.parametrize("scan", ["doubling", "reduction"])
def test_timescan_matches_the_float64_reference_at_every_tau_up_to_9(scan, tau):
    """Each round of the scans builds and reads products A_t A_{t+s} within bounds set by tau, and a bound off
    by one is wrong at a single tau (the first round's products left out at tau = 3 alone): every tau from 1
    to 9, output at every step and at the last, against the plain BPTT of ``rnn.reference``."""
    sizes = [3, 4, 5, 2]
    for output in ("every", "last"):
        with RNN(sizes, output=output, dtype="float64", seed=tau, backend="numpy") as net:
            x, y = batch(sizes, 3, tau, np.float64, tau=tau, output=output)
            want = reference.backprop(net.weights, net.recurrent, net.biases, x, y, net.activation, net.cost,
                                      net.output_activation, output)
            got = rnn_lists(net.backprop(x, y, TimeScan(scan=scan)))
            for name, got_list, want_list in zip(("nabla_b", "nabla_w", "nabla_u"), got, want):
                assert len(got_list) == len(want_list)
                for l, (g, w) in enumerate(zip(got_list, want_list), start=2):
                    error = float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-300))  # u's: 0 at tau = 1
                    assert error <= 1e-10, f"{output}: {name}[{l}] relative error {error:.1e}"


# -- each wait removed, caught deterministically ----------------------------------------------------------
#
# The deferred host backend runs nothing until synchronize(), then interleaves the streams in a fixed order
# that starves one side for as long as the events allow; buffers start as NaN.


def deferred(order, schedule):
    with get_backend("numpy", mode="deferred", order=order) as backend:
        return trained(backend, schedule, steps=3)


@pytest.fixture(scope="module")
def bptt():
    return deferred("main-first", BPTT())


@pytest.mark.parametrize("schedule", [Leapfrog(2), TimeScan(k=2)], ids=repr)
def test_missing_read_after_write_wait_is_caught(monkeypatch, bptt, schedule):
    """Without 'worker waits E_l', a worker that runs first reads delta^l before the chain wrote it."""
    assert np.allclose(np.concatenate([a.ravel() for a in deferred("workers-first", schedule)]),
                       np.concatenate([a.ravel() for a in bptt]), rtol=1e-4, atol=1e-6)
    monkeypatch.setattr(Handoff, "wait", lambda self, worker, unit: None)
    got = deferred("workers-first", schedule)
    assert not np.allclose(np.concatenate([a.ravel() for a in got]), np.concatenate([a.ravel() for a in bptt]),
                           rtol=1e-4, atol=1e-6, equal_nan=False)


def test_missing_join_is_caught(monkeypatch, bptt):
    """Without the join, a main stream that runs first updates w with nabla_w not yet computed."""
    assert same(deferred("main-first", Leapfrog(2)), bptt)
    monkeypatch.setattr(Handoff, "join", lambda self: None)
    assert not same(deferred("main-first", Leapfrog(2)), bptt)


def test_fused_update_waiting_only_for_its_own_delta_is_caught(monkeypatch, bptt):
    """A fused worker must wait for delta^{l-1}, the chain's last read of w^l, not only E_l."""
    assert same(deferred("workers-first", Leapfrog(2, fused=True)), bptt)
    monkeypatch.setattr(plan.Plan, "last_reader", lambda self, l: l)
    assert not same(deferred("workers-first", Leapfrog(2, fused=True)), bptt)


def test_trace_of_a_leapfrog_step():
    k, L = 2, len(SIZES)
    with get_backend("numpy", mode="threads", trace=True) as backend:
        net = RNN(SIZES, seed=1, backend=backend)
        x, y = batch(SIZES, 3, 0, np.float32, tau=4, output="last")
        backend.trace.clear()
        net.sgd_step(x, y, ETA, Leapfrog(k))
        net.synchronize()
        trace = list(backend.trace)
    first_update = trace.index(("main", "start", "update[2]"))
    for l in range(2, L + 1):
        ready = trace.index(("main", "record", f"E_{l}"))
        for name in [f"nabla_b[{l}]", f"nabla_w[{l}]"] + ([f"nabla_u[{l}]"] if l < L else []):
            starts = [i for i, (stream, what, op) in enumerate(trace) if what == "start" and op == name]
            assert len(starts) == 1 and trace[starts[0]][0] == f"worker{l % k}", name
            assert ready < starts[0] < first_update, f"{name} ran outside E_{l} .. the join"
    for j in range(k):
        assert trace.index(("main", "wait", f"F_{j}")) < first_update


# -- rounds, counters, memory -------------------------------------------------------------------------------


FORMULAS = {
    "BPTT": (BPTT, lambda K, tau: K * tau),
    "Wavefront": (Wavefront, lambda K, tau: K + tau - 1),
    "TimeScan-doubling": (functools.partial(TimeScan, scan="doubling"), lambda K, tau: K * (1 + ceil_log2(tau))),
    "TimeScan-reduction": (functools.partial(TimeScan, scan="reduction"),  # up ceil(log2 tau), down one fewer
                           lambda K, tau: K * (1 + max(2 * ceil_log2(tau) - 1, 0))),
    "NaumovRNN": (NaumovRNN, lambda K, tau: 1 + ceil_log2(tau) + ceil_log2(K)),
}


@pytest.mark.parametrize("kind", list(FORMULAS))
@pytest.mark.parametrize("L", [3, 4, 6, 7])
@pytest.mark.parametrize("tau", [1, 2, 3, 8, 13])
def test_each_schedule_counts_the_rounds_of_its_formula(kind, L, tau):
    make, formula = FORMULAS[kind]
    with RNN([2] + [1] * (L - 2) + [2], dtype="float64", backend="numpy") as net:
        x, y = batch(net.sizes, 2, 0, np.float32, tau=tau, output="last")
        schedule = make()
        net.backprop(x, y, schedule)
        scan = {"scan": schedule.scan} if isinstance(schedule, TimeScan) else {}
        assert schedule.stats["rounds"] == formula(L - 2, tau) == type(schedule).rounds_formula(L - 2, tau, **scan)
        assert net.stats is schedule.stats


def test_rounds_at_four_layers_and_64_steps():
    """K = 4 recurrent layers, tau = 64: BPTT 256, Wavefront 67, TimeScan 4·(1 + 6) = 28 by doubling and
    4·(1 + 11) = 48 by reduction, and NaumovRNN 1 + ceil(log2 64) + ceil(log2 4) = 9 (build; six time
    rounds; two rounds over layers)."""
    want = {"BPTT": 256, "Wavefront": 67, "TimeScan-doubling": 28, "TimeScan-reduction": 48, "NaumovRNN": 9}
    with RNN([2, 1, 1, 1, 1, 2], dtype="float64", backend="numpy") as net:
        x, y = batch(net.sizes, 1, 0, np.float32, tau=64, output="last")
        for kind, rounds in want.items():
            schedule = FORMULAS[kind][0]()
            net.backprop(x, y, schedule)
            assert schedule.stats["rounds"] == rounds


def test_timescan_on_the_host_scans_by_reduction_unless_told_otherwise():
    with RNN([2, 3, 3, 2], dtype="float64", backend="numpy") as net:
        x, y = batch(net.sizes, 2, 0, np.float32, tau=8, output="last")
        for scan, want in (("auto", "reduction"), ("doubling", "doubling"), ("reduction", "reduction")):
            schedule = TimeScan(scan=scan)
            net.backprop(x, y, schedule)
            assert schedule.stats["scan"] == want and f"scan={scan!r}" in repr(schedule)
    with pytest.raises(ValueError, match="scan must be one of 'auto', 'doubling', 'reduction'; got 'blelloch'"):
        TimeScan(scan="blelloch")


def test_counters_are_reported_and_the_scans_say_what_they_hold():
    sizes, tau, B = [4, 6, 5, 3], 9, 2
    with RNN(sizes, dtype="float32", backend="numpy") as net:
        x, y = batch(sizes, B, 0, np.float32, tau=tau, output="last")
        for schedule in (BPTT(), Wavefront(), TimeScan(), NaumovRNN()):
            net.backprop(x, y, schedule)
            stats = schedule.stats
            assert {"rounds", "flops", "bytes", "memory_bytes", "sequential_flops", "sequential_bytes"} <= set(stats)
            if isinstance(schedule, (Wavefront, TimeScan, NaumovRNN)):
                assert stats["memory_bytes"] == schedule.memory_needed(sizes, tau, B, 4) > 0
                assert stats["flops"] > stats["sequential_flops"] or isinstance(schedule, Wavefront)
            else:
                assert stats["memory_bytes"] == 0
        # NaumovRNN holds 2K + 2(K-1) blocks of (tau·N)^2 per sample and 2K vectors of tau·N
        K, M = 2, tau * 6
        assert NaumovRNN().memory_needed(sizes, tau, B, 4) == 4 * B * ((4 * K - 2) * M * M + 2 * K * M)


def test_naumov_rnn_checks_its_memory_before_allocating():
    sizes = [8, 128, 128, 8]
    schedule = NaumovRNN()
    needed = schedule.memory_needed(sizes, 1024, 8, 4)
    with RNN(sizes, backend="numpy") as net:
        x, y = batch(sizes, 8, 0, np.float32, tau=1024, output="last")
        with pytest.raises(ValueError, match=rf"NaumovRNN needs {needed} bytes .* over memory_limit=1073741824 bytes"):
            net.backprop(x, y, schedule)
        assert not net._plans  # refused before the pass's own buffers were allocated
        small = NaumovRNN(memory_limit=100)
        x, y = batch(sizes, 1, 0, np.float32, tau=2, output="last")
        with pytest.raises(ValueError, match=r"NaumovRNN needs \d+ bytes"):
            net.backprop(x, y, small)
        net.backprop(x, y, NaumovRNN(memory_limit=small.memory_needed(sizes, 2, 1, 4)))
    with pytest.raises(ValueError, match="memory_limit must be an integer number of bytes >= 1"):
        TimeScan(memory_limit=0)
    with pytest.raises(TypeError, match="memory_limit must be an integer number of bytes >= 1; got 1.5"):
        NaumovRNN(memory_limit=1.5)
    with pytest.raises(ValueError, match="k must be an integer >= 0"):
        Wavefront(k=-1)
    with pytest.raises(TypeError, match=r"k must be an integer >= 0 \(worker streams; 0 runs the gradients on the "
                                        r"main stream\); got '2'"):
        TimeScan(k="2")


@pytest.mark.parametrize("seed", range(3))
def test_leapfrog_is_bitwise_bptt_under_chaos(seed):
    """Seeded random delays before every operation on every stream: the waits alone keep the order."""
    want = trained("numpy", BPTT(), steps=4)
    with get_backend("numpy", chaos=seed) as backend:
        assert same(trained(backend, Leapfrog(2), steps=4), want)
        assert same(trained(backend, Leapfrog(3, fused=True), steps=4), want)
        assert same(trained(backend, TimeScan(k=2, fused=True), steps=4), trained("numpy", TimeScan(k=0), steps=4))


def row(schedule, median):
    """A calibration row whose spread (p20..p80) is 2 % about its median."""
    return schedule, None, {"median": median, "p20": 0.99 * median, "p80": 1.01 * median}


def test_leapfrog_auto_calibrates_each_plan_once_and_is_bitwise_bptt(monkeypatch):
    """Whatever k the calibration picks, the pass is BPTT's chain: bitwise BPTT(), step after step."""
    from leapfrog_gpu.core import calibrate

    tables, measure = [], calibrate.measure
    monkeypatch.setattr(calibrate, "measure", lambda plan, schedules: tables.append(
        measure(plan, schedules, repeats=2, warmup=0)) or tables[-1])
    assert same(trained("numpy", Leapfrog("auto"), steps=3, tau=4), trained("numpy", BPTT(), steps=3, tau=4))
    assert len(tables) == 1  # one plan (tau, B), calibrated once
    assert [repr(schedule) for schedule, _, _ in tables[0]] == ["Sequential()", "Leapfrog(k=1)", "Leapfrog(k=2)",
                                                                "Leapfrog(k=4)"]


@pytest.mark.parametrize("faster,workers", [(None, 0), (2, 2)])
def test_leapfrog_auto_runs_bptt_where_no_hand_off_pays(monkeypatch, faster, workers):
    """A hand-off that the calibration finds no faster beyond its noise is not made: no worker stream
    exists after the step; one that pays, is."""
    from leapfrog_gpu.core import calibrate

    def measured(plan, schedules):
        return [row(s, 1.0 if s.k != faster else 0.5) for s in schedules]

    monkeypatch.setattr(calibrate, "measure", measured)
    x, y = batch(SIZES, 2, 0, np.float32, tau=4, output="every")
    with get_backend("numpy") as backend, RNN(SIZES, output="every", backend=backend) as net:
        net.sgd_step(x, y, ETA, Leapfrog("auto"))
        net.synchronize()
        assert repr(calibrate.chosen(net.plan(4, 2))) == ("Sequential()" if faster is None else "Leapfrog(k=2)")
        assert f"workers={workers}" in repr(backend)


@pytest.mark.parametrize("kind", [BPTT, Wavefront, TimeScan, NaumovRNN])
@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("fused", [False, True])
def test_a_schedule_s_repr_makes_the_same_schedule(kind, k, fused):
    """``eval(repr(s))`` is a schedule of s's class with its k and fused: a repr that left out a k other than its
    class's default (``Wavefront(k=0)`` printed as ``Wavefront()``, which is k = 2) named another schedule."""
    schedule = kind(k=k, fused=fused)
    again = eval(repr(schedule), {cls.__name__: cls for cls in (BPTT, Wavefront, TimeScan, NaumovRNN)})
    assert (type(again), again.k, again.fused) == (kind, k, fused), repr(schedule)
