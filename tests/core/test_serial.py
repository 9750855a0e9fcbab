"""One network, two threads (``core.serial``): their calls run one after the other, so that two threads training one
network take whole steps, as many as they made, in some order: with one batch and one optimizer, any order gives
the steps one thread would make. Without the lock they interleaved a step's loads, controls and count (a count lost,
parameters of no whole number of steps)."""

import threading

import numpy as np
import pytest

from helpers import assert_bitwise_equal
from networks import NAMES, network, network_batch
from leapfrog_gpu import Adam, Leapfrog
from leapfrog_gpu.backends.host import NumpyBackend
from leapfrog_gpu.core import parameters, serial

STEPS = 60
"""Steps of each thread."""


def host(params):
    return [np.array(array) for named in params.values() for array in named.values()]


def test_two_threads_training_one_network_take_whole_steps(network_name):
    x, y = network_batch(network_name, 4, seed=2, dtype=np.float64)
    with network(network_name, "numpy", dtype="float64") as want:
        for _ in range(2 * STEPS):
            want.train_step(x, y, Adam(0.01), Leapfrog(2))
        want = host(want.parameters())
    with network(network_name, "numpy", dtype="float64") as net:
        failed = []

        def train():
            try:
                for _ in range(STEPS):
                    net.train_step(x, y, Adam(0.01), Leapfrog(2))
                    net.parameters()  # a call that waits, between the other thread's steps
            except Exception as error:  # noqa: BLE001 (said below, in the main thread)
                failed.append(error)

        threads = [threading.Thread(target=train) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failed
        assert net.optimizer_state()["step"] == 2 * STEPS
        assert_bitwise_equal(host(net.parameters()), want)


@pytest.mark.parametrize("name", NAMES)
def test_every_call_named_holds_the_lock_on_every_network(name):
    """A name of ``SERIAL`` that a network lacks, or overrides without the lock, would go unguarded."""
    with network(name, "numpy") as net:
        for call in serial.SERIAL:
            assert getattr(getattr(type(net), call), "serialized", False), call


@pytest.mark.parametrize("read", ["weights", "biases", "recurrent"])
def test_a_property_read_holds_the_lock_while_it_copies(read, monkeypatch):
    """``weights`` (a property, no call of ``SERIAL``) copies under the lock: a step another thread makes while the
    copy is under way waits for it, so the copy is of the parameters before that step, not torn by it (the serial
    backend runs the step inside ``sgd_step``: without the lock it lands in the middle of the copy)."""
    x, y = network_batch("RNN", 4, seed=2, dtype=np.float64)
    with network("RNN", NumpyBackend(mode="serial"), dtype="float64") as net:
        want = [np.array(a) for a in getattr(net, read)]
        copies, stepped, others = parameters.copies, threading.Event(), []

        def copy_while_a_step_comes(arrays):  # called again for each array of a list: one step in all
            if not others:
                others.append(threading.Thread(target=lambda: (net.sgd_step(x, y, 0.5, Leapfrog(2)), stepped.set())))
                others[0].start()
                others[0].join(timeout=0.5)  # with the lock held, the step waits for the copy to end
            return copies(arrays)

        monkeypatch.setattr(parameters, "copies", copy_while_a_step_comes)
        assert_bitwise_equal(getattr(net, read), want)
        other_done = stepped.wait(timeout=60)
        monkeypatch.setattr(parameters, "copies", copies)
        assert other_done and not all(np.array_equal(a, b) for a, b in zip(getattr(net, read), want))
