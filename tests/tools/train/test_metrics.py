"""Loss and accuracy on the host: chunking does not change them, and they agree with the reference."""

import numpy as np
import pytest

from leapfrog_gpu import MLP, reference
from leapfrog_gpu.tools.train import metrics


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


@pytest.mark.parametrize("cost", ["quadratic", "cross_entropy"])
def test_chance_loss_is_the_best_constant_output(cost):
    """The class frequencies p_c score sum_c H(p_c) (cross-entropy) or sum_c p_c (1 - p_c) / 2
    (quadratic), and no other constant output scores less."""
    labels = np.array([0, 0, 0, 1, 2, 2, 0, 1])  # frequencies 1/2, 1/4, 1/4
    y = np.eye(3)[:, labels]
    p = np.array([0.5, 0.25, 0.25])
    expected = (-np.sum(p * np.log(p) + (1 - p) * np.log(1 - p)) if cost == "cross_entropy"
                else np.sum(p * (1 - p)) / 2)
    assert metrics.chance_loss(cost, y) == pytest.approx(expected, rel=1e-12)
    for other in ([0.4, 0.3, 0.3], [0.5, 0.2, 0.3], [1 / 3] * 3):
        a = np.repeat(np.array(other)[:, None], y.shape[1], axis=1)
        assert metrics.cost(cost, a, y) / y.shape[1] > expected


def test_divergence_growth_and_chance_level():
    def judge(losses, start=9.0, chance=3.25):
        rule = metrics.Divergence(start, chance)
        return [rule.check(loss) for loss in losses]

    # Grown past 10x the start (or the chance level, when higher), it stops at once.
    assert judge([8.0, 90.0])[1] is None and "grew from 9 to 90.01" in judge([8.0, 90.01])[1]
    assert judge([32.4], start=1.0)[0] is None and "grew" in judge([32.6], start=1.0)[0]
    # At or above chance level for 5 epochs in a row; any epoch below it starts the count again.
    verdicts = judge([3.3, 3.4, 3.5, 3.25, 3.26])
    assert verdicts[:4] == [None] * 4 and verdicts[4] == (
        "the run learns nothing: its training loss, 3.26, has stayed at or above chance level "
        "(3.25, what a constant output scores) for 5 epochs")
    assert judge([3.3, 3.3, 3.3, 3.3, 3.2, 3.3, 3.3, 3.3, 3.3]) == [None] * 9
    # The count goes on across a resume.
    assert metrics.Divergence(9.0, 3.25, epochs_at_chance=4).check(27.6) is not None
