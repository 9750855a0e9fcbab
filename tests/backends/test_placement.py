"""Where the host puts the arrays an update streams together (``ops_numpy.full_beside``): each optimizer slot and
each gradient buffer starts its own quarter of a page after its parameter, modulo a page, so that no load of one
waits on a store to another (4K aliasing); on a GPU the same call is a plain ``full_like``."""

import numpy as np
import pytest

from leapfrog_gpu import SGD, Adam, Leapfrog
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.backends.host import NumpyBackend
from networks import network, network_batch


def _offset(array, param):
    """Bytes from param's start to array's, modulo a page."""
    return (array.ctypes.data - param.ctypes.data) % ops_numpy.PAGE


def _params():
    """Contiguous parameters of both orders, empty and single ones, and views that start off any boundary."""
    rng = np.random.default_rng(0)
    yield rng.standard_normal((33, 65)).astype(np.float32)
    yield np.asfortranarray(rng.standard_normal((17, 9)))
    yield rng.standard_normal(1029)[3:1027]  # starts 24 bytes into its allocation
    yield rng.standard_normal(1).astype(np.float32)
    yield np.zeros((0, 4), dtype=np.float32)
    yield rng.standard_normal((1024, 1024)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("fill", [0.0, np.nan, -2.5])
@pytest.mark.parametrize("param", list(_params()), ids=lambda p: f"{p.dtype}{p.shape}")
def test_full_beside_is_a_filled_array_like_the_parameter_k_quarter_pages_after_it(param, k, fill):
    before = param.copy()
    out = ops_numpy.full_beside(param, k, fill)
    assert (out.shape, out.dtype) == (param.shape, param.dtype)
    assert (out.flags.c_contiguous, out.flags.f_contiguous) == (param.flags.c_contiguous, param.flags.f_contiguous)
    assert out.flags.writeable and out.flags.aligned
    np.testing.assert_array_equal(out, np.full(param.shape, fill, dtype=param.dtype))
    if param.size:
        assert _offset(out, param) == k * ops_numpy.PAGE // 4
        assert not np.shares_memory(out, param)
        out[...] = 7
        np.testing.assert_array_equal(param, before)


def test_full_beside_on_a_gpu_is_full_like(backend):
    """On the CuPy stand-in: a new array shaped and typed as the parameter, filled, its memory its own."""
    param = backend.xp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    out = backend.ops.full_beside(param, 2, np.nan)
    assert (out.shape, out.dtype) == (param.shape, param.dtype)
    assert np.isnan(backend.xp.asnumpy(out)).all()
    out.fill(1)
    np.testing.assert_array_equal(backend.xp.asnumpy(param), np.arange(12).reshape(3, 4))


@pytest.mark.parametrize("optimizer, slots", [(Adam(1e-3), ("exp_avg", "exp_avg_sq")),
                                              (SGD(0.1, momentum=0.9), ("momentum_buffer",))])
@pytest.mark.parametrize("name, options", [("MLP", {}), ("RNN", {"cell": "gru"}), ("RNN", {"cell": "lstm"}),
                                           ("DagNet", {})])
def test_each_slot_and_gradient_starts_its_own_quarter_page_after_its_parameter(name, options, optimizer, slots):
    """The k-th slot k quarter-pages after the parameter, and the gradient buffers of the MLP's and the RNN's plans
    (a DagNet's layers make their gradients as they go) three."""
    with NumpyBackend() as backend:
        net = network(name, backend, dtype="float64", **options)
        x, y = network_batch(name, dtype=np.float64)
        net.train_step(x, y, optimizer, Leapfrog(2, fused=True))
        net.train_step(x, y, optimizer, Leapfrog(2))
        backend.synchronize()
        live, state = net._live(), net._controls.state
        offsets = {(unit, key, slot): _offset(held[slot], live[unit][key])
                   for unit, named in state.items() for key, held in named.items() for slot in held}
        assert offsets == {(unit, key, slot): k * 1024 for unit, named in live.items() for key in named
                           for k, slot in enumerate(slots, start=1)}
        if name != "DagNet":
            (plan,) = net._plans.values()
            gradients = {(unit, key): _offset(array, live[unit][key])
                         for unit, named in plan.gradient_arrays().items() for key, array in named.items()}
            assert gradients == {(unit, key): 3 * 1024 for unit, named in live.items() for key in named}
