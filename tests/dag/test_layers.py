"""Every layer's products and Jacobian blocks against central finite differences in float64, the
dot-product test <u, J v> = <J^T u, v>, and a layer defined here, trained inside a DAG."""

import numpy as np
import pytest

from leapfrog_gpu.backends.host import NumpyBackend
from helpers import Gate, central
from leapfrog_gpu.dag.layers import Add, Concat, Dense, LayerNorm

B = 3


CASES = [
    (Dense(4, "sigmoid"), [5]), (Dense(4, "tanh"), [5]), (Dense(3, "identity"), [6]), (Dense(5, "relu"), [4]),
    (Add(), [4, 4]), (Add(), [3, 3, 3]), (Concat(), [2, 4, 3]), (LayerNorm(), [5]), (Gate(), [4]),
]


@pytest.fixture(scope="module")
def backend():
    with NumpyBackend(mode="serial") as backend:
        yield backend


def setup(layer, sizes, seed=0):
    rng = np.random.default_rng(seed)
    params = {name: value + 0.1 * rng.standard_normal(value.shape) for name, value in layer.init(rng, sizes).items()}
    inputs = [rng.standard_normal((n, B)) for n in sizes]
    abar = rng.standard_normal((layer.size(sizes), B))
    return params, inputs, abar


def cost(backend, layer, params, inputs, abar):
    """<abar, f(inputs)>: its gradient is the vector-Jacobian product of abar."""
    return float(np.sum(abar * layer.forward(backend, params, inputs)[0]))


def products(backend, layer, params, inputs, abar):
    _, saved = layer.forward(backend, params, inputs)
    g = layer.error(backend, params, saved, abar)
    return layer.vjp_inputs(backend, params, inputs, saved, g), layer.vjp_params(backend, params, inputs, saved, g)


@pytest.mark.parametrize("layer,sizes", CASES, ids=lambda c: repr(c))
def test_products_match_central_differences(backend, layer, sizes):
    params, inputs, abar = setup(layer, sizes)
    if isinstance(layer, Dense) and layer.activation == "relu":
        inputs[0] += np.sign(inputs[0]) * 0.5  # keep z away from relu's kink
    got_inputs, got_params = products(backend, layer, params, inputs, abar)
    assert len(got_inputs) == len(inputs) and set(got_params) == set(layer.params)
    f = lambda: cost(backend, layer, params, inputs, abar)  # noqa: E731
    for x, got in zip(inputs, got_inputs):
        np.testing.assert_allclose(got, central(f, x), rtol=1e-6, atol=1e-8)
    for name, got in got_params.items():
        np.testing.assert_allclose(got, central(f, params[name]), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("layer,sizes", CASES, ids=lambda c: repr(c))
def test_jacobian_blocks_match_central_differences_and_their_products(backend, layer, sizes):
    params, inputs, _ = setup(layer, sizes, seed=1)
    _, saved = layer.forward(backend, params, inputs)
    rng = np.random.default_rng(2)
    n = layer.size(sizes)
    for i, x in enumerate(inputs):
        block = layer.jacobian(backend, params, inputs, saved, i)
        assert block.shape == (n, x.shape[0]) and block.batch == B
        dense = block.dense()
        for r in range(n):
            def row():
                return layer.forward(backend, params, inputs)[0][r].sum()
            # column sums over the batch separate by sample: each sample's output depends on its own input only
            np.testing.assert_allclose(dense[:, r, :].T, central(row, x), rtol=1e-6, atol=1e-8)
        u, v = rng.standard_normal((n, B)), rng.standard_normal((x.shape[0], B))
        np.testing.assert_allclose(block.matvec(v), np.einsum("bij,jb->ib", dense, v), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(block.rmatvec(u), np.einsum("bij,ib->jb", dense, u), rtol=1e-12, atol=1e-14)
        left, right = np.sum(u * block.matvec(v)), np.sum(block.rmatvec(u) * v)
        assert abs(left - right) <= 1e-12 * max(1.0, abs(left))
        g = layer.error(backend, params, saved, u)
        np.testing.assert_allclose(layer.vjp_inputs(backend, params, inputs, saved, g)[i], block.rmatvec(u),
                                   rtol=1e-12, atol=1e-14)


def test_dense_keeps_w_out_of_per_sample_storage(backend):
    params, inputs, _ = setup(Dense(6, "tanh"), [5])
    _, saved = Dense(6, "tanh").forward(backend, params, inputs)
    block = Dense(6, "tanh").jacobian(backend, params, inputs, saved, 0)
    assert block.w is params["w"] and block.d.shape == (6, B)


@pytest.mark.parametrize("layer,sizes,message", [
    (Dense(3), [2, 2], "Dense takes one input"), (Add(), [3, 4], "one width"), (Add(), [3], "two or more"),
    (LayerNorm(), [1], "width >= 2"),
])
def test_shapes_that_do_not_fit_say_so(layer, sizes, message):
    with pytest.raises(ValueError, match=message):
        layer.size(sizes)


def test_dense_refuses_a_bad_width_or_activation():
    with pytest.raises(ValueError, match="width n >= 1"):
        Dense(0)
    for bad in ("3", 2.5, True):  # not an integer: a TypeError naming the type given
        with pytest.raises(TypeError, match=rf"^Dense needs a width n, an integer >= 1; got .* \({type(bad).__name__}\)$"):
            Dense(bad)
    with pytest.raises(ValueError, match="activation"):
        Dense(3, "softplus")


def test_dense_takes_any_integral_width():
    dense = Dense(np.int64(3))
    assert type(dense.n) is int and dense.n == 3 and dense.options() == {"n": 3, "activation": "sigmoid"}


POSITIVE = "LayerNorm's eps must be a finite number > 0 (it keeps sqrt(var + eps) from 0); got "


@pytest.mark.parametrize("eps,error,message", [
    (-1.0, ValueError, POSITIVE + "-1.0"), (0, ValueError, POSITIVE + "0"),
    (float("nan"), ValueError, POSITIVE + "nan"), (float("inf"), ValueError, POSITIVE + "inf"),
    ("small", TypeError, POSITIVE + "'small' (str)"), (True, TypeError, POSITIVE + "True (bool)"),
])
def test_layer_norm_refuses_an_eps_that_is_not_a_positive_finite_number(eps, error, message):
    with pytest.raises(error) as info:
        LayerNorm(eps=eps)
    assert str(info.value) == message


def test_float32_layernorm_sums_of_a_large_batch_are_one_rounding_from_the_sum():
    """LayerNorm's nabla_gamma and nabla_beta sum over B = 65536 samples as (6) sums nabla_b: in float64 on the host,
    one rounding from the float64 reference (a float32 sum, one sample after another, was 5e-4 off)."""
    from leapfrog_gpu import DagNet

    rng = np.random.default_rng(5)
    batch, gamma, beta = 65536, rng.uniform(0.5, 2, 3), rng.uniform(-1, 1, 3)
    x = np.repeat(rng.uniform(-1, 1, (3, 1)), batch, axis=1).astype(np.float32)  # one sample, B times
    y = np.repeat(rng.uniform(0, 1, (3, 1)), batch, axis=1).astype(np.float32)
    with DagNet(3, [("norm", LayerNorm(), "x")], dtype="float32") as net:
        net.set_parameters({"norm": {"gamma": gamma, "beta": beta}})
        got = net.gradients(x, y)["norm"]
    sample = x[:, 0].astype(np.float64)
    centred = sample - sample.mean()
    xhat = centred / np.sqrt((centred ** 2).mean() + LayerNorm().eps)
    error = gamma.astype(np.float32).astype(np.float64) * xhat + beta.astype(np.float32) - y[:, 0]  # dC/da, one sample
    for name, want in (("gamma", batch * error * xhat), ("beta", batch * error)):
        assert np.max(np.abs(got[name] - want)) / np.max(np.abs(want)) < 2e-6, name
