"""The estimate before each run (``estimate.calibrate``) taken as 1 s, for the run and for the leapfrog schedule, in
every test of the command but ``test_estimate.py``'s: its calibration steps a network of its own, which would
count among the steps that tests count, interrupt or fail on purpose; and ``terminal_sigint``."""

import signal

import pytest

from leapfrog_gpu.tools.train import estimate


@pytest.fixture(autouse=True)
def one_second_estimate(request, monkeypatch):
    if request.module.__name__.rpartition(".")[2] != "test_estimate":
        monkeypatch.setattr(estimate, "calibrate", lambda config, dataset, backend, remaining: (1.0, 1.0))


@pytest.fixture
def terminal_sigint():
    """SIGINT handled by Python's own handler for the test, as in a terminal's job: a background job's (CI's, it may
    be) ignores it, and the command leaves an ignored SIGINT ignored, where a test's Ctrl-C would do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
