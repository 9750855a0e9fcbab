"""Faults: errors on any stream surface at the caller within bounded time; a failed or refused step
leaves the parameters as they were, and the next step works."""

import numpy as np
import pytest

from helpers import batch, patched_ops
from leapfrog_gpu import MLP, Leapfrog, Sequential
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend

SIZES = [6, 9, 7, 5, 4]


def params(net):
    return [p.copy() for p in net.weights + net.biases]


def unchanged(before, net):
    return all(np.array_equal(p, q) for p, q in zip(before, net.weights + net.biases))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("chaos", [None, 3])
@pytest.mark.parametrize("where", ["worker: gradients", "main: backward", "main: forward"])
def test_a_failing_operation_surfaces_and_leaves_parameters_alone(where, chaos):
    stream, name = where.split(": ")

    def fail(*args):
        raise ArithmeticError(f"injected in {name}")

    x, y = batch(SIZES, 3)
    with NumpyBackend(chaos=chaos) as backend:
        net = MLP(SIZES, dtype="float64", backend=backend)
        net.sgd_step(x, y, 0.5, Leapfrog(2))
        before = params(net)
        backend.ops = patched_ops(**{name: fail})
        net.sgd_step(x, y, 0.5, Leapfrog(2))
        net.sgd_step(x, y, 0.5, Leapfrog(2))  # enqueued behind the failure: must not run either
        with pytest.raises(ArithmeticError, match=f"injected in {name}"):
            net.synchronize()
        assert unchanged(before, net)
        backend.ops = ops_numpy
        reference = MLP(SIZES, dtype="float64", backend="numpy")
        reference.set_parameters(before[:4], before[4:])
        net.sgd_step(x, y, 0.5, Leapfrog(2))
        reference.sgd_step(x, y, 0.5, Sequential())
        assert all(np.array_equal(p, q) for p, q in zip(params(reference), params(net)))
        reference.close()


@pytest.mark.timeout(30)
def test_check_finite_refuses_the_update():
    def nan_gradient(nabla_w, nabla_b, delta, a):
        ops_numpy.gradients(nabla_w, nabla_b, delta, a)
        if nabla_w.shape == (7, 9):
            nabla_w[0, 0] = np.nan

    x, y = batch(SIZES, 3)
    with NumpyBackend() as backend:
        net = MLP(SIZES, backend=backend, check_finite=True)
        before = params(net)
        backend.ops = patched_ops(gradients=nan_gradient)
        net.sgd_step(x, y, 0.5, Leapfrog(3))
        with pytest.raises(FloatingPointError, match=r"nabla_w\[3\] holds NaN or Inf; update refused"):
            net.synchronize()
        assert unchanged(before, net)
        backend.ops = ops_numpy
        net.sgd_step(x, y, 0.5, Leapfrog(3))
        assert not unchanged(before, net)


def test_without_check_finite_a_nan_gradient_goes_through():
    """The check is what stops it: without it the update spreads the NaN (the failure mode it guards)."""
    def nan_gradient(nabla_w, nabla_b, delta, a):
        ops_numpy.gradients(nabla_w, nabla_b, delta, a)
        nabla_w[0, 0] = np.nan

    with NumpyBackend() as backend:
        net = MLP(SIZES, backend=backend)
        backend.ops = patched_ops(gradients=nan_gradient)
        net.sgd_step(*batch(SIZES, 3), 0.5, Leapfrog(3))
        assert np.isnan(net.weights[0]).any()


def test_check_finite_refuses_a_fused_schedule():
    with MLP(SIZES, backend="numpy", check_finite=True) as net:
        with pytest.raises(ValueError, match="check_finite needs an unfused schedule"):
            net.sgd_step(*batch(SIZES, 2), 0.1, Leapfrog(2, fused=True))
