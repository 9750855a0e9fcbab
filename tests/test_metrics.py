"""Loss and accuracy on the host: chunking does not change them, and they agree with the reference."""

import numpy as np
import pytest

from leapfrog_gpu import MLP, reference
from leapfrog_gpu.tools import metrics


@pytest.mark.parametrize("cost", ["quadratic", "cross_entropy"])
def test_evaluate_matches_the_reference_in_any_chunking(cost):
    rng = np.random.default_rng(3)
    x = rng.random((6, 23))
    labels = rng.integers(0, 4, 23)
    y = np.eye(4)[:, labels]
    with MLP([6, 9, 9, 4], activation="tanh", cost=cost, dtype="float64", backend="numpy") as net:
        whole = metrics.evaluate(net, x, y, batch=23, classes=4)
        chunked = metrics.evaluate(net, x, y, batch=5, classes=4)  # 4 chunks of 5 and one of 3
        output = "sigmoid" if cost == "cross_entropy" else "tanh"
        expected = reference.cost(net.weights, net.biases, x, y, "tanh", cost, output) / 23
        a = reference.feedforward(net.weights, net.biases, x, "tanh", output)
    assert whole[0] == pytest.approx(expected, rel=1e-12) and chunked[0] == pytest.approx(expected, rel=1e-12)
    assert whole[1] == chunked[1] == np.mean(a.argmax(axis=0) == labels)


def test_cross_entropy_is_finite_when_a_sigmoid_saturates_and_nan_when_the_network_is():
    y = np.array([[1.0, 0.0]])
    assert np.isfinite(metrics.cost("cross_entropy", np.array([[0.0, 1.0]], dtype=np.float32), y))
    assert metrics.cost("cross_entropy", np.array([[0.5, 0.5]]), y) == pytest.approx(2 * np.log(2))
    assert np.isnan(metrics.cost("cross_entropy", np.array([[np.nan, 0.5]]), y))
    assert np.isnan(metrics.cost("quadratic", np.array([[np.nan, 0.5]]), y))
