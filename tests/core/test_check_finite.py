"""``check_finite`` names the deepest gradient that holds NaN or Inf: a NaN in w^L reaches every gradient
(delta^L, then every delta below it through (5)), and the refusal names ``nabla_w[L]``, on the NumPy
backend and on the CuPy stand-in, eager and as a graph; a recurrent network's step with a NaN in any one of
its gradients alone, of every cell, is refused naming that gradient."""

import numpy as np
import pytest

from helpers import STANDIN_ORDERS, batch, host, install_standin
from leapfrog_gpu import MLP, RNN, Leapfrog, Sequential, reference
from leapfrog_gpu.rnn.plan import RNNPlan

SIZES = [7, 13, 5, 11, 3]
L = len(SIZES)


@pytest.fixture(params=["numpy", *(f"stand-in {order}" for order in STANDIN_ORDERS)])
def backend(request, monkeypatch):
    """The NumPy backend, or the CuPy backend on the stand-in under each of its orders."""
    if request.param == "numpy":
        yield "numpy"
        return
    install_standin(monkeypatch, request.param.removeprefix("stand-in "))
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cupy_backend:
        yield cupy_backend


def nan_in_the_last_weights(net):
    """Set w^L[1, 2] to NaN in ``net``'s own parameters (``set_parameters`` refuses a NaN, as a batch is
    refused, so it goes in through the plan's view of them); return host copies of what they then hold."""
    net.synchronize()
    xp = net.backend.xp
    net.plan(3).w[net.L][1, 2] = np.nan  # on CuPy, on the current stream, which the network's do not wait for
    if xp is not np:
        xp.cuda.Device().synchronize()
    return host(net.weights) + host(net.biases)


def test_a_nan_in_the_last_weights_reaches_every_gradient(backend):
    x, y = batch(SIZES, 3)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend) as net:
        nan_in_the_last_weights(net)
        nabla_b, nabla_w = net.backprop(x, y)
        assert all(np.isnan(g).any() for g in host(nabla_b + nabla_w))


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=repr)
def test_the_refusal_names_the_deepest_bad_gradient(backend, schedule, graph):
    x, y = batch(SIZES, 3)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend, check_finite=True) as net:
        before = nan_in_the_last_weights(net)
        net.sgd_step(x, y, 0.5, schedule, graph=graph)
        with pytest.raises(FloatingPointError) as refused:
            net.synchronize()
        assert str(refused.value) == f"nabla_w[{L}] holds NaN or Inf; update refused, parameters unchanged"
        for got, want in zip(host(net.weights + net.biases), before):
            np.testing.assert_array_equal(got, want)


def test_gradients_say_the_check_refused_them_not_an_update(backend):
    """No step ran: the error says the check refused the gradients, and clears, so that the next step updates."""
    x, y = batch(SIZES, 3)
    with MLP(SIZES, activation="tanh", dtype="float64", backend=backend, check_finite=True) as net:
        nan_in_the_last_weights(net)
        with pytest.raises(FloatingPointError) as refused:
            net.gradients(x, y)
        assert str(refused.value) == f"nabla_w[{L}] holds NaN or Inf; check_finite=True refuses such gradients"
        net.set_parameters({L: {"w": np.zeros((SIZES[-1], SIZES[-2]))}})
        before = host(net.weights)
        net.sgd_step(x, y, 0.5)
        assert not np.array_equal(host(net.weights)[-1], before[-1])


def test_gradients_behind_a_step_that_updated_say_the_check_refused_them():
    """A finite step enqueued, not awaited, then gradients() of a batch that overflows: the step updated, and the
    refusal is the gradients', said as theirs (the step's flag, left set, had said "update refused")."""
    sizes = [4, 4, 2]
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 8)), rng.random((2, 8))
    with MLP(sizes, activation="relu", dtype="float64", backend="numpy", check_finite=True) as net:
        _, nabla_w = reference.backprop(net.weights, net.biases, x, y, "relu", output_activation="relu")
        want = [w - 0.1 / 8 * g for w, g in zip(net.weights, nabla_w)]
        net.sgd_step(x, y, 0.1)
        with pytest.raises(FloatingPointError) as refused:
            net.gradients(np.full((4, 8), 1e300), y)
        assert str(refused.value).endswith("holds NaN or Inf; check_finite=True refuses such gradients")
        for got, w in zip(host(net.weights), want):
            np.testing.assert_allclose(got, w, rtol=1e-12)


def nan_in_one_gradient(monkeypatch, unit, name):
    """Have every pass of an RNN write NaN into one element of its gradient of ``unit``'s ``name`` alone, on the
    main stream, once the gradients are computed and before the check reads them."""
    check = RNNPlan.check_gradients

    def poisoned(plan, controls):
        gradient = plan.gradient_arrays()[unit][name]
        plan.backend.launch(plan.main, "nan", gradient.__setitem__, (-1,) * gradient.ndim, np.nan)
        check(plan, controls)

    monkeypatch.setattr(RNNPlan, "check_gradients", poisoned)


@pytest.mark.parametrize("schedule", [Sequential(), Leapfrog(2)], ids=repr)
@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_a_nan_in_any_one_recurrent_gradient_is_refused_naming_it(monkeypatch, cell, schedule):
    """Every gradient the network has (one per parameter, as ``parameters()`` lists them, a GRU's b_hn
    among them) is checked: a NaN in it alone refuses the step, names it, and leaves the parameters as
    they were, bit for bit."""
    sizes = [3, 4, 5, 2]
    x, y = batch(sizes, 2, tau=3)
    with RNN(sizes, cell=cell, output="every", dtype="float64", backend="numpy", check_finite=True) as net:
        before = net.parameters()
        names = [(unit, name) for unit, named in before.items() for name in named]
        assert ("b_hn" in {name for _, name in names}) == (cell == "gru")
        for unit, name in names:
            with monkeypatch.context() as patch:
                nan_in_one_gradient(patch, unit, name)
                net.sgd_step(x, y, 0.5, schedule)
                with pytest.raises(FloatingPointError) as refused:
                    net.synchronize()
            assert str(refused.value) == f"nabla_{name}[{unit}] holds NaN or Inf; update refused, parameters unchanged"
            after = net.parameters()
            for l in before:
                for k in before[l]:
                    assert np.array_equal(after[l][k], before[l][k]), (unit, name, l, k)
