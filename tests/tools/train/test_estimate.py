"""``leapfrog-train``'s estimate before a run: its arithmetic from the calibration's timings, the words it is said
in, and the question before a run estimated far above the leapfrog schedule's: asked on a terminal (no: exit 2,
nothing trained), a warning elsewhere, neither with ``--yes``."""

import math
import re
import types
import warnings

import pytest

from helpers import SMALL, cli, one_error_line
from leapfrog_gpu import datasets
from leapfrog_gpu.tools.train import estimate, options


class Terminal:
    """A stdin that is a terminal."""

    @staticmethod
    def isatty():
        return True


@pytest.fixture
def timings(monkeypatch):
    """Every calibration pass takes a known time: a step 0.5 s, a forward pass 0.25 s (``calls`` lists them)."""
    calls = []

    def timed(call):
        call()
        name = call.__name__
        calls.append(name)
        return 0.5 if name == "step" else 0.25

    monkeypatch.setattr(estimate, "_timed", timed)
    return calls


@pytest.mark.parametrize("batch, ranks", [(32, 1), (100, 1), (16, 2)])
def test_the_estimate_is_the_steps_and_the_evaluations_at_the_timed_rates(timings, batch, ranks):
    data = datasets.digits("float32")
    config = options.configure({"hidden": [8], "batch_size": batch, "backend": "numpy"}, None)
    config.update(cost="cross_entropy", ranks=ranks, schedule="sequential")
    steps_per_epoch = math.ceil(1437 / (batch * ranks))  # 1437 training samples, 360 test samples
    remaining = 3 * steps_per_epoch - 5  # 5 steps of 3 epochs done
    evaluated = min(1437, max(batch, 256))
    seconds, leapfrog = estimate.calibrate(config, data, "numpy", remaining)
    expected = remaining * 0.5 + (1437 + 3 * (1437 + 360)) / evaluated * 0.25
    assert seconds == pytest.approx(expected, rel=1e-12) and leapfrog == pytest.approx(expected, rel=1e-12)
    assert timings == ["step", "<lambda>"] * 2  # the run's configuration, then the leapfrog schedule's


def test_the_leapfrog_schedule_is_calibrated_once(timings):
    config = options.configure({"hidden": [8], "backend": "numpy"}, None)
    config.update(cost="cross_entropy", ranks=1)
    seconds, leapfrog = estimate.calibrate(config, datasets.digits("float32"), "numpy", 10)
    assert leapfrog is seconds and timings == ["step", "<lambda>"]


@pytest.mark.parametrize("seconds, words", [(0.01, "under 0.1 s"), (0.1, "about 0.1 s"), (3.14159, "about 3.1 s"),
                                            (42.4, "about 42 s"), (59.9, "about 60 s"), (600, "about 10 min"),
                                            (7200, "about 2.0 h"), (47.9 * 3600, "about 47.9 h"),
                                            (12 * 86400, "about 12 days"), (364.4 * 86400, "about 364 days"),
                                            (365 * 86400, "more than a year"), (1e18 * 3600, "more than a year")])
def test_durations_in_words(seconds, words):
    assert estimate.duration(seconds) == words


@pytest.fixture
def slow_run(monkeypatch):
    """The run's configuration estimated at 20x the leapfrog schedule's, which the defaults take for 1x, and at more
    than a minute (the calibration run all the same, its seconds replaced)."""
    real = estimate.calibrate

    def calibrate(*args):
        real(*args)
        return 20 * estimate.WORTH_ASKING, estimate.WORTH_ASKING

    monkeypatch.setattr(estimate, "calibrate", calibrate)


def test_a_slow_run_on_a_terminal_is_asked_about_and_not_started_on_no(slow_run, monkeypatch, capsys, tmp_path):
    asked = []
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "n")
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path) == 2
    assert one_error_line(capsys).endswith("not started: pass --yes to start it without asking, or choose a faster "
                                           "--schedule or --forward-solver")
    assert len(asked) == 1 and "estimated at 20x the leapfrog schedule's" in asked[0]
    assert not list(tmp_path.iterdir()), "nothing trained, nothing written"


def test_a_slow_run_on_a_terminal_starts_on_yes(slow_run, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert cli(*SMALL, "--epochs", 1) == 0
    assert "done: 1 epoch" in capsys.readouterr().out


def test_a_slow_run_off_a_terminal_warns_and_starts(slow_run, monkeypatch, capsys):
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked off a terminal"))
    assert cli(*SMALL, "--epochs", 1) == 0
    captured = capsys.readouterr()
    assert "estimated at 20x the leapfrog schedule's" in captured.err and "starting it" in captured.err
    assert "done: 1 epoch" in captured.out


def test_yes_neither_asks_nor_warns(slow_run, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked despite --yes"))
    assert cli(*SMALL, "--epochs", 1, "--yes") == 0
    assert "estimated at" not in capsys.readouterr().err


def test_a_run_under_a_minute_is_neither_asked_about_nor_warned_of_whatever_its_ratio(monkeypatch, capsys):
    """20x the leapfrog schedule's, but 20 s: it starts (one step timed at ten times its time, as under load, made a
    second's run warn, a line on stderr that a refusal's one line then had beside it)."""
    monkeypatch.setattr(estimate, "calibrate", lambda *args: (20.0, 1.0))
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked about a run under a minute"))
    assert cli(*SMALL, "--epochs", 1) == 0
    assert capsys.readouterr().err == ""


def test_the_estimate_is_printed_before_the_run(capsys):
    assert cli("--hidden", "8", "--epochs", 1, "--schedule", "sequential") == 0
    out = capsys.readouterr().out.splitlines()
    assert re.match(r"estimate: (about|under) [\d.]+ (s|min|h) for the run \(the leapfrog schedule without a forward ",
                    out[2]), out[2]
    assert out[3].startswith("epoch 1/1")


def test_a_step_refused_in_the_calibration_is_one_line_and_exit_2(capsys):
    """The calibration runs the run's own step first: a step the network refuses as set up is refused there, as
    the run's first step would be."""
    assert cli("--model", "rnn", "--data", "teacher", "--hidden", "8", "--samples", "64", "--tau", 4000,
               "--schedule", "naumov-rnn", "--epochs", 1, "--quiet") == 2
    assert one_error_line(capsys).startswith("leapfrog-train: error: NaumovRNN needs ")


def test_a_pass_is_timed_after_one_untimed(monkeypatch):
    """The second call is timed, whatever the first took: that one plans, captures or compiles the optimizer's
    update, once a run (timed, the first Adam step of a process made a digits run look 700x the leapfrog one's)."""
    clock, calls = iter([10.0, 10.25]), []
    monkeypatch.setattr(estimate, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    assert estimate._timed(lambda: calls.append(len(calls))) == 0.25 and calls == [0, 1]


def test_a_loss_made_nan_by_weight_decay_says_so_in_one_line_and_numpy_warns_nothing(capsys):
    """NumPy's warnings of the overflow, from the run's timing steps too (which take its hyper-parameters), are held
    back: the run's own line says it, and names the large --weight-decay beside --lr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli(*SMALL, "--epochs", 1, "--weight-decay", 1e20) == 3
    assert not [w for w in caught if "encountered" in str(w.message)], [str(w.message) for w in caught]
    assert re.fullmatch(r"leapfrog-train: error: the training loss is nan after epoch 1, step \d+: try a smaller --lr "
                        r"than [\d.]+ or --weight-decay than 1e\+20", one_error_line(capsys))
