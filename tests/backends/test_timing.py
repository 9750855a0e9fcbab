"""timing and traffic: percentiles, round-robin repeats, and the byte counts of the floor."""

import numpy as np
import pytest

from leapfrog_gpu.backends import timing
from leapfrog_gpu.tools.bench import traffic
from leapfrog_gpu.backends import NumpyBackend


def test_summary_percentiles():
    stats = timing.summary(np.arange(1.0, 102.0))  # 1..101
    assert stats == {"median": 51.0, "p20": 21.0, "p80": 81.0}


def test_summary_of_a_skewed_sample_is_its_median_and_percentiles():
    """One slow repeat (a preempted run) among four alike: the median stays at the typical time, 1.0 ms, where the
    mean would be 2.62; p20 and p80 interpolate linearly between the sorted sample's neighbours."""
    stats = timing.summary([1.0, 1.0, 1.1, 1.0, 9.0])
    assert stats["median"] == 1.0  # the middle one of 1.0, 1.0, 1.0, 1.1, 9.0
    assert stats["p20"] == pytest.approx(1.0)  # at 0.8 of the way from the 1st to the 2nd, both 1.0
    assert stats["p80"] == pytest.approx(1.1 + 0.2 * (9.0 - 1.1))  # 0.2 of the way from the 4th to the 5th: 2.68


def test_measure_interleaved_takes_turns_and_counts_warmup():
    order = []
    with NumpyBackend(mode="serial") as backend:
        times = timing.measure_interleaved(backend, [lambda: order.append("a"), lambda: order.append("b")], 3, 1)
    assert order == ["a", "b"] * 4
    assert len(times) == 2 and all(t.shape == (3,) and (t >= 0).all() for t in times)


def test_rotated_rounds_start_one_function_later_each():
    order = []
    with NumpyBackend(mode="serial") as backend:
        times = timing.measure_interleaved(backend, [lambda name=name: order.append(name) for name in "abc"], 4, 1,
                                           rotate=True)
    assert order == list("abc" "abc" "bca" "cab" "abc")  # the warm-up, then rounds starting at a, b, c, a
    assert [t.shape for t in times] == [(4,)] * 3


def test_settled_calls_are_timed_right_after_an_untimed_one_of_their_own():
    order, timed = [], []
    once = timing._host_time

    def spy(backend, fn):
        timed.append(len(order))
        return once(backend, fn)

    with NumpyBackend(mode="serial") as backend, pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing, "_host_time", spy)
        timing.measure_interleaved(backend, [lambda name=name: order.append(name) for name in "ab"], 2, 1,
                                   rotate=True, settle=True)
        assert order == list("ab" "aabb" "bbaa")  # the warm-up, then each timed call after one of its own
        assert timed == [3, 5, 7, 9]  # the calls timed are the second of each pair
        order.clear()
        timing.measure_in_blocks(backend, [lambda name=name: order.append(name) for name in "ab"], [1, 2], 1, 0,
                                 settle=True)
        assert order == list("aa" "bb")


def test_contexts_wrap_each_call_outside_the_timer():
    import contextlib

    events = []

    def context(name):
        @contextlib.contextmanager
        def enter():
            events.append(f"enter {name}")
            yield
            events.append(f"exit {name}")
        return enter

    with NumpyBackend(mode="serial") as backend:
        timing.measure_interleaved(backend, [lambda: events.append("a"), lambda: events.append("b")], 2, 0,
                                   [context("A"), context("B")])
    assert events == ["enter A", "a", "exit A", "enter B", "b", "exit B"] * 2


def test_blocks_alternate_keys_and_warm_up_each_block():
    calls = []
    with NumpyBackend(mode="serial") as backend:
        times = timing.measure_in_blocks(backend, [lambda name=name: calls.append(name) for name in "abc"],
                                         [1, 1, 2], 3, 0, block=2)
    # block of 2 for key 1 (a, b in turn), then key 2 (c); then a block of 1, each after one untimed round
    assert calls == ["a", "b", "a", "b", "c", "c", "a", "b", "a", "b", "c", "c"]
    assert [len(t) for t in times] == [3, 3, 3]


def test_measure_waits_for_the_streams():
    import time

    with NumpyBackend() as backend:
        ms = timing.measure(backend, lambda: backend.launch(backend.main, "sleep", time.sleep, 0.01), 3, 0)
    assert (ms >= 10).all()


def test_measure_rejects_bad_repeats():
    with NumpyBackend(mode="serial") as backend, pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        timing.measure(backend, lambda: None, 0, 0)


def test_step_bytes_by_hand():
    # sizes [3, 2], B = 4, float64: 6*2*3 + 7*2*4 + 2*3*4 + 4*2 = 36 + 56 + 24 + 8 = 124 elements
    assert traffic.step_bytes([3, 2], 4, 8) == 124 * 8
    assert traffic.step_bytes([3, 2, 5], 1, 4) == traffic.step_bytes([3, 2], 1, 4) + traffic.step_bytes([2, 5], 1, 4)


def test_copy_bandwidth_is_positive():
    with NumpyBackend() as backend:
        stats = timing.copy_bandwidth(backend, nbytes=1 << 20, repeats=3, warmup=1)
    assert 0 < stats["p20"] <= stats["median"] <= stats["p80"]


def test_measure_launches_times_many_launches_and_the_host_issue_apart():
    calls = []
    with NumpyBackend(mode="serial") as backend:
        per_launch, issue = timing.measure_launches(backend, lambda: calls.append(1), 3, 2, launches=20)
        with pytest.raises(ValueError, match="launches must be an integer >= 1; got 0"):
            timing.measure_launches(backend, lambda: None, 3, 0, launches=0)
    assert len(calls) == 2 + 3 * 20
    assert per_launch.shape == issue.shape == (3,) and (issue >= 0).all() and (per_launch >= issue).all()
