"""The SGD step itself: ``w - eta/B * nabla_w`` and ``b - eta/B * nabla_b``, for every schedule, fused
and not, on host streams in each deferred order and on the CuPy stand-in in each of its orders.

Comparing a schedule with ``Sequential()`` shows that they agree, not that the update is right (both
run the same update), so the expected parameters come from ``backprop``'s gradients and, independently,
from the plain reference's.
"""

import numpy as np
import pytest

from helpers import STANDIN_ORDERS, batch, batch_id, host, install_standin, layer_names, schedule_id
from leapfrog_gpu import MLP, Leapfrog, NaumovJacobi, NaumovScan, Sequential, reference
from leapfrog_gpu.backends.host import ORDERS, NumpyBackend

SIZES = [7, 13, 5, 11, 3]
ETA = 0.5
SCHEDULES = [make(fused) for fused in (False, True) for make in (
    Sequential, lambda fused: Leapfrog(2, fused=fused), lambda fused: NaumovScan(k=2, fused=fused),
    lambda fused: NaumovJacobi(k=3, fused=fused))]


@pytest.fixture(params=[("numpy", order) for order in ORDERS] + [("cupy", order) for order in STANDIN_ORDERS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def backend(request, monkeypatch):
    kind, order = request.param
    if kind == "numpy":
        with NumpyBackend(mode="deferred", order=order) as host:
            yield host
        return
    install_standin(monkeypatch, order)
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as device:
        yield device


@pytest.mark.parametrize("size", [1, 4], ids=batch_id)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=schedule_id)
def test_sgd_step_is_w_minus_eta_over_b_times_nabla_w(backend, schedule, size):
    x, y = batch(SIZES, size, seed=size)
    with MLP(SIZES, activation="tanh", dtype="float64", seed=2, backend=backend) as net:
        weights, biases = host(net.weights), host(net.biases)
        nabla_b, nabla_w = net.backprop(x, y, Sequential())
        net.sgd_step(x, y, ETA, schedule)
        got = host(net.weights + net.biases)
        want_b, want_w = reference.backprop(weights, biases, x, y, "tanh", "quadratic", "tanh")
    params = weights + biases
    from_backprop = [p - ETA / size * g for p, g in zip(params, host(nabla_w + nabla_b))]
    from_reference = [p - ETA / size * g for p, g in zip(params, want_w + want_b)]
    for name, g, a, b in zip(layer_names(len(SIZES), "w", "b"), got, from_backprop, from_reference):
        np.testing.assert_allclose(g, a, rtol=1e-13, atol=1e-15, err_msg=f"step 1: {name} against backprop's")
        np.testing.assert_allclose(g, b, rtol=1e-10, atol=1e-13, err_msg=f"step 1: {name} against the reference")
