"""Leapfrog("auto") and autotune: the choice is the fastest candidate, sequential included, and the
gradients are those of the schedule it stands for."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import threadpoolctl

from helpers import batch
from leapfrog_gpu import MLP, Adam, Leapfrog, Sequential
from leapfrog_gpu.backends import host_blas
from leapfrog_gpu.core import calibrate
from leapfrog_gpu.mlp import autotune


@pytest.mark.parametrize("fastest", ["Sequential()", "Leapfrog(k=2)", "Leapfrog(k=4)"])
def test_choose_takes_the_smallest_median_and_runs_it_once_per_plan(monkeypatch, fastest):
    calls = []

    def fake_measure(plan, schedules):
        calls.append([repr(s) for s in schedules])
        return [(s, None, {"p20": 0.7, "median": 0.75, "p80": 0.8} if repr(s) == fastest else
                 {"p20": 1.9, "median": 2.0, "p80": 2.1}) for s in schedules]

    monkeypatch.setattr(calibrate, "measure", fake_measure)  # what choose() calls, shared with the RNN
    sizes = [6, 9, 9, 4]
    x, y = batch(sizes, 3, seed=1)
    schedule = Leapfrog("auto")
    with MLP(sizes, backend="numpy") as net:
        expected = net.backprop(x, y, Sequential())
        for _ in range(3):
            got = net.backprop(x, y, schedule)
            for ours, theirs in zip(got, expected):
                assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))
        assert repr(autotune.choose(net.plan(3))) == fastest
        net.backprop(x[:, :1], y[:, :1], schedule)  # a new batch size is a new plan: calibrated again
    assert calls == [["Sequential()", "Leapfrog(k=1)", "Leapfrog(k=2)", "Leapfrog(k=4)"]] * 2


@pytest.mark.parametrize("fused", [False, True])
def test_auto_training_matches_sequential_bitwise(fused):
    sizes = [7, 11, 11, 11, 3]
    x, y = batch(sizes, 4, seed=1)
    schedule = Leapfrog("auto", fused)
    with MLP(sizes, backend="numpy") as auto, MLP(sizes, backend="numpy") as plain:
        for _ in range(4):
            auto.sgd_step(x, y, 0.5, schedule)
            plain.sgd_step(x, y, 0.5, Sequential(fused))
        assert autotune.choose(auto.plan(4), fused=fused).fused == fused
        assert schedule.chosen == {4: autotune.choose(auto.plan(4), fused=fused)}  # what the steps ran
        for a, b in zip(auto.weights + auto.biases, plain.weights + plain.biases):
            assert np.array_equal(a, b)


def test_measure_leaves_the_gradients_unchanged():
    sizes = [5, 8, 8, 2]
    x, y = batch(sizes, 2, seed=1)
    with MLP(sizes, backend="numpy") as net:
        nabla_b, nabla_w = net.backprop(x, y, Sequential())
        plan = net.plan(2)
        table = autotune.measure(plan, autotune.candidates((1, 3)), repeats=2, warmup=0)
        assert [(repr(s), t) for s, t, _ in table] == [("Sequential()", None), ("Leapfrog(k=1)", None),
                                                       ("Leapfrog(k=3)", None)]
        assert all(ms["median"] > 0 for _, _, ms in table)
        net.synchronize()
        assert all(np.array_equal(plan.nabla_w[l], w) for l, w in zip(net.layer_numbers, nabla_w))


def test_tune_sweeps_blas_threads_returns_the_fastest_and_leaves_the_parameters():
    with MLP([8, 16, 16, 4], backend="numpy") as net:
        before = [w.copy() for w in net.weights + net.biases]
        tuning = autotune.tune(net, 3, ks=(1, 2), blas_threads=[1, 2], repeats=2, warmup=0)
        assert all(np.array_equal(a, b) for a, b in zip(before, net.weights + net.biases))
    assert [(repr(s), t) for s, t, _ in tuning.table] == [
        (name, t) for t in (1, 2) for name in ("Sequential()", "Leapfrog(k=1)", "Leapfrog(k=2)")]
    assert (tuning.schedule, tuning.blas_threads) == autotune.pick(tuning.table)[:2]
    assert tuning.blas_threads in (1, 2) and isinstance(tuning.schedule, (Sequential, Leapfrog))


def _row(schedule, p20, p80, threads=None, median=None):
    return schedule, threads, {"p20": p20, "median": (p20 + p80) / 2 if median is None else median, "p80": p80}


def test_pick_leaves_sequential_only_beyond_noise():
    seq, seq2, two, four = Sequential(), Sequential(), Leapfrog(2), Leapfrog(4)
    # leapfrog's slow end below sequential's fast end: leapfrog, the one with the smaller median
    assert autotune.pick([_row(seq, 10, 11), _row(two, 7, 8), _row(four, 6, 9, median=7.8)])[0] is two
    # the fastest by median, although its spread reaches past sequential's fast end: sequential
    assert autotune.pick([_row(seq, 10, 11), _row(two, 7, 8), _row(four, 6, 10.5, median=6.5)])[0] is seq
    # overlapping spreads: sequential, although leapfrog's median is smaller
    assert autotune.pick([_row(seq, 10, 12), _row(two, 8, 10.5)])[0] is seq
    # the best sequential configuration is the one with the smallest median, over BLAS settings, even
    # when its spikes make its p80 the larger: a short calibration's p80 is mostly noise
    assert autotune.pick([_row(seq, 10, 30, 2, median=11), _row(seq2, 12, 13, 1), _row(two, 11.5, 12.5, 1)])[0] is seq
    assert autotune.pick([_row(seq, 10, 30, 2, median=20), _row(seq2, 12, 13, 1), _row(two, 11.5, 12.5, 1)])[0] is seq2


def test_blas_limit_sets_and_restores_the_threads():
    def blas_threads():
        return {lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"}

    before = blas_threads()
    if not before:
        pytest.skip("threadpoolctl finds no BLAS library in this process")
    with autotune.blas_limit(1):
        assert blas_threads() == {1}
    assert blas_threads() == before
    with autotune.blas_limit(None):
        assert blas_threads() == before


def test_blas_limit_reaches_a_blas_library_loaded_after_its_first_use():
    """SciPy's own OpenBLAS, loaded by an import after a first limit (scikit-learn's datasets load it), is limited
    too: each limit finds the libraries loaded by then (a controller kept from the first missed it)."""
    pytest.importorskip("scipy.linalg", reason="needs SciPy, whose OpenBLAS loads with scipy.linalg")
    code = """if True:
        import threadpoolctl
        from leapfrog_gpu.mlp import autotune
        with autotune.blas_limit(1):
            pass
        import scipy.linalg
        with autotune.blas_limit(1):
            print(sorted({lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"}))
        """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "2"})
    assert done.returncode == 0 and done.stdout.split() == ["[1]"], done.stdout + done.stderr


def test_blas_settings():
    assert autotune.blas_settings("cupy") == [None]
    assert autotune.blas_settings("numpy", [3, 1]) == [3, 1]
    assert 1 in autotune.blas_settings("numpy")
    with pytest.raises(ValueError, match="numpy backend only"):
        autotune.blas_settings("cupy", [2])
    with MLP([4, 4], backend="numpy") as net, pytest.raises(ValueError, match="batch must be an integer >= 1"):
        autotune.tune(net, 0)


@pytest.mark.parametrize("options, error, message", [
    ({"repeats": 0}, ValueError, "repeats must be an integer >= 1; got 0"),
    ({"warmup": -1}, ValueError, "warmup must be an integer >= 0; got -1"),
    ({"blas_threads": [0]}, ValueError, "blas_threads must be an integer >= 1; got 0"),
    ({"blas_threads": 2}, TypeError, "blas_threads must be None or a list of thread counts, each an integer >= 1"),
    ({"blas_threads": [1, 1]}, ValueError, "blas_threads must list distinct thread counts, at least one, such as "
                                           "[1, 2]; got [1, 1]"),  # rows twice in the table
    ({"blas_threads": []}, ValueError, "blas_threads must list distinct thread counts"),  # as ks=[]
    ({"blas_threads": [0, 0]}, ValueError, "blas_threads must be an integer >= 1; got 0"),  # each count first
    ({"ks": None}, TypeError, "ks must be a list of worker stream counts, such as [1, 2, 4]; got None"),
    ({"ks": [2, 2]}, ValueError, "ks must list distinct worker stream counts, at least one, such as [1, 2, 4]; got "
                                 "[2, 2]"),  # a row twice in the table
    ({"ks": []}, ValueError, "ks must list distinct worker stream counts"),
])
def test_tune_refuses_a_bad_count_before_it_times_anything(options, error, message):
    """A repeat count of 0 failed inside NumPy's percentile; a thread count of 0 was calibrated and returned."""
    with MLP([4, 4], backend="numpy") as net, pytest.raises(error, match=f"^{re.escape(message)}"):
        autotune.tune(net, 2, **options)


def test_all_cores_by_default_are_those_openblas_runs_and_this_process_may_use(monkeypatch):
    """On a machine of more cores than OpenBLAS's MAX_THREADS, the default calibrated (and could choose) a count that
    ran as MAX_THREADS, which a backend then refuses; a process bound to some cores has those."""
    most = host_blas.most_threads() or 64
    monkeypatch.setattr(host_blas, "most_threads", lambda: most)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2 * most)), raising=False)
    assert autotune.blas_settings("numpy") == [1, most]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5, 7}, raising=False)
    assert autotune.blas_settings("numpy") == [1, 3]


def test_tune_leaves_the_network_its_parameters_and_its_optimizer_state():
    """It times a network of the same architecture: an Adam state stays (the plain SGD step refused to mix with it,
    naming an SGD(lr=0.0) the caller never gave), and so do the parameters."""
    sizes = [4, 5, 2]
    with MLP(sizes, dtype="float64", backend="numpy") as net:
        net.train_step(*batch(sizes, 3), Adam(0.01))
        params, state = net.parameters(), net.optimizer_state()
        tuning = autotune.tune(net, 2, ks=(1, 2), blas_threads=[1], repeats=2, warmup=0)
        assert tuning.blas_threads == 1 and 2 not in net._plans  # nor a plan of the network's own
        after = net.optimizer_state()
        assert after["step"] == state["step"] == 1 and repr(net.held_optimizer()) == repr(Adam(0.01))
        for unit, named in params.items():
            for name, value in named.items():
                np.testing.assert_array_equal(net.parameters()[unit][name], value)
                for slot in ("exp_avg", "exp_avg_sq"):
                    np.testing.assert_array_equal(after[slot][unit][name], state[slot][unit][name])


def test_auto_run_outside_the_network_says_how_to_run_it():
    with MLP([4, 5, 2], backend="numpy") as net:
        net.backprop(*batch([4, 5, 2], 2, seed=1), Sequential())
        with pytest.raises(ValueError, match=r"through the network \(sgd_step, gradients or backprop\)"):
            net.plan(2).run(Leapfrog("auto"))


@pytest.mark.parametrize("k, error", [("fast", TypeError), (2.0, TypeError), (True, TypeError), (0, ValueError)])
def test_leapfrog_names_auto_in_its_errors(k, error):
    with pytest.raises(error, match="or 'auto'"):
        Leapfrog(k)


def test_auto_repr():
    assert repr(Leapfrog("auto")) == "Leapfrog(k='auto')" and repr(Leapfrog(3)) == "Leapfrog(k=3)"
