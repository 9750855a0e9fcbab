"""``CupyBackend.copy_in`` of a CuPy batch, on the CuPy stand-in under each of its orders: the copy waits
for what the caller's stream has enqueued (the work that produces the batch), and the caller's stream
waits for the copy (so that the caller may overwrite the batch at once). Without the first wait the tests
of a batch still being produced fail under ``main-first`` (the main stream copies before the batch is
written); without the second the tests of an overwritten batch fail under ``workers-first`` (the caller's
stream overwrites the batch before the main stream copies it)."""

import numpy as np
import pytest

from helpers import batch, host
from leapfrog_gpu import MLP, Leapfrog, reference

SIZES = [7, 13, 5, 3]
ETA = 0.5


@pytest.fixture(params=["default stream", "own stream"])
def caller(request, backend):
    """The stream current when the caller hands a batch over: CuPy's default one, or one of its own
    (non-blocking, created after the backend's: ``workers-first`` runs it before them)."""
    if request.param == "default stream":
        yield backend.xp.cuda.Stream.null
    else:
        with backend.xp.cuda.Stream(non_blocking=True) as stream:
            yield stream


def reference_step(net, weights, biases, x, y):
    """w - eta / B nabla_w (and b alike) in float64, from the reference's gradients on ``x``, ``y``."""
    nabla_b, nabla_w = reference.backprop(weights, biases, x, y, net.activation, net.cost, net.output_activation)
    scale = ETA / x.shape[1]
    return [p - scale * g for p, g in zip(weights + biases, nabla_w + nabla_b)]


def test_copy_in_waits_for_the_work_that_produces_the_batch(backend, caller):
    xp = backend.xp
    want = np.arange(35, dtype=np.float64).reshape(7, 5)
    dst = xp.empty(want.shape, dtype=np.float64)
    backend.synchronize()
    src = xp.asarray(want)  # enqueued on the caller's stream, not yet run
    backend.copy_in(backend.main, dst, src)
    backend.synchronize()
    np.testing.assert_array_equal(dst.get(), want)


def test_the_caller_may_overwrite_the_batch_once_copy_in_returns(backend, caller):
    xp = backend.xp
    want = np.arange(35, dtype=np.float64).reshape(7, 5)
    dst = xp.empty(want.shape, dtype=np.float64)
    src = xp.asarray(want)
    backend.synchronize()
    backend.copy_in(backend.main, dst, src)
    src.fill(-1.0)  # on the caller's stream, at once
    backend.synchronize()
    np.testing.assert_array_equal(dst.get(), want)


def test_a_step_on_an_integer_batch_still_being_produced_is_the_step_on_its_host_copy(backend, caller):
    """An integer batch is not read by the batch's own NaN check (a float one is, on the caller's stream,
    which would hide a missing wait): the step's copy alone must wait for the batch to be written."""
    xp = backend.xp
    _, y = batch(SIZES, 4)
    x = np.random.default_rng(1).integers(-3, 4, (SIZES[0], 4))
    nets = [MLP(SIZES, activation="tanh", dtype="float64", backend=backend) for _ in range(2)]
    for net in nets:
        net.backprop(x, y)  # the plan of this batch size exists: nothing below synchronizes
    weights, biases = host(nets[0].weights), host(nets[0].biases)
    x_device = xp.asarray(x)  # enqueued on the caller's stream; y stays on the host (a device y is read)
    nets[0].sgd_step(x_device, y, ETA, Leapfrog(2))
    nets[1].sgd_step(x, y, ETA, Leapfrog(2))
    got, on_host = (host(net.weights + net.biases) for net in nets)
    for net in nets:
        net.close()
    for a, b in zip(got, on_host):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got, reference_step(nets[0], weights, biases, x.astype(np.float64), y)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_a_step_sees_the_batch_as_it_was_when_sgd_step_returned(backend, caller):
    """The caller overwrites its CuPy batch on its own stream right after ``sgd_step``: the step, still
    queued, computes on the original values."""
    xp = backend.xp
    x, y = batch(SIZES, 4)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        weights, biases = host(net.weights), host(net.biases)
        x_device, y_device = xp.asarray(x), xp.asarray(y)
        net.sgd_step(x_device, y_device, ETA, Leapfrog(2))
        x_device.fill(0.0)
        y_device.fill(0.5)
        got = host(net.weights + net.biases)
    for a, b in zip(got, reference_step(net, weights, biases, x, y)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
