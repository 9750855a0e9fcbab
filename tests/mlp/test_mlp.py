"""Sequential backprop against central finite differences and against the plain NumPy reference."""

import itertools
import re

import numpy as np
import pytest

from helpers import batch, batch_id, central, layer_names, schedule_id, to_numpy
from leapfrog_gpu import MLP, ForwardJacobi, Leapfrog, Sequential, TimeNewton, reference
from leapfrog_gpu.core.functions import ACTIVATIONS, COSTS, OUTPUT_ACTIVATIONS

SIZES = [7, 13, 5, 11, 3]
GRADIENTS = layer_names(len(SIZES), "nabla_b", "nabla_w")


def finite_differences(weights, biases, x, y, **kind):
    """dC/dp for every parameter p, by central differences of the reference cost."""
    def cost():
        return reference.cost(weights, biases, x, y, **kind)

    return [[central(cost, p) for p in params] for params in (biases, weights)]


def relative_error(got, want):
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)


OUTPUTS = [("quadratic", output) for output in OUTPUT_ACTIVATIONS] + [("cross_entropy", "sigmoid")]
"""Every cost with every output activation it accepts."""


@pytest.mark.parametrize("size", [1, 5], ids=batch_id)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("cost,output_activation", OUTPUTS)
def test_sequential_matches_finite_differences(activation, cost, output_activation, size):
    x, y = batch(SIZES, size, seed=size)
    with MLP(SIZES, activation=activation, cost=cost, dtype="float64", seed=3, backend="numpy",
             output_activation=output_activation) as net:
        nabla_b, nabla_w = net.backprop(x, y, Sequential())
        weights = [w.copy() for w in net.weights]
        biases = [b.copy() for b in net.biases]
        kind = dict(activation=activation, cost=cost, output_activation=output_activation)
    fd_b, fd_w = finite_differences(weights, biases, x, y, **kind)
    for name, got, want in zip(GRADIENTS, nabla_b + nabla_w, fd_b + fd_w):
        assert relative_error(got, want) < 1e-6, f"{name}: relative error {relative_error(got, want):.3g}"


@pytest.mark.parametrize("activation,cost", list(itertools.product(ACTIVATIONS, COSTS)))
@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-5), ("float64", 1e-12)])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=schedule_id)
def test_backends_match_reference(backend_name, activation, cost, dtype, rtol, schedule):
    """Both backends against the float64 reference; on the GPU this checks the CUDA kernels.

    Tolerances: float32 is compared with a float64 reference on layers of width <= 13, where a plain
    float32 implementation errs by a few ulp (~1e-7 relative); 1e-5 leaves two orders for accumulation
    order. float64 likewise at 1e-12.
    """
    x, y = batch(SIZES, 6, seed=1)
    with MLP(SIZES, activation=activation, cost=cost, dtype=dtype, seed=5, backend=backend_name) as net:
        nabla_b, nabla_w = net.backprop(x, y, schedule)
        weights = [to_numpy(w).astype(np.float64) for w in net.weights]
        biases = [to_numpy(b).astype(np.float64) for b in net.biases]
        kind = dict(activation=activation, cost=cost, output_activation=net.output_activation)
    want_b, want_w = reference.backprop(weights, biases, x, y, **kind)
    for name, got, want in zip(GRADIENTS, nabla_b + nabla_w, want_b + want_w):
        error = relative_error(to_numpy(got), want)
        assert error <= rtol, f"{name}: relative error {error:.3g} against the reference"


def test_feedforward_matches_reference(backend_name):
    x, _ = batch(SIZES, 4)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend_name) as net:
        got = to_numpy(net.feedforward(x))
        weights = [to_numpy(w) for w in net.weights]
        biases = [to_numpy(b) for b in net.biases]
    want = reference.feedforward(weights, biases, x, "tanh", "tanh")
    assert relative_error(got, want) <= 1e-12


@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("output_activation", OUTPUT_ACTIVATIONS)
def test_the_references_gradient_is_the_derivative_of_its_cost(cost, output_activation):
    """Every cost with every output, those the networks refuse too: the reference took a^L - y for the
    cross-entropy's (4) whatever the output, right for a sigmoid's alone. Small positive weights keep every output
    in (0, 1), where the cross-entropy is finite."""
    rng = np.random.default_rng(1)
    weights = [rng.uniform(0.05, 0.2, (4, 3)), rng.uniform(0.05, 0.2, (2, 4))]
    biases = [np.full(4, 0.1), np.full(2, 0.1)]
    x, y = rng.uniform(0.1, 1.0, (3, 5)), rng.uniform(0.1, 0.9, (2, 5))
    kind = dict(activation="tanh", cost=cost, output_activation=output_activation)
    nabla_b, nabla_w = reference.backprop(weights, biases, x, y, **kind)
    fd_b, fd_w = finite_differences(weights, biases, x, y, **kind)
    for name, got, want in zip(["nabla_b^2", "nabla_b^3", "nabla_w^2", "nabla_w^3"], nabla_b + nabla_w, fd_b + fd_w):
        assert relative_error(got, want) < 1e-7, f"{name}: relative error {relative_error(got, want):.3g}"


@pytest.mark.parametrize("call, message", [
    (lambda w, b, x, y: reference.feedforward(w, b, x, "sigmoid", "sigmod"),
     "unknown activation 'sigmod': give one of sigmoid, tanh, relu, identity"),
    (lambda w, b, x, y: reference.backprop(w, b, x, y, activation="linear"),
     "unknown activation 'linear': give one of sigmoid, tanh, relu, identity"),
    (lambda w, b, x, y: reference.cost(w, b, x, y, cost="cross-entropy"),
     "unknown cost 'cross-entropy': give one of quadratic, cross_entropy")], ids=["output", "hidden", "cost"])
def test_the_reference_refuses_a_name_it_does_not_know(call, message):
    """A misspelt activation was taken for the identity, a misspelt cost for the cross-entropy."""
    x, y = batch([3, 4, 2], 2)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call([np.ones((4, 3)), np.ones((2, 4))], [np.zeros(4), np.zeros(2)], x, y)


def test_one_dimensional_input_is_a_batch_of_one():
    x, y = batch(SIZES, 1)
    with MLP(SIZES, dtype="float64", backend="numpy") as net:
        column = net.backprop(x, y)
        flat = net.backprop(x[:, 0], y[:, 0])
    for a, b in zip(column[1], flat[1]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("solver", ["newton", ForwardJacobi, TimeNewton()], ids=repr)
def test_feedforward_refuses_what_is_not_a_forward_solver_of_an_mlp(solver):
    """A name, the class rather than an instance, or an RNN's solver: a TypeError that says what ``solver`` must be."""
    with MLP(SIZES, backend="numpy") as net:
        message = (r"solver must be None \(the forward layer by layer\), ForwardJacobi\(\) or ForwardNewton\(\); "
                   f"got {re.escape(repr(solver))}")
        with pytest.raises(TypeError, match=f"^{message}$"):
            net.feedforward(np.ones((SIZES[0], 2)), solver=solver)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2, fused=True)], ids=["sequential", "fused"])
def test_float32_bias_gradients_of_a_large_batch_are_one_rounding_from_the_sum(schedule):
    """nabla_b sums delta over B = 65536 samples: the host's batch-major delta was summed one sample after another
    in float32, 6e-4 from the float64 reference's sum (PyTorch's float32: 4e-7); now in float64, one rounding."""
    rng = np.random.default_rng(3)
    sizes, batch = [2, 3, 2], 65536
    x = np.repeat(rng.uniform(-1, 1, (2, 1)), batch, axis=1).astype(np.float32)  # one sample, B times
    y = np.repeat(rng.uniform(0, 1, (2, 1)), batch, axis=1).astype(np.float32)
    with MLP(sizes, backend="numpy", dtype="float32", seed=4) as net:
        weights, biases = [w.astype(np.float64) for w in net.weights], [b.astype(np.float64) for b in net.biases]
        got = net.gradients(x, y, schedule)
    want, _ = reference.backprop(weights, biases, x.astype(np.float64), y.astype(np.float64))
    for l, b in zip((2, 3), want):
        assert np.max(np.abs(got[l]["b"] - b)) / np.max(np.abs(b)) < 2e-6
