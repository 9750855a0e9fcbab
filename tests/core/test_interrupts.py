"""Ctrl-C while a step is enqueued (``core.interrupts``): raised once the step is enqueued whole, in a loop of one's
own as in ``fit``, whose position then counts that step; an ignored SIGINT stays ignored."""

import contextlib
import signal
import threading

import numpy as np
import pytest

from helpers import assert_bitwise_equal
from networks import network, network_batch
from leapfrog_gpu import Adam, Leapfrog
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import fitting

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="a SIGINT handler can be set on the main thread only")


def host(params):
    return [np.array(array) for named in params.values() for array in named.values()]


@contextlib.contextmanager
def sigint_at_launch(net, handler):
    """SIGINT's handler set to ``handler`` (restored after), and a SIGINT raised as ``net``'s launch number
    ``at[0]`` (counted over the block; None: never) is made; yields ``(at, launches)``, ``launches`` the names."""
    previous = signal.signal(signal.SIGINT, handler)  # Python's own is ignored in a background job: set it
    launch, launches, at = net.backend.launch, [], [None]

    def counted(stream, name, *args, **kwargs):
        launches.append(name)
        if len(launches) == at[0]:
            signal.raise_signal(signal.SIGINT)
        return launch(stream, name, *args, **kwargs)

    net.backend.launch = counted
    try:
        yield at, launches
    finally:
        del net.backend.launch
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("in_fit", [False, True])
def test_a_ctrl_c_inside_a_step_is_raised_once_the_step_is_enqueued_whole(network_name, in_fit):
    """A SIGINT halfway through the launches of the third step: KeyboardInterrupt once that step is enqueued whole,
    SIGINT's handler as it was; the network then holds three whole steps, as one that took them alone does, to the
    bit (raised where it landed, the step left some units updated and not others)."""
    x, y = network_batch(network_name, 6, dtype=np.float64)
    schedule = Leapfrog(2, fused=True)
    with network(network_name, "numpy", dtype="float64") as net, \
            network(network_name, "numpy", dtype="float64") as alone:
        with sigint_at_launch(net, signal.default_int_handler) as (at, launches):
            net.train_step(x[..., :2], y[..., :2], Adam(0.01), schedule)
            at[0] = 2 * len(launches) + len(launches) // 2  # the middle of the third step
            with pytest.raises(KeyboardInterrupt):
                if in_fit:
                    net.fit(x, y, 1, 2, Adam(0.01), schedule, shuffle=False, progress=False)
                else:
                    for s in range(1, 3):
                        net.train_step(x[..., 2 * s:2 * s + 2], y[..., 2 * s:2 * s + 2], Adam(0.01), schedule)
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert len(launches) > at[0] and net.optimizer_state()["step"] == 3
        steps = [(0, 2), (0, 2), (2, 4)] if in_fit else [(0, 2), (2, 4), (4, 6)]
        for start, stop in steps:
            alone.train_step(x[..., start:stop], y[..., start:stop], Adam(0.01), schedule)
        assert_bitwise_equal(host(net.parameters()), host(alone.parameters()))


def test_an_ignored_sigint_stays_ignored():
    x, y = network_batch("MLP", 2, dtype=np.float64)
    with network("MLP", "numpy", dtype="float64") as net, network("MLP", "numpy", dtype="float64") as alone:
        with sigint_at_launch(net, signal.SIG_IGN) as (at, launches):
            at[0] = 3
            net.train_step(x, y, Adam(0.01))
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        alone.train_step(x, y, Adam(0.01))
        assert_bitwise_equal(host(net.parameters()), host(alone.parameters()))


def test_a_ctrl_c_inside_a_step_of_a_run_counts_that_step_in_its_position(network_name):
    """A SIGINT halfway through the launches of a ``Fitting`` run's third step: the network takes that step whole
    and the run's position counts it, so that the run resumed from ``state()`` ends as the unbroken run does, to
    the bit (counted only after ``train_step`` returned, the step would be taken twice)."""
    x, y = network_batch(network_name, 8, dtype=np.float64)
    options = {"epochs": 2, "batch_size": 2, "optimizer": Adam(0.01), "schedule": Leapfrog(2, fused=True)}
    with network(network_name, "numpy", dtype="float64") as net, \
            network(network_name, "numpy", dtype="float64") as unbroken:
        run = fitting.Fitting(net, x, y, **options)
        with sigint_at_launch(net, signal.default_int_handler) as (at, launches):
            marks = []

            @contextlib.contextmanager
            def step(n):
                marks.append(len(launches))
                if n == 2:
                    at[0] = marks[2] + (marks[2] - marks[1]) // 2
                yield

            with pytest.raises(KeyboardInterrupt):
                run.run(step, progress=False)
        assert len(launches) > at[0]
        assert run.state()["step"] == run.state()["step_in_epoch"] == net.optimizer_state()["step"] == 3
        fitting.Fitting(net, x, y, **options, state=run.state()).run(progress=False)
        unbroken.fit(x, y, progress=False, **options)
        assert_bitwise_equal(host(net.parameters()), host(unbroken.parameters()))


def test_a_ctrl_c_while_waiting_for_steps_leaves_their_count(network_name):
    """Ctrl-C in ``synchronize()`` (``parameters``, ``save``, ``evaluate`` wait there too) while two steps are
    queued (a deferred backend runs them in its synchronize, after the Ctrl-C): they still run, and the network
    counts them (it took its count back to the steps that had run, one, so that the next Adam steps corrected their
    bias by the wrong t)."""
    x, y = network_batch(network_name, 4, seed=1, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64") as want:
        for _ in range(5):
            want.train_step(x, y, Adam(0.01), Leapfrog(2))
        want = host(want.parameters())
    with NumpyBackend(mode="deferred") as backend, network(network_name, backend, dtype="float64") as net:
        net.train_step(x, y, Adam(0.01), Leapfrog(2))  # the optimizer's state made, which waits for the streams
        wait = backend.synchronize
        for _ in range(2):
            net.train_step(x, y, Adam(0.01), Leapfrog(2))

        def interrupted():
            net.backend.synchronize = wait
            raise KeyboardInterrupt

        net.backend.synchronize = interrupted
        with pytest.raises(KeyboardInterrupt):
            net.synchronize()
        for _ in range(2):
            net.train_step(x, y, Adam(0.01), Leapfrog(2))
        assert_bitwise_equal(host(net.parameters()), want)
        assert net.optimizer_state()["step"] == 5
