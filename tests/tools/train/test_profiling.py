"""The --profile-steps window: profiler start before step A and stop after step B-1, device synchronized
at both ends, an NVTX range per step (stand-ins for ``cupyx.profiler`` and the NVTX range record the
calls, so this runs without a GPU or a profiler)."""

import argparse
import contextlib
import sys
import types

import pytest

from leapfrog_gpu.tools.train import profiling, values


class FakeBackend:
    def __init__(self, name, events):
        self.name, self.events = name, events

    def synchronize(self):
        self.events.append("sync")


@pytest.fixture
def events(monkeypatch):
    events = []

    @contextlib.contextmanager
    def profile():
        events.append("start")
        yield
        events.append("stop")

    module = types.ModuleType("cupyx.profiler")
    module.profile = profile
    package = types.ModuleType("cupyx")
    package.profiler = module
    monkeypatch.setitem(sys.modules, "cupyx", package)
    monkeypatch.setitem(sys.modules, "cupyx.profiler", module)

    @contextlib.contextmanager
    def nvtx_range(name):
        events.append(f"push {name}")
        yield
        events.append("pop")

    monkeypatch.setattr(profiling.annotate, "range", nvtx_range)
    return events


def run_steps(window, events, steps):
    for n in steps:
        with window.step(n):
            events.append(n)
    window.close()


def test_cuda_window_brackets_exactly_its_steps(events):
    run_steps(profiling.ProfileWindow(range(3, 6), FakeBackend("cupy", events)), events, range(8))
    assert events == [0, 1, 2, "sync", "start", "push step 3", 3, "pop", "push step 4", 4, "pop",
                      "push step 5", 5, "pop", "sync", "stop", 6, 7]


def test_a_run_that_ends_inside_the_window_stops_the_profiler(events):
    run_steps(profiling.ProfileWindow(range(2, 100), FakeBackend("cupy", events)), events, range(4))
    assert events == [0, 1, "sync", "start", "push step 2", 2, "pop", "push step 3", 3, "pop", "sync", "stop"]


def test_a_run_resumed_inside_the_window_profiles_the_rest_of_it(events):
    window = profiling.ProfileWindow(range(3, 6), FakeBackend("cupy", events))
    run_steps(window, events, range(4, 8))
    assert events == ["sync", "start", "push step 4", 4, "pop", "push step 5", 5, "pop", "sync", "stop", 6, 7]
    assert window.recorded == range(4, 6)


def test_numpy_window_only_adds_nvtx_ranges(events):
    run_steps(profiling.ProfileWindow(range(1, 3), FakeBackend("numpy", events)), events, range(4))
    run_steps(profiling.ProfileWindow(None, FakeBackend("cupy", events)), events, range(2))
    assert events == [0, "push step 1", 1, "pop", "push step 2", 2, "pop", 3, 0, 1]


@pytest.mark.parametrize("text", ["5", "a:b", "3:3", "-1:4", "4:2", ":"])
def test_profile_steps_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be A:B with integers 0 <= A < B"):
        values.profile_steps(text)


def test_profile_steps():
    assert values.profile_steps("0:7") == [0, 7]
