"""The chance level and the divergence rule; every metric ``leapfrog-train`` writes is the direct computation
from its network's outputs (the library's evaluation itself: tests/core/test_fitting.py)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import cli
from leapfrog_gpu.backends import BACKENDS
from leapfrog_gpu.core import fitting
from leapfrog_gpu.tools.train import checkpoint, metrics, models


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
        assert fitting.cost(cost, a, y, np.float64) / y.shape[1] > expected


@pytest.mark.parametrize("samples_per_s, said", [(1234.4, "1,234 samples/s"), (0.4, "0 samples/s"),
                                                   (None, "no step run")])
def test_an_epochs_speed_in_words(samples_per_s, said):
    """The epoch's line says its speed, or that it ran no step (resumed after its last: tests/core/test_fitting.py)."""
    assert metrics.speed(samples_per_s) == said


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
        "the run learns nothing: its training loss was 9 at the start and is 3.26 now, at or above chance level "
        "(3.25, what a constant output scores) for the last 5 epochs")
    assert judge([3.3, 3.3, 3.3, 3.3, 3.2, 3.3, 3.3, 3.3, 3.3]) == [None] * 9
    # The count goes on across a resume.
    assert metrics.Divergence(9.0, 3.25, epochs_at_chance=4).check(27.6) is not None


RUNS = {  # model, data: the output of every sample, or of every step of a sequence; a class or a value
    "mlp-digits": ["--model", "mlp", "--data", "digits", "--hidden", "2x12"],
    "mlp-teacher": ["--model", "mlp", "--data", "teacher", "--hidden", "2x12", "--samples", "300"],
    "resmlp-digits": ["--model", "resmlp", "--data", "digits", "--hidden", "2x12", "--skip", "1"],  # a skip: s3
    "resmlp-teacher": ["--model", "resmlp", "--data", "teacher", "--hidden", "2x12", "--samples", "300", "--skip", "1"],
    "rnn-digits": ["--model", "rnn", "--data", "digits", "--hidden", "1x12"],  # the output at the last step
    "rnn-teacher": ["--model", "rnn", "--data", "teacher", "--hidden", "1x12", "--samples", "300", "--tau", "6"],
}


def direct(name, net, x, y, classes):
    """Mean cost per sample, and the test metric, of ``net`` on (x, y) from one ``feedforward`` of every sample:
    accuracy the fraction of samples whose largest output is the target's class, mse the mean of (a - y)^2 over
    every output value (of every step) of every sample."""
    a, y = np.asarray(net.feedforward(x), np.float64), np.asarray(y, np.float64)
    if name == "cross_entropy":
        loss = -np.sum(y * np.log(a) + (1 - y) * np.log(1 - a)) / y.shape[-1]
    else:
        loss = 0.5 * np.sum((a - y) ** 2) / y.shape[-1]
    if classes:
        return loss, np.mean(np.argmax(a, axis=-2) == np.argmax(y, axis=-2))
    return loss, np.mean((a - y) ** 2)


@pytest.mark.parametrize("run", RUNS)
def test_every_metric_the_command_writes_is_the_direct_computation(tmp_path, run):
    """``leapfrog-train --metrics``: the train and test loss and the test accuracy or mse of the network it
    checkpointed, computed here from its outputs on the whole sets at once."""
    if "digits" in run:
        pytest.importorskip("sklearn", reason="the digits come with scikit-learn")
    assert cli(*RUNS[run], "--epochs", 1, "--dtype", "float64", "--backend", "numpy", "--quiet", "--metrics",
               tmp_path / "m.jsonl", "--checkpoint-dir", tmp_path) == 0
    (line,) = [json.loads(text) for text in (tmp_path / "m.jsonl").read_text().splitlines()]
    config = checkpoint.load(tmp_path)[1]["config"]
    dataset = models.dataset(config)
    with models.load(tmp_path, backend="numpy") as net:
        assert net.dtype == "float64" and dataset.y_test.shape[-2] > 1  # an error off by n_L shows
        assert dataset.x_test.ndim == (3 if config["model"] == "rnn" else 2)
        train_loss, _ = direct(net.cost, net, dataset.x_train, dataset.y_train, dataset.classes)
        test_loss, metric = direct(net.cost, net, dataset.x_test, dataset.y_test, dataset.classes)
    key = "test_accuracy" if dataset.classes else "test_mse"
    other = "test_mse" if dataset.classes else "test_accuracy"
    assert {"train_loss", "test_loss", key} <= set(line) and other not in line
    assert line["train_loss"] == pytest.approx(train_loss, rel=1e-9)
    assert line["test_loss"] == pytest.approx(test_loss, rel=1e-9)
    assert line[key] == pytest.approx(metric, rel=1e-9)


def doc_table():
    """The metrics lines' table in docs/training.md: ``{key: the backticked words of its row}`` in its order."""
    text = (Path(__file__).resolve().parents[3] / "docs/training.md").read_text(encoding="utf-8")
    rows = text.split("### The metrics lines")[1].split("\n\n")[2].splitlines()[2:]
    cells = [row.split(" | ", 1) for row in rows]
    return {key.strip("|` "): re.findall(r"`([^`]+)`", rest) for key, rest in cells}


def test_the_docs_table_lists_every_key_and_value_the_metrics_write(tmp_path):
    """Every key a ``--metrics`` line holds, in its order, and every value an enumerated key can take."""
    assert cli(*RUNS["mlp-teacher"], "--epochs", 1, "--quiet", "--metrics", tmp_path / "m.jsonl") == 0
    written = list(json.loads((tmp_path / "m.jsonl").read_text()))
    table = doc_table()
    assert [key for key in table if key != "test_accuracy"] == written
    solvers = {"sequential", *(name for names in models.FORWARD_SOLVERS.values() for name in names)}
    for key, values in {"model": set(models.DATA), "data": {name for names in models.DATA.values() for name in names},
                        "backend": set(BACKENDS) - {"auto"}, "forward_solver": solvers}.items():
        assert set(table[key]) - ({*models.DATA} if key == "data" else set()) == values, key  # data: per model
    regression = set(models.REGRESSION)
    classification = {name for names in models.DATA.values() for name in names} - regression
    row = {key: line for line in (Path(__file__).resolve().parents[3] / "docs/training.md").read_text(
        encoding="utf-8").splitlines() for key in ("test_accuracy", "test_mse") if line.startswith(f"| `{key}` |")}
    assert all(name in row["test_accuracy"].lower() for name in classification), row["test_accuracy"]
    assert all(name in row["test_mse"] for name in regression), row["test_mse"]
