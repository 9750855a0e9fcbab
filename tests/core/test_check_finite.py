"""``check_finite`` names the deepest gradient that holds NaN or Inf: a NaN in w^L reaches every gradient
(delta^L, then every delta below it through (5)), and the refusal names ``nabla_w[L]``, on the NumPy
backend and on the CuPy stand-in, eager and as a graph; a -inf, +inf or NaN beside finite values in a
gradient is refused as well; a recurrent network's step with a NaN in any one of its gradients alone, of
every cell, is refused naming that gradient."""

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


def nan_in_the_last_weights(net, at=(1, 2), samples=3):
    """Set w^L[at] to NaN in ``net``'s own parameters (``set_parameters`` refuses a NaN, as a batch is
    refused, so it goes in through the view of them of the plan for ``samples``); return host copies of what
    they then hold."""
    net.synchronize()
    xp = net.backend.xp
    net.plan(samples).w[net.L][at] = np.nan  # on CuPy, on the current stream, which the network's do not wait for
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


@pytest.mark.parametrize("bad", ["-inf", "+inf", "nan"])
def test_one_bad_value_beside_finite_ones_is_refused(backend, bad):
    """MLP [1, 2], quadratic cost, sigmoid output, w = b = 0: a = 1/2 and delta = (a - y) a (1 - a) = (1/2 - y) / 4
    per sample. x = 3.4e38 on 16 samples: y_1 = 1 (or 0) makes nabla_w_1 = 16 · 3.4e38 · (1/2 - y_1) / 4 =
    -6.8e38 (+6.8e38), past float32's largest, -inf (+inf), while y_2 = 1/2 keeps nabla_w_2 = 0; or y_1 = 1/2
    and a NaN in w_2 make nabla_w_2 NaN beside nabla_w_1 = 0. Each is refused: a -inf beside 0 is neither the
    largest value nor NaN."""
    y_1, want = {"-inf": (1.0, [-np.inf, 0.0]), "+inf": (0.0, [np.inf, 0.0]), "nan": (0.5, [0.0, np.nan])}[bad]
    x = np.full((1, 16), 3.4e38, dtype=np.float32)
    y = np.array([[y_1] * 16, [0.5] * 16], dtype=np.float32)
    for check_finite in (False, True):
        with MLP([1, 2], dtype="float32", backend=backend, output_activation="sigmoid",
                 check_finite=check_finite) as net:
            net.set_parameters({2: {"w": np.zeros((2, 1)), "b": np.zeros(2)}})
            before = nan_in_the_last_weights(net, (1, 0), 16) if bad == "nan" else host(net.weights + net.biases)
            if not check_finite:  # the gradient is as the comment above has it
                np.testing.assert_array_equal(host([net.gradients(x, y)[2]["w"]])[0], np.array([want]).T)
                continue
            net.sgd_step(x, y, 0.1)
            with pytest.raises(FloatingPointError) as refused:
                net.synchronize()
            assert str(refused.value) == "nabla_w[2] holds NaN or Inf; update refused, parameters unchanged"
            for got, was in zip(host(net.weights + net.biases), before):
                np.testing.assert_array_equal(got, was)


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
