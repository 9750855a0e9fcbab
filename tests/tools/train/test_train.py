"""``leapfrog-train``: schedules agree bitwise, resume is exact, checkpoints survive SIGKILL, and every
bad input is one line on stderr with exit status 2."""

import contextlib
import gzip
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tqdm.std as tqdm_std
from tqdm import tqdm

from helpers import NO_GPU, SMALL, assert_bitwise_equal, cli, one_error_line, parameters
import no_gpu_cupy
from no_gpu_cupy import CUDA_ANSWER
from leapfrog_gpu.tools import timeline
from leapfrog_gpu.tools.train import checkpoint, command as train, estimate, loop as train_loop
from leapfrog_gpu import datasets
from leapfrog_gpu.backends import cuda_available, host_blas
from leapfrog_gpu.core import fitting, saving
from leapfrog_gpu.mlp.network import MLP


def as_meant(text):
    """The command's output with each line that ``cli.fitted`` broke (its continuations indented by two
    spaces) joined again, after checking that every line fits 100 columns."""
    assert all(len(line) <= 100 for line in text.splitlines()), text
    return text.replace("\n  ", " ")


# -- what it computes ---------------------------------------------------------------------------------


def test_default_like_run_reaches_accuracy(tmp_path, capsys):
    """The defaults, a third of the epochs: the full default run reaches about 97 %."""
    metrics = tmp_path / "metrics.jsonl"
    assert cli("--epochs", 10, "--metrics", metrics) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("digits: 1437 train, 360 test samples | MLP [64, 128, 128, 128, 128, 10] tanh, cross_entropy, "
                      "float32")
    assert out[1].endswith(" Leapfrog(k=2) | 10 epochs of 45 steps, batch 32, lr 0.1") and "(auto: " in out[1]
    assert out[2] == "estimate: about 1 s for the run"  # tests/tools/train/conftest.py's
    assert len(out) == 14 and out[12].startswith("epoch 10/10  train loss ") and out[13].startswith("done: 10 epochs")
    assert max(len(line) for line in out) <= 100, "every line fits 100 columns"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line["epoch"] for line in lines] == list(range(1, 11))
    assert [line["step"] for line in lines] == [45 * e for e in range(1, 11)]
    assert lines[0]["schedule"] == "Leapfrog(k=2)" and lines[0]["samples_per_s"] > 0
    assert lines[-1]["train_loss"] < lines[0]["train_loss"] / 4
    # Seed 0 reaches 96.7 % after 10 epochs here; 93 % leaves room for other BLAS builds.
    assert lines[-1]["test_accuracy"] >= 0.93


def test_a_long_calibration_says_what_it_is_doing(monkeypatch, capsys):
    """A calibration that outlasts ``estimate.SILENCE`` is said once, before the estimate; one that ends in time is
    not (the default run above: its line count), nor under --quiet."""
    calibrate = estimate.calibrate
    monkeypatch.setattr(estimate, "SILENCE", 0.05)
    monkeypatch.setattr(estimate, "calibrate", lambda *args: time.sleep(0.5) or calibrate(*args))
    assert cli("--hidden", "2x16", "--epochs", 1) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2:4] == ["estimate: timing a step and a forward pass of the run ...", "estimate: about 1 s for the run"]
    assert cli("--hidden", "2x16", "--epochs", 1, "--quiet") == 0
    assert "timing" not in capsys.readouterr().out


def test_a_calibrations_line_that_cannot_be_printed_stops_the_run_as_the_main_threads_would(monkeypatch):
    """Its timer's print meeting a closed stdout raises in the command, once the calibration ends (where the entry
    point makes it exit status 141 without a traceback), not in the timer's thread, the run going on."""
    calibrate, line = estimate.calibrate, train_loop.Report.line
    monkeypatch.setattr(estimate, "SILENCE", 0.05)
    monkeypatch.setattr(estimate, "calibrate", lambda *args: time.sleep(0.5) or calibrate(*args))

    def closed_at_timing(report, text, always=False):
        if text.startswith("estimate: timing"):
            raise BrokenPipeError(32, "Broken pipe")
        line(report, text, always)

    monkeypatch.setattr(train_loop.Report, "line", closed_at_timing)
    with pytest.raises(BrokenPipeError):
        cli("--hidden", "2x16", "--epochs", 1)


def test_each_epoch_line_says_the_losses_and_accuracy_of_its_metrics_record(tmp_path, capsys):
    """``epoch e/E  train loss X  test loss Y  test accuracy Z%``: X and Y are the --metrics record's train_loss and
    test_loss to 4 places, Z its test_accuracy in percent to 2, each after its own name."""
    metrics = tmp_path / "metrics.jsonl"
    assert cli("--hidden", "2x16", "--epochs", 2, "--metrics", metrics) == 0
    said = [re.fullmatch(r"epoch (\d)/2  train loss (\S+)  test loss (\S+)  test accuracy (\S+)%  .* samples/s", line)
            for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(said) == len(records) == 2 and all(said)
    for line, record in zip(said, records):
        epoch, train_loss, test_loss, accuracy = line.groups()
        assert int(epoch) == record["epoch"]
        assert float(train_loss) == round(record["train_loss"], 4), line[0]
        assert float(test_loss) == round(record["test_loss"], 4), line[0]
        assert float(accuracy) == pytest.approx(100 * record["test_accuracy"], abs=0.005), line[0]
    assert any(round(r["train_loss"], 4) != round(r["test_loss"], 4) for r in records)  # apart: a swap would show


def test_sequential_and_leapfrog_agree_bitwise_after_an_epoch(tmp_path):
    """(6)(7) move to worker streams but compute the same numbers: every parameter equal, bit for bit; ``--k auto``
    runs ``Leapfrog("auto")``, whichever k it chooses."""
    runs = {"sequential": ["--schedule", "sequential"], "k2": ["--k", 2], "k3": ["--k", 3],
            "auto": ["--k", "auto", "--metrics", tmp_path / "auto.jsonl"]}
    for name, options in runs.items():
        assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--checkpoint-dir", tmp_path / name, *options) == 0
    reference, state = parameters(tmp_path / "sequential")
    assert state["step"] == 45
    for name in ("k2", "k3", "auto"):
        assert_bitwise_equal(parameters(tmp_path / name)[0], reference)
    assert json.loads((tmp_path / "auto.jsonl").read_text().splitlines()[0])["schedule"] == "Leapfrog(k='auto')"
    assert parameters(tmp_path / "auto")[1]["config"]["k"] == "auto"
    for schedule in ("sequential", "naumov-scan"):  # the checkpoint's k auto is leapfrog's: no k of another schedule
        assert cli("--resume", "--epochs", 2, "--schedule", schedule, "--checkpoint-dir", tmp_path / "auto", "--quiet",
                   "--metrics", tmp_path / f"{schedule}.jsonl") == 0
        assert json.loads((tmp_path / f"{schedule}.jsonl").read_text())["epoch"] == 2
        (tmp_path / "auto" / "checkpoint.npz").unlink()
        assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--checkpoint-dir", tmp_path / "auto", "--k", "auto",
                   "--quiet") == 0
    initial = MLP([64, *[24] * 5, 10], seed=0, backend="numpy")
    assert not np.array_equal(initial.weights[0], reference[0])  # the epoch did train
    initial.close()


@pytest.mark.parametrize("quiet", [[], ["--quiet"]], ids=["", "quiet"])
def test_k_auto_says_what_it_chose_at_each_batch_size(capsys, quiet):
    """1437 digits in batches of 32: 44 of 32 and a last of 29, each batch size calibrated on its first step; the
    choice is part of the result, which --quiet keeps."""
    assert cli("--hidden", "5x24", "--epochs", 1, "--backend", "numpy", "--k", "auto", *quiet) == 0
    chosen = r"(Sequential\(\)|Leapfrog\(k=[124]\))"
    assert re.search(rf"^--k auto chose {chosen} at batch 29, {chosen} at batch 32$", capsys.readouterr().out, re.M)


def test_resume_is_bitwise_exact(tmp_path):
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", straight) == 0
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", halves, "--metrics", halves / "m.jsonl") == 0
    assert parameters(halves)[1]["epoch"] == 1
    assert cli("--quiet", "--epochs", 2, "--checkpoint-dir", halves, "--resume", "--metrics", halves / "m.jsonl") == 0
    (expected, expected_state), (got, state) = parameters(straight), parameters(halves)
    assert_bitwise_equal(got, expected)
    assert (state["epoch"], state["step"], state["rng"]) == (2, 90, expected_state["rng"])
    assert state["config"]["hidden"] == [24] * 5  # taken from the checkpoint, not the default
    assert [json.loads(line)["epoch"] for line in (halves / "m.jsonl").read_text().splitlines()] == [1, 2]


RESUMED_VALUES = {  # each option of options.RESUMED that takes a value, none at its default, over the two runs
    "teacher": ["--data", "teacher", "--inputs", 6, "--outputs", 3, "--samples", 160, "--hidden", "3x8", "--activation",
                "relu", "--dtype", "float64", "--seed", 3, "--batch-size", 24, "--lr", 0.005, "--k", 3],
    "mnist": ["--data", "mnist", "--hidden", "2x8", "--activation", "sigmoid", "--cost", "quadratic", "--batch-size", 4,
              "--lr", 0.3, "--schedule", "naumov-scan"],
}


@pytest.mark.parametrize("run", list(RESUMED_VALUES))
def test_resume_takes_every_option_it_keeps_from_the_checkpoint(tmp_path, run):
    """Resumed with none of its options given again (but --epochs), a run keeps the checkpoint's value of each option
    ``--resume`` takes (``options.RESUMED``), none of them at its default: the same parameters bit for bit as the run
    that went on, and the same options recorded, its --lr among them (resumed at the dataset's default, it trained
    another run)."""
    from leapfrog_gpu.tools.train.options import DEFAULTS, LR, RESUMED

    given = {key for options in RESUMED_VALUES.values() for key in options if str(key).startswith("--")}
    assert given | {"--data-dir", "--epochs"} >= {"--" + key.replace("_", "-") for key in RESUMED
                                                  if DEFAULTS[key] is not False}
    data = [] if run != "mnist" else ["--data-dir", _mnist_files(tmp_path, lambda arrays: None)]  # 9 samples
    options = [*RESUMED_VALUES[run], *data, "--quiet"]
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert cli(*options, "--epochs", 2, "--checkpoint-dir", straight) == 0
    assert cli(*options, "--epochs", 1, "--checkpoint-dir", halves) == 0
    assert cli("--quiet", "--epochs", 2, "--checkpoint-dir", halves, "--resume") == 0
    (expected, expected_state), (got, state) = parameters(straight), parameters(halves)
    assert_bitwise_equal(got, expected)
    assert (state["epoch"], state["step"], state["rng"]) == (2, expected_state["step"], expected_state["rng"])
    assert {key: state["config"][key] for key in RESUMED} == {key: expected_state["config"][key] for key in RESUMED}
    lr = RESUMED_VALUES[run][RESUMED_VALUES[run].index("--lr") + 1]
    assert state["config"]["lr"] == lr != LR[run]


def interrupt_at_step(monkeypatch, step):
    """Ctrl-C as the run's ``step``-th step (from 1) starts, which the run meets as a second Ctrl-C (it stops at
    once), with a checkpoint saved as an interrupt handler saves it: after the last completed step."""
    train_step, run, calls = MLP.train_step, train.Training.run, []

    def step_until_interrupted(net, *args, **kwargs):
        calls.append(None)
        if len(calls) == step:
            raise KeyboardInterrupt
        train_step(net, *args, **kwargs)

    def run_saving_on_interrupt(training):
        try:
            return run(training)
        except KeyboardInterrupt:
            training.save()
            raise

    monkeypatch.setattr(MLP, "train_step", step_until_interrupted)
    monkeypatch.setattr(train.Training, "run", run_saving_on_interrupt)


def test_resume_from_the_middle_of_an_epoch(tmp_path, monkeypatch, capsys):
    """What an interrupt handler needs: ``save()`` after any completed step, and a resume that
    redraws that epoch's order and skips the steps already done."""
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", straight) == 0
    interrupt_at_step(monkeypatch, 61)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", interrupted) == 130  # as a second Ctrl-C: no traceback
    assert capsys.readouterr().err == ("leapfrog-train: interrupted at epoch 2, step 60 and stopped at once: "
                                       f"{interrupted}/checkpoint.npz holds the last checkpoint written; continue "
                                       f"from it with --resume --checkpoint-dir {interrupted}\n")
    state = parameters(interrupted)[1]
    assert (state["epoch"], state["step_in_epoch"], state["step"]) == (1, 15, 60)
    monkeypatch.undo()
    assert cli("--quiet", "--checkpoint-dir", interrupted, "--resume") == 0
    assert_bitwise_equal(parameters(interrupted)[0], parameters(straight)[0])


def test_a_run_resumed_before_its_first_epoch_ended_replaces_an_earlier_runs_metrics(tmp_path, monkeypatch, capsys):
    """Interrupted in its first epoch, a fresh run has written no record, and the --metrics file is still an earlier
    run's: resumed, the run is as fresh, and its first record replaces those lines (an unbroken run's file)."""
    run, metrics = tmp_path / "run", tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 1, "from": "an earlier run"}\n')
    interrupt_at_step(monkeypatch, 11)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", run, "--metrics", metrics) == 130
    assert parameters(run)[1]["epoch"] == 0
    assert metrics.read_text() == '{"epoch": 1, "from": "an earlier run"}\n'
    monkeypatch.undo()
    capsys.readouterr()
    assert cli("--quiet", "--checkpoint-dir", run, "--resume", "--metrics", metrics) == 0
    assert [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()] == [1, 2]


def test_a_rank_not_given_resume_takes_part_in_the_broadcast_of_rank_0s_checkpoint():
    """Whether to resume is rank 0's to say: rank 1, given no --resume where rank 0 was, still enters the broadcast
    of the checkpoint (it went straight to the next collective, a mismatch MPI leaves undefined), and the options
    that differ are refused after it, on every rank alike."""
    class Rank1:
        rank, size = 1, 2

        def __init__(self):
            self.sent = []

        def together(self, *errors):
            return contextlib.nullcontext()

        def bcast(self, value):
            self.sent.append(value)
            if len(self.sent) == 1:
                return True  # rank 0 resumes
            raise StopIteration("rank 0's checkpoint, broadcast")

    comm = Rank1()
    with pytest.raises(StopIteration, match="rank 0's checkpoint"):
        train._train({"checkpoint_dir": "run"}, comm, [])
    assert comm.sent == [False, None]


OLD_CONFIG = {  # a checkpoint's config before --model rnn joined the loop (and before --model, "model" and "skip")
    "data": "digits", "data_dir": None, "inputs": 64, "outputs": 10, "samples": 4096, "model": "mlp", "skip": 2,
    "hidden": [8, 8], "activation": "tanh", "cost": "cross_entropy", "dtype": "float32", "epochs": 1,
    "batch_size": 32, "lr": 0.1, "seed": 0, "schedule": "leapfrog", "k": 2, "fused": False, "graph": False,
    "backend": "numpy", "blas_threads": 1, "check_finite": False, "allow_divergence": False, "quiet": True,
    "metrics": None, "checkpoint_dir": "run", "resume": False, "profile_steps": None, "timeline": None,
    "bucket_mb": 0.0, "comm_timeout": 120.0, "ranks": 1}


@pytest.mark.parametrize("kept", [
    OLD_CONFIG, {k: v for k, v in OLD_CONFIG.items() if k not in ("model", "skip")},
    {k: v for k, v in OLD_CONFIG.items() if k not in ("allow_divergence", "check_finite")}],
    ids=["with-model", "before-model", "before-allow-divergence"])
def test_a_checkpoint_of_an_older_mlp_run_resumes(tmp_path, capsys, kept):
    """Written as the MLP's command wrote it: w2..wL, then b2..bL, and its state; --resume takes its
    parameters (at lr 0 they stay as they were, bit for bit) and its position."""
    rng = np.random.default_rng(7)
    weights = [rng.standard_normal((n, m)).astype(np.float32) for m, n in ((64, 8), (8, 8), (8, 10))]
    biases = [rng.standard_normal(n).astype(np.float32) for n in (8, 8, 10)]
    state = {"sizes": [64, 8, 8, 10], "epoch": 1, "step_in_epoch": 0, "step": 45,
             "rng": np.random.default_rng(0).bit_generator.state, "config": kept, "start_loss": 7.6,
             "epochs_at_chance": 0}
    np.savez(tmp_path / "checkpoint.npz", **{f"w{l}": w for l, w in enumerate(weights, 2)},
             **{f"b{l}": b for l, b in enumerate(biases, 2)}, state=np.array(json.dumps(state)))
    assert cli("--epochs", 2, "--lr", 0, "--allow-divergence", "--checkpoint-dir", tmp_path, "--resume") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("| MLP [64, 8, 8, 10] tanh, cross_entropy, float32") and out[2] == (
        f"resumed at epoch 2, step 45 from {tmp_path}/checkpoint.npz")
    got, state = parameters(tmp_path)
    assert state["step"] == 90 and state["config"]["model"] == "mlp"
    assert_bitwise_equal(got, [a for pair in zip(weights, biases) for a in pair])


PAUSED_WRITER = """
import io, pathlib, sys, time
import numpy as np
from leapfrog_gpu.tools.train import command as train

savez = np.savez

def half_then_pause(file, **arrays):
    whole = io.BytesIO()
    savez(whole, **arrays)
    file.write(whole.getvalue()[: len(whole.getvalue()) // 2])
    file.flush()
    pathlib.Path(sys.argv[1]).touch()
    while True:
        time.sleep(1)

np.savez = half_then_pause
sys.exit(train.main(sys.argv[2:]))
"""
"""``leapfrog-train`` whose checkpoint writer writes half the archive, says so in the file ``argv[1]``,
then waits to be killed."""


def test_sigkill_while_writing_a_checkpoint(tmp_path):
    """A writer killed mid-file leaves the previous checkpoint whole, and --resume continues from it."""
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", straight) == 0
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", run) == 0
    before = checkpoint.path_in(run).read_bytes()
    marker = tmp_path / "paused"
    command = [sys.executable, "-c", PAUSED_WRITER, str(marker), "--quiet", "--epochs", "2", "--resume",
               "--checkpoint-dir", str(run)]
    writer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert writer.poll() is None, writer.stderr.read().decode()
        assert time.monotonic() < deadline, "the writer never reached its checkpoint"
        time.sleep(0.05)
    partial = list(run.glob(".checkpoint.npz-*.tmp"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0  # the new checkpoint is half-written
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL

    assert checkpoint.path_in(run).read_bytes() == before
    assert parameters(run)[1]["epoch"] == 1
    os.utime(partial[0], (time.time() - saving.STALE - 1,) * 2)  # untouched since: a killed writer's
    assert cli("--quiet", "--epochs", 2, "--checkpoint-dir", run, "--resume") == 0
    assert_bitwise_equal(parameters(run)[0], parameters(straight)[0])
    assert not list(run.glob(".checkpoint.npz-*.tmp"))  # the killed writer's file is gone


def test_the_metrics_and_the_checkpoint_agree_whatever_write_fails(tmp_path, monkeypatch, capsys):
    """stdout closed at epoch 2's line (``| head``), then a checkpoint that cannot be written at epoch 3 (exit status
    5, one line): each time the --metrics file ends at the checkpoint's epoch, and the resumed run adds each epoch
    once."""
    metrics, line, save = tmp_path / "m.jsonl", train_loop.Report.line, checkpoint.save

    def epochs():
        return [json.loads(text)["epoch"] for text in metrics.read_text().splitlines()]

    def closed_at_epoch_2(report, text, always=False):
        if text.startswith("epoch 2/"):
            raise BrokenPipeError(32, "Broken pipe")
        line(report, text, always)

    def full_at_epoch_3(directory, net, training):
        if training["epoch"] == 3:
            raise OSError(28, "No space left on device")
        return save(directory, net, training)

    monkeypatch.setattr(train_loop.Report, "line", closed_at_epoch_2)
    with pytest.raises(BrokenPipeError):
        cli(*SMALL[:2], "--epochs", 4, "--checkpoint-dir", tmp_path, "--metrics", metrics)
    assert epochs() == [1, 2] and parameters(tmp_path)[1]["epoch"] == 2
    monkeypatch.setattr(checkpoint, "save", full_at_epoch_3)
    capsys.readouterr()
    assert cli("--resume", "--checkpoint-dir", tmp_path, "--metrics", metrics) == 5
    assert one_error_line(capsys) == (f"leapfrog-train: error: cannot write the checkpoint {checkpoint.path_in(tmp_path)} "
                                      "(No space left on device): the one written before is kept as it was")
    assert epochs() == [1, 2] and parameters(tmp_path)[1]["epoch"] == 2
    monkeypatch.undo()
    assert cli("--quiet", "--resume", "--checkpoint-dir", tmp_path, "--metrics", metrics) == 0
    assert epochs() == [1, 2, 3, 4] and parameters(tmp_path)[1]["epoch"] == 4


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, whose every write fails (Linux)")
def test_a_metrics_file_that_cannot_be_written_stops_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    """``--metrics /dev/full``: exit status 5 with one line at the first record, the run's checkpoint not written
    (the record goes first, so that the two agree); a first checkpoint that cannot be written says none was."""
    assert cli(*SMALL, "--epochs", 2, "--metrics", "/dev/full", "--checkpoint-dir", tmp_path / "run") == 5
    assert one_error_line(capsys) == "leapfrog-train: error: cannot write to --metrics /dev/full (No space left on device)"
    assert not checkpoint.path_in(tmp_path / "run").exists()

    def failing(*args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(checkpoint, "save", failing)
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "run") == 5
    assert one_error_line(capsys).endswith("(Input/output error): none was written before")


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd, a process's files by descriptor")
def test_metrics_to_the_file_of_the_runs_own_output_go_among_its_lines(tmp_path, monkeypatch):
    """``--metrics /dev/stdout > log`` and then ``>> log``: neither run empties or cuts the file stdout writes to, nor
    refuses it for its lines of text; each record goes whole, right before its epoch's line."""
    log = tmp_path / "log"
    for mode in ("w", "a"):
        with open(log, mode, encoding="utf-8") as out:
            monkeypatch.setattr(sys, "stdout", out)
            assert cli("--hidden", "2x16", "--epochs", 2, "--checkpoint-dir", tmp_path / mode,
                       "--metrics", f"/dev/fd/{out.fileno()}") == 0
    lines = log.read_text(encoding="utf-8").splitlines()
    records = [(i, json.loads(line)) for i, line in enumerate(lines) if line.startswith("{")]
    assert [record["epoch"] for _, record in records] == [1, 2, 1, 2]
    assert all(lines[i + 1].startswith(f"epoch {record['epoch']}/2  ") for i, record in records)
    assert sum(line.startswith("digits: ") for line in lines) == 2 and len(lines) == 2 * 8


@pytest.mark.parametrize("removed", ["file", "folder", "replaced"])
def test_a_metrics_file_removed_during_the_run_stops_it_in_one_line(tmp_path, capsys, monkeypatch, removed):
    """The --metrics file, or its folder, removed or replaced after the first epoch's checkpoint: the next record is
    not written to a file no one can read (exit 0, every line lost) but stops the run, exit 5, one line; the
    checkpoint stays at the first epoch, where the file ended."""
    folder, save = tmp_path / "out", checkpoint.save
    folder.mkdir()
    metrics = folder / "m.jsonl"

    def save_then_remove(directory, net, training):
        save(directory, net, training)
        if removed == "folder":
            shutil.rmtree(folder)
        else:
            metrics.unlink()
            if removed == "replaced":
                metrics.write_text("")

    monkeypatch.setattr(checkpoint, "save", save_then_remove)
    assert cli(*SMALL, "--epochs", 3, "--checkpoint-dir", tmp_path / "run", "--metrics", metrics) == 5
    assert one_error_line(capsys) == (f"leapfrog-train: error: cannot write to --metrics {metrics} (it was removed or "
                                      "replaced during the run)")
    assert parameters(tmp_path / "run")[1]["epoch"] == 1


def test_a_checkpoint_folder_removed_during_the_run_stops_it_in_one_line(tmp_path, capsys, monkeypatch):
    """The folder gone before the second checkpoint (core.saving refuses a path without its folder): exit status 5,
    one line, as for a write that fails (was a traceback, exit 1)."""
    save, run = checkpoint.save, tmp_path / "run"

    def removed_at_epoch_2(directory, net, training):
        if training["epoch"] == 2:
            shutil.rmtree(directory)
        return save(directory, net, training)

    monkeypatch.setattr(checkpoint, "save", removed_at_epoch_2)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", run) == 5
    assert one_error_line(capsys) == (f"leapfrog-train: error: cannot write the checkpoint {checkpoint.path_in(run)} "
                                      f"(its folder {run} is gone)")


def test_a_network_holding_inf_at_a_checkpoint_stops_the_run_in_one_line_and_keeps_the_one_before(tmp_path, capsys,
                                                                                                  monkeypatch):
    """What core.saving refuses to write (a network holding NaN or Inf, which load would refuse): exit status 5, one
    line naming the array, the checkpoint of epoch 1 kept as it was (was a traceback, exit 1)."""
    save, path = checkpoint.save, checkpoint.path_in(tmp_path)

    def inf_at_epoch_2(directory, net, training):
        if training["epoch"] == 2:
            kept.append(path.read_bytes())
            net._live()[2]["w"][0, 0] = np.inf  # as an overflow would leave it
        return save(directory, net, training)

    kept = []
    monkeypatch.setattr(checkpoint, "save", inf_at_epoch_2)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path) == 5
    assert one_error_line(capsys) == (f"leapfrog-train: error: cannot write the checkpoint {path}: cannot save this "
                                      "MLP: its weights of layer 2 holds NaN or Inf, and load takes finite parameters "
                                      "and state only: keep an earlier file, or train again from one; the one "
                                      "written before is kept as it was")
    assert path.read_bytes() == kept[0]


def test_a_checkpoint_with_an_array_no_run_writes_is_refused_on_resume_and_kept(tmp_path, capsys):
    """As ``leapfrog_gpu.load`` refuses it: exit 2, one line, the file as it was (resumed, it was written over)."""
    assert cli(*SMALL, "--epochs", 1, "--optimizer", "adam", "--checkpoint-dir", tmp_path) == 0
    path = checkpoint.path_in(tmp_path)
    with np.load(path) as archive:
        np.savez(path, **{name: archive[name] for name in archive.files}, zz9=np.zeros(3))
    before = path.read_bytes()
    capsys.readouterr()
    assert cli("--epochs", 2, "--checkpoint-dir", tmp_path, "--resume") == 2
    assert one_error_line(capsys) == (f"leapfrog-train: error: {path} does not fit this network (arrays ['zz9'] fit no "
                                      f"parameter of it): {checkpoint.REMEDY}")
    assert path.read_bytes() == before


def test_teacher_regression(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    assert cli("--data", "teacher", "--inputs", 7, "--hidden", "2x16,9", "--outputs", 3, "--samples", 301,
               "--epochs", 4, "--lr", 0.05, "--metrics", metrics) == 0
    out = capsys.readouterr().out
    assert "teacher: 301 train, 75 test samples | MLP [7, 16, 16, 9, 3] tanh, quadratic" in out
    assert "test accuracy" not in out and "test mse " in out
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert "test_accuracy" not in lines[-1] and lines[-1]["train_loss"] < lines[0]["train_loss"]
    # the quadratic cost is half the squared error summed over the 3 outputs: the mse is a third of twice it
    assert lines[-1]["test_mse"] == pytest.approx(2 * lines[-1]["test_loss"] / 3, rel=1e-9)


def test_progress_bar_and_batch_loss(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(fitting, "LOSS_CHECK_SECONDS", 0.0)  # the batch loss after every step
    assert cli("--hidden", "4x16", "--epochs", 1) == 0
    captured = capsys.readouterr()
    assert "epoch 1/1:" in captured.err and "loss=" in captured.err and "sample/s" in captured.err
    header, _, epoch, _ = captured.out.splitlines()[1:]
    assert " Leapfrog(k=2) | " in header and epoch.startswith("epoch 1/1  train loss ") and epoch.endswith(" samples/s")


def test_non_finite_loss_exits_3_and_keeps_the_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(*SMALL, "--activation", "relu", "--lr", 0.01, "--epochs", 1, "--checkpoint-dir", run) == 0
    before = checkpoint.path_in(run).read_bytes()
    capsys.readouterr()
    assert cli("--epochs", 3, "--lr", 100, "--checkpoint-dir", run, "--resume") == 3
    assert one_error_line(capsys) == (
        "leapfrog-train: error: the training loss is nan after epoch 2, step 90: try a smaller --lr than 100.0 "
        "(the checkpoint of epoch 1 is kept as it was)")
    assert checkpoint.path_in(run).read_bytes() == before


def test_profile_steps_on_numpy_only_add_nvtx_ranges(capsys):
    assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--profile-steps", "3:5") == 0
    assert as_meant(capsys.readouterr().err) == (
        "leapfrog-train: note: the numpy backend has no CUDA profiler; --profile-steps only adds NVTX ranges "
        "(recorded under nsys, or with LEAPFROG_NVTX=1)\n")


def test_timeline_of_a_window_of_steps(tmp_path, capsys):
    """--timeline alone stamps steps 10..14; the chart and every interval are written, one line printed."""
    assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--timeline", tmp_path / "t.png") == 0
    out, err = capsys.readouterr()
    assert err == ""  # no note about the numpy backend's profiler: the window records the timeline
    assert sum(line.startswith(f"timeline of steps 10..14 in {tmp_path / 't.png'}") for line in out.splitlines()) == 1
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["program"] == "leapfrog-train" and saved["config"]["k"] == 2
    assert saved["title"] == ("leapfrog-train: MLP [64, 24, 24, 24, 24, 24, 10] tanh, batch 32, Leapfrog(k=2), "
                              "float32, numpy")  # the chart's, above its panel
    assert {row[0] for row in saved["panels"][0]["intervals"]} == set(range(10, 15))
    assert saved["panels"][0]["analysis"]["summary"]["busy_ms"].keys() == {"main", "worker0", "worker1"}
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_resumed_inside_the_timeline_window_says_the_steps_it_recorded(tmp_path, capsys):
    """Resumed at step S inside --profile-steps A:B, the run records steps S..B-1, and its chart, .json and line say
    so (they said A..B-1)."""
    run = tmp_path / "run"
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", run) == 0
    step = checkpoint.load(run)[1]["step"]
    window = ["--timeline", tmp_path / "t.png", "--profile-steps", f"{step - 5}:{step + 5}"]
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", run, "--resume", "--backend", "numpy", *window) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith(f"timeline of steps {step}..{step + 4} in ") for line in out.splitlines()) == 1, out
    panel = json.loads((tmp_path / "t.json").read_text())["panels"][0]
    assert panel["label"] == f"leapfrog-train Leapfrog(k=2), steps {step}..{step + 4}"
    assert {row[0] for row in panel["intervals"]} == set(range(step, step + 5))


def test_the_chart_is_drawn_outside_the_time_of_the_epochs_steps(tmp_path, monkeypatch):
    """Drawing the chart takes a second or more: drawn inside the window's last step, it counted in that epoch's
    seconds and samples per second (870 samples/s against 20,000). It is drawn once the epoch's time is taken."""
    draw, inside = timeline.draw, []

    def drawn(*args, **kwargs):
        inside.append(any(frame.function == "_epoch" and frame.filename.endswith("fitting.py")
                          for frame in inspect.stack()))
        return draw(*args, **kwargs)

    monkeypatch.setattr(timeline, "draw", drawn)
    assert cli(*SMALL, "--epochs", 1, "--quiet", "--backend", "numpy", "--timeline", tmp_path / "t.png") == 0
    assert inside == [False]


def test_a_timeline_that_cannot_be_written_stops_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    """The chart's write failing (a full disk): exit status 5 and one line, as for --metrics, not a traceback."""
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(timeline, "draw", full)
    assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--timeline", tmp_path / "t.png") == 5
    assert one_error_line(capsys) == (f"leapfrog-train: error: cannot write to --timeline {tmp_path / 't.png'} (No "
                                      "space left on device)")


def test_a_run_resumed_past_its_profiling_window_is_refused_before_it_trains(tmp_path, capsys):
    """As a window past the run's last step is: the run used to train to its end, then say it wrote no timeline."""
    assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--checkpoint-dir", tmp_path / "run") == 0
    written = (tmp_path / "run" / "checkpoint.npz").read_bytes()
    capsys.readouterr()
    assert cli("--quiet", "--epochs", 2, "--checkpoint-dir", tmp_path / "run", "--resume", "--timeline",
               tmp_path / "t.png") == 2
    assert one_error_line(capsys) == ("leapfrog-train: error: --timeline records steps 10..14 by default, before step "
                                      "45, where this run resumes: give --profile-steps A:B")
    assert cli("--epochs", 2, "--checkpoint-dir", tmp_path / "run", "--resume", "--profile-steps", "3:7") == 2
    assert one_error_line(capsys) == "leapfrog-train: error: --profile-steps 3:7 ends before step 45, where this run " \
                                     "resumes"
    assert not (tmp_path / "t.png").exists() and (tmp_path / "run" / "checkpoint.npz").read_bytes() == written
    assert cli("--quiet", "--epochs", 2, "--checkpoint-dir", tmp_path / "run", "--resume", "--timeline",
               tmp_path / "t.png", "--profile-steps", "50:53") == 0
    assert (tmp_path / "t.png").exists()
    capsys.readouterr()
    assert cli("--epochs", 2, "--checkpoint-dir", tmp_path / "run", "--resume", "--profile-steps", "3:7") == 0
    assert ("nothing to do: the checkpoint has 2 epochs done and --epochs is 2: give --epochs above 2 to train on"
            in capsys.readouterr().out)  # no run to refuse


# -- what a newcomer meets ------------------------------------------------------------------------------


def _mnist_like(directory, samples=200):
    """The four MNIST IDX files, gzipped, with random 28x28 images and labels: ``samples`` to train on."""
    rng = np.random.default_rng(1)
    arrays = {"x_train": rng.integers(0, 256, (samples, 28, 28)), "y_train": rng.integers(0, 10, samples),
              "x_test": rng.integers(0, 256, (50, 28, 28)), "y_test": rng.integers(0, 10, 50)}
    return _mnist_files(directory, lambda found: found.update(arrays))


@pytest.mark.parametrize("dataset", ["digits", "mnist", "teacher"])
def test_every_datasets_default_run_stays_finite_for_3_epochs(tmp_path, dataset):
    """The documented defaults, the learning rate included, train every dataset: no NaN, no divergence."""
    where = ["--data-dir", _mnist_like(tmp_path)] if dataset == "mnist" else []
    metrics = tmp_path / "m.jsonl"
    assert cli("--data", dataset, *where, "--epochs", 3, "--quiet", "--metrics", metrics) == 0
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(lines) == 3 and all(np.isfinite([m["train_loss"], m["test_loss"]]).all() for m in lines)


def test_help_says_the_learning_rate_of_each_dataset_and_every_exit_status(capsys):
    assert cli("--help") == 0
    out = capsys.readouterr().out.replace("\n", " ")
    assert "(default 0.1 for digits, 0.1 for mnist, 0.01 for teacher; with a momentum MU, that times 1 - MU" in \
        " ".join(out.split())
    statuses = out[out.index("exit status:"):].split()
    for status in ("0", "2", "3", "130", "1", "4"):
        assert status in statuses, out


def test_version_is_the_packages(capsys):
    from importlib.metadata import version

    assert cli("--version") == 0
    assert capsys.readouterr().out == f"leapfrog-train {version('leapfrog_gpu')}\n"


@pytest.mark.parametrize("option", ["--version", "--help"])
def test_rank_0_alone_prints_help_and_version_under_mpiexec(monkeypatch, capsys, option):
    """Rank 1 of a launcher (its rank in the environment, before MPI starts) prints nothing: one copy in all."""
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_RANK", "1")
    assert cli(option) == 0
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("PMI_RANK", "0")
    assert cli(option) == 0
    assert "leapfrog-train" in capsys.readouterr().out.split("\n")[0]  # the version, or the usage's first line


def test_ctrl_c_is_said_on_a_line_of_its_own_not_on_the_progress_bar(tmp_path, monkeypatch, capsys,
                                                                     terminal_sigint):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the progress bar is shown
    train_step, calls = MLP.train_step, []

    def step_then_ctrl_c(net, *args, **kwargs):
        train_step(net, *args, **kwargs)
        calls.append(None)
        if len(calls) == 20:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(MLP, "train_step", step_then_ctrl_c)
    assert cli(*SMALL[:2], "--epochs", 1) == 130
    err = capsys.readouterr().err
    before, said, _ = err.partition("leapfrog-train: interrupted at epoch 1, step 20")
    assert said and "epoch 1/1:" in before, err  # the bar was shown
    *_, bar, line = re.split(r"[\r\n]", before)
    assert line == "" and bar.strip() == "", f"the line is written onto the bar's: {err!r}"


def test_one_epoch_of_one_step_is_said_in_the_singular(capsys):
    assert cli("--hidden", "2x8", "--epochs", 1, "--batch-size", 1437) == 0
    out = capsys.readouterr().out
    assert " | 1 epoch of 1 step, batch 1437, lr 0.1\n" in out and "\ndone: 1 epoch, test accuracy " in out


def test_a_batch_larger_than_the_training_set_is_refused(capsys):
    assert cli("--epochs", 1, "--batch-size", 100000) == 2
    assert one_error_line(capsys) == ("leapfrog-train: error: --batch-size 100000 is larger than the 1437 training "
                                      "samples of digits; use at most 1437")


DIVERGING = ["--hidden", "3x16", "--lr", "9", "--epochs", "9"]  # outputs saturate: the loss past 10x its start soon


def diverged_at(err):
    """The epoch at which the run that said ``err`` stopped as diverged (its float32 rounding, the host's BLAS's,
    decides which: the second on some hosts, the third on others), checked against the step and checkpoint it
    names: 45 steps an epoch."""
    said = re.fullmatch(
        r"leapfrog-train: error: the run diverged: its training loss grew from \S+ to \S+ \(epoch (\d+), step "
        r"(\d+)\): try another --lr than 9.0, or add --allow-divergence to go on \(the checkpoint of epoch (\d+) is "
        r"kept as it was\)\n", err)
    assert said, err
    epoch, step, kept = map(int, said.groups())
    assert epoch >= 2 and step == 45 * epoch and kept == epoch - 1, err  # a start loss, then an epoch that grew
    return epoch


def test_a_diverged_run_stops_with_exit_3_and_a_hint(tmp_path, capsys):
    assert cli(*DIVERGING, "--checkpoint-dir", tmp_path) == 3
    out, err = capsys.readouterr()
    epoch = diverged_at(err)
    assert [line.split()[1] for line in out.splitlines() if line.startswith("epoch ")] == [
        f"{e}/9" for e in range(1, epoch)]
    assert parameters(tmp_path)[1]["epoch"] == epoch - 1


def test_allow_divergence_goes_on(capsys):
    assert cli(*DIVERGING, "--quiet", "--allow-divergence") == 0
    assert capsys.readouterr().out.startswith("done: 9 epochs, test accuracy ")


def test_a_run_resumed_before_it_diverges_stops_where_a_straight_run_stops(tmp_path, capsys):
    """The loss's start belongs to the run, not to the process: split at epoch 1 by a resume, the run
    still stops where the straight run stops, with its words, its start loss included."""
    assert cli(*DIVERGING, "--quiet", "--checkpoint-dir", tmp_path / "straight") == 3
    straight = capsys.readouterr().err
    assert diverged_at(straight) >= 2  # after the split
    assert cli(*DIVERGING, "--quiet", "--epochs", 1, "--checkpoint-dir", tmp_path / "split") == 0
    assert cli(*DIVERGING, "--quiet", "--resume", "--checkpoint-dir", tmp_path / "split") == 3
    assert capsys.readouterr().err == straight


LEARNING_NOTHING = ["--hidden", "2x8", "--lr", "1e-9", "--epochs", "9", "--quiet"]  # the loss stays at its start


def test_a_resumed_run_keeps_its_graph_check_and_allowance_unless_told_otherwise(tmp_path, capsys):
    """--graph, --check-finite and --allow-divergence come from the checkpoint, as the hint to continue a run
    implies (they were dropped: a resumed run stopped as diverged, its NaN check off); --no-X turns one off."""
    options = ("--graph", "--check-finite", "--allow-divergence")
    assert cli(*LEARNING_NOTHING, "--epochs", 3, *options, "--checkpoint-dir", tmp_path / "run") == 0
    assert cli(*LEARNING_NOTHING, "--resume", "--checkpoint-dir", tmp_path / "run") == 0  # past epoch 5
    config = parameters(tmp_path / "run")[1]["config"]
    assert (config["epochs"], config["graph"], config["check_finite"], config["allow_divergence"]) == (9, True, True,
                                                                                                       True)
    assert cli(*LEARNING_NOTHING, "--epochs", 3, *options, "--checkpoint-dir", tmp_path / "off") == 0
    assert cli(*LEARNING_NOTHING, "--resume", "--no-allow-divergence", "--no-graph", "--checkpoint-dir",
               tmp_path / "off") == 3
    assert "the run learns nothing" in capsys.readouterr().err
    config = parameters(tmp_path / "off")[1]["config"]
    assert (config["graph"], config["check_finite"], config["allow_divergence"]) == (False, True, False)


def test_epochs_at_chance_level_are_counted_across_a_resume(tmp_path, capsys):
    """Five epochs at or above chance level stop a run at epoch 5, whether or not it was resumed
    after epoch 3 (not at epoch 8, five epochs after the resume)."""
    assert cli(*LEARNING_NOTHING, "--checkpoint-dir", tmp_path / "straight") == 3
    straight = capsys.readouterr().err
    assert re.fullmatch(r"leapfrog-train: error: the run learns nothing: its training loss was (\S+) at the start "
                        r"and is \1 now, at or above chance level \(\S+, what a constant output scores\) for the "
                        r"last 5 epochs \(epoch 5, step 225\): try another --lr than 1e-09, or add "
                        r"--allow-divergence to go on \(the checkpoint of epoch 4 is kept as it was\)\n", straight)
    assert cli(*LEARNING_NOTHING, "--epochs", 3, "--checkpoint-dir", tmp_path / "split") == 0
    assert cli(*LEARNING_NOTHING, "--resume", "--checkpoint-dir", tmp_path / "split") == 3
    assert capsys.readouterr().err == straight


def test_a_run_resumed_from_the_middle_of_an_epoch_names_that_checkpoint_when_it_stops(tmp_path, monkeypatch, capsys):
    """Interrupted 19 steps into epoch 5 (as its 20th starts), resumed, then stopped at that epoch's end as learning nothing: the line
    names the checkpoint in the folder, the one resumed, as the interrupted run named its position (it said "of
    epoch 4", as if every checkpoint were an epoch's end)."""
    interrupt_at_step(monkeypatch, 200)
    assert cli(*LEARNING_NOTHING, "--checkpoint-dir", tmp_path) == 130
    assert "interrupted at epoch 5, step 199 " in capsys.readouterr().err
    monkeypatch.undo()
    assert cli("--quiet", "--checkpoint-dir", tmp_path, "--resume") == 3
    err = capsys.readouterr().err
    assert err.startswith("leapfrog-train: error: the run learns nothing: ") and err.endswith(
        "(epoch 5, step 225): try another --lr than 1e-09, or add --allow-divergence to go on (the checkpoint at "
        "epoch 5, step 199 is kept as it was)\n"), err
    state = parameters(tmp_path)[1]
    assert (state["epoch"], state["step_in_epoch"], state["step"]) == (4, 19, 199)


def test_fallback_to_numpy_says_why_once_and_in_the_header(cupy_without_gpu, capsys):
    assert cli("--hidden", "2x8", "--epochs", 1) == 0
    captured = capsys.readouterr()
    assert as_meant(captured.err) == f"leapfrog-train: note: --backend auto runs on numpy: {CUDA_ANSWER}\n"
    header = captured.out.splitlines()[1]
    assert header.startswith("numpy (auto: no usable GPU, see stderr) Leapfrog(k=2) | ")


def test_fallback_to_numpy_is_said_once_by_a_real_process():
    """In a process of its own, where no test harness takes the library's log records, the fallback
    reaches stderr once: the command's note, not the note and the library's warning as well. The
    process's CuPy is ``no_gpu_cupy``'s, as under the ``cupy_without_gpu`` fixture."""
    code = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(no_gpu_cupy.__file__))!r})
import no_gpu_cupy
sys.modules["cupy"] = no_gpu_cupy.module()
from leapfrog_gpu.tools.train import command as train
sys.exit(train.main(["--hidden", "2x8", "--epochs", "1", "--quiet"]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert as_meant(done.stderr) == f"leapfrog-train: note: --backend auto runs on numpy: {CUDA_ANSWER}\n"


def ctrl_c_at_the_first_step(*args, **kwargs):
    signal.raise_signal(signal.SIGINT)  # the header is all a run prints before it


def test_the_default_run_falling_back_to_numpy_prints_lines_within_100_columns(cupy_without_gpu, capsys, monkeypatch,
                                                                               terminal_sigint):
    monkeypatch.setattr(MLP, "train_step", ctrl_c_at_the_first_step)
    assert cli() == 130
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and max(len(line) for line in out) <= 100, out  # the header and the estimate


def test_a_long_header_is_broken_at_its_bars_within_100_columns(cupy_without_gpu, capsys, monkeypatch,
                                                                terminal_sigint):
    """A deep network, a fused graph step on two worker streams: the header says all of it (the widths by their
    runs), each part of a line too wide on a line of its own."""
    monkeypatch.setattr(MLP, "train_step", ctrl_c_at_the_first_step)
    assert cli("--hidden", "12x100", "--fused", "--graph", "--k", 2) == 130
    out = capsys.readouterr().out
    assert as_meant(out).splitlines() == [
        "digits: 1437 train, 360 test samples | MLP [64] + [100] * 12 + [10] tanh, cross_entropy, float32",
        "numpy (auto: no usable GPU, see stderr) Leapfrog(k=2, fused=True) as a graph "
        "30 epochs of 45 steps, batch 32, lr 0.1", "estimate: about 1 s for the run"]


def test_cupy_backend_errors_say_why_in_the_command_line_words(cupy_without_gpu, capsys, monkeypatch):
    assert cli("--backend", "cupy", "--epochs", 1) == 2
    assert one_error_line(capsys) == (
        f"leapfrog-train: error: --backend cupy cannot run: {CUDA_ANSWER}; use --backend numpy")
    monkeypatch.setitem(sys.modules, "cupy", None)  # CuPy not installed
    assert cli("--backend", "cupy", "--epochs", 1) == 2
    assert one_error_line(capsys) == (  # as the README says it for a checkout
        "leapfrog-train: error: --backend cupy needs CuPy: pip install -e '.[cuda12]' (CUDA 12) or "
        "pip install -e '.[cuda13]' (CUDA 13); or use --backend numpy")


def test_stop_and_resume_name_the_same_epoch_and_the_hint_is_a_command(tmp_path, monkeypatch, capsys,
                                                                       terminal_sigint):
    run, train_step, calls = tmp_path / "first run", MLP.train_step, []  # a space: the hint must quote it

    def step_then_ctrl_c(net, *args, **kwargs):
        train_step(net, *args, **kwargs)
        calls.append(None)
        if len(calls) == 61:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C; the handler runs before this returns

    monkeypatch.setattr(MLP, "train_step", step_then_ctrl_c)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", run) == 130
    line = capsys.readouterr().err.strip()
    assert line == (f"leapfrog-train: interrupted at epoch 2, step 61: checkpoint written to {run}/checkpoint.npz; "
                    f"continue with --resume --checkpoint-dir '{run}'")
    monkeypatch.undo()
    assert cli(*shlex.split(line.split("continue with ")[1])) == 0
    assert f"resumed at epoch 2, step 61 from {run}/checkpoint.npz" in capsys.readouterr().out.splitlines()
    assert parameters(run)[1]["step"] == 90


def ctrl_c_at_step(step, apart=None):
    """A ``train_step`` that, at ``step`` (counted from 1), takes a SIGINT, and another ``apart`` seconds later
    unless None: as ``timeout -s INT`` sends them (to the process and its group) or a user presses Ctrl-C twice."""
    train_step, calls = MLP.train_step, []

    def step_and_ctrl_c(net, *args, **kwargs):
        train_step(net, *args, **kwargs)
        calls.append(None)
        if len(calls) == step:
            signal.raise_signal(signal.SIGINT)
            if apart is not None:
                time.sleep(apart)
                signal.raise_signal(signal.SIGINT)

    return step_and_ctrl_c


def test_two_ctrl_cs_in_quick_succession_are_one_and_lose_no_step(tmp_path, monkeypatch, capsys,
                                                                  terminal_sigint):
    monkeypatch.setattr(MLP, "train_step", ctrl_c_at_step(61, 0.1))
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path) == 130
    assert "interrupted at epoch 2, step 61: checkpoint written" in capsys.readouterr().err
    assert parameters(tmp_path)[1]["step"] == 61
    monkeypatch.undo()
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path, "--resume") == 0
    assert parameters(tmp_path)[1]["step"] == 90


def test_ctrl_c_as_an_epoch_is_evaluated_stops_before_the_next_step(tmp_path, monkeypatch, capsys, terminal_sigint):
    """Ctrl-C between two steps (here as the first epoch's end is scored) stops before the next one: the run used to
    take one more step first."""
    score, train_step, steps = fitting._score, MLP.train_step, []

    def counted(net, *args, **kwargs):
        steps.append(None)
        return train_step(net, *args, **kwargs)

    def ctrl_c_after_the_first_epoch(*args, **kwargs):
        if len(steps) == 45:
            signal.raise_signal(signal.SIGINT)
        return score(*args, **kwargs)

    monkeypatch.setattr(MLP, "train_step", counted)
    monkeypatch.setattr(fitting, "_score", ctrl_c_after_the_first_epoch)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path) == 130
    assert "interrupted at epoch 2, step 45: checkpoint written" in capsys.readouterr().err
    assert parameters(tmp_path)[1]["step"] == 45


def test_ctrl_c_as_the_training_loop_starts_writes_no_checkpoint_of_step_0(tmp_path, monkeypatch, capsys,
                                                                         terminal_sigint):
    """Ctrl-C once the run holds SIGINT, before its first step (as the progress bar is made): the step runs and the
    run stops after it, as after any step; no checkpoint of no step, which --resume would take."""
    bar = fitting.Bar

    def ctrl_c_then_bar(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        return bar(*args, **kwargs)

    monkeypatch.setattr(fitting, "Bar", ctrl_c_then_bar)
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path) == 130
    assert "interrupted at epoch 1, step 1: checkpoint written" in capsys.readouterr().err
    assert parameters(tmp_path)[1]["step"] == 1


def test_an_ignored_sigint_stays_ignored_while_the_run_trains(tmp_path, monkeypatch, capsys):
    """A run whose SIGINT is ignored (a background job's, as its setup leaves it) trains to its end through one: the
    loop's own handler, put over it, stopped the run at the next step."""
    monkeypatch.setattr(MLP, "train_step", ctrl_c_at_step(11))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path) == 0
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "interrupted" not in capsys.readouterr().err and parameters(tmp_path)[1]["step"] == 90


def test_a_later_ctrl_c_while_the_checkpoint_is_written_stops_after_it(tmp_path, monkeypatch, capsys,
                                                                       terminal_sigint):
    """Past the grace period a second Ctrl-C stops at once, but a checkpoint under way is finished first."""
    monkeypatch.setattr(train_loop, "SIGINT_GRACE", 0.0)
    save = checkpoint.save

    def ctrl_c_while_saving(directory, net, training):
        if training["step"] == 61:
            signal.raise_signal(signal.SIGINT)
        return save(directory, net, training)

    monkeypatch.setattr(checkpoint, "save", ctrl_c_while_saving)
    monkeypatch.setattr(MLP, "train_step", ctrl_c_at_step(61))
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", tmp_path) == 130
    assert f"stopped at once: {tmp_path}/checkpoint.npz holds the last checkpoint" in capsys.readouterr().err
    assert parameters(tmp_path)[1]["step"] == 61


def sigint_at_its_default():
    """In a child that gets Ctrl-C, SIGINT as a terminal's job has it: a test runner started in the
    background (``nohup pytest &``) ignores SIGINT, and its children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_before_the_first_step_exits_130_with_one_line(tmp_path):
    code = ("import signal, sys; from leapfrog_gpu import datasets; "
            "from leapfrog_gpu.tools.train import command as train;"
            "datasets.digits = lambda dtype: signal.raise_signal(signal.SIGINT);"  # Ctrl-C while the data load
            f"sys.exit(train.main(['--checkpoint-dir', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_at_its_default)
    assert (done.returncode, done.stdout) == (130, "")
    assert done.stderr == "leapfrog-train: interrupted before the first step; nothing was written\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("outputs, said", [
    (["--metrics", "run.json", "--timeline", "run.png"], "--metrics and --timeline's .json name one file, run.json"),
    (["--metrics", "ck/checkpoint.npz", "--checkpoint-dir", "ck"], "--metrics and --checkpoint-dir's checkpoint name "
                                                                   "one file, ck/checkpoint.npz"),
])
def test_two_outputs_of_one_name_are_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, outputs, said):
    """The later wrote over the earlier (the timeline's record replaced every metrics line), exit status 0."""
    monkeypatch.chdir(tmp_path)
    assert cli(*SMALL, *outputs) == 2
    assert one_error_line(capsys) == f"leapfrog-train: error: {said}: give each its own"
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_ctrl_c_while_the_loss_at_the_start_is_measured_is_one_before_the_first_step(tmp_path, monkeypatch, capsys,
                                                                                      terminal_sigint):
    """The divergence rule's pass over the training set (a minute for a Newton-solved DagNet) comes before the
    metrics file is started: a Ctrl-C then leaves it as it was (it was emptied, and said "stopped at once")."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 1, "from": "an earlier run"}\n')

    def interrupted(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(train_loop, "evaluate", interrupted)
    assert cli(*SMALL, "--metrics", metrics, "--checkpoint-dir", tmp_path / "run") == 130
    assert capsys.readouterr().err == "leapfrog-train: interrupted before the first step; nothing was written\n"
    assert metrics.read_text() == '{"epoch": 1, "from": "an earlier run"}\n' and not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["data", "estimate"])
def test_a_ctrl_c_that_cpython_swallowed_before_the_first_step_still_stops_the_run(tmp_path, monkeypatch, capsys,
                                                                                    terminal_sigint, where):
    """CPython swallows an exception raised in a ``__del__`` (it says "Exception ignored in ..." and goes on): a
    Ctrl-C landing in one while the run set up was lost, and the run trained to its end with exit status 0. Here
    one lands in the ``__del__`` of an object dropped as the data load, or as the estimate is asked."""
    class Dropped:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # its handler runs here, inside __del__

    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", swallowed.append)  # where CPython reports what it swallowed
    if where == "data":
        digits = datasets.digits
        monkeypatch.setattr(datasets, "digits", lambda dtype: (Dropped(), digits(dtype))[1])
    else:
        ask = estimate.ask
        monkeypatch.setattr(estimate, "ask", lambda *args: (Dropped(), ask(*args))[1])
    status = cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "run", "--metrics", tmp_path / "m.jsonl")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the command's own handler is gone with it
    assert [report.exc_type for report in swallowed] == [KeyboardInterrupt]  # swallowed, as CPython does
    assert status == 130
    assert capsys.readouterr().err == "leapfrog-train: interrupted before the first step; nothing was written\n"
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_tqdm_makes_its_lock_is_one_before_the_first_step(monkeypatch, capsys):
    """tqdm makes its write lock (a multiprocessing lock, slow) on first use. Made by the header line's
    ``external_write_mode``, a Ctrl-C meanwhile came out as tqdm's AttributeError (its ``finally`` releases the lock it
    never made): a traceback, exit status 1. The Ctrl-C lands here as that lock is made, wherever the run makes it."""
    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.delattr(tqdm, "_lock", raising=False)  # made by an earlier test in this process
    monkeypatch.setattr(tqdm_std.TqdmDefaultWriteLock, "__init__", interrupted)
    assert cli("--hidden", "5x24", "--epochs", 1) == 130  # not --quiet: the header line is printed
    assert capsys.readouterr() == ("", "leapfrog-train: interrupted before the first step; nothing was written\n")


@pytest.mark.parametrize("stop, status", [(train_loop.Refused("not started"), 2), (KeyboardInterrupt(), 130)],
                         ids=["declined", "ctrl-c"])
def test_a_run_that_writes_nothing_leaves_no_checkpoint_folder_behind(tmp_path, monkeypatch, capsys, stop, status):
    """Declined at its question, or stopped by Ctrl-C there, before the first step: the folders the run made for
    its --checkpoint-dir are gone again; those that were there stay."""
    def asked(*args):
        raise stop

    monkeypatch.setattr(estimate, "ask", asked)
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "new" / "run") == status
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "there").mkdir()
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "there" / "run") == status
    assert list(tmp_path.iterdir()) == [tmp_path / "there"] and list((tmp_path / "there").iterdir()) == []
    assert len(capsys.readouterr().err.splitlines()) == 2  # one line each


@pytest.mark.parametrize("stop, status", [(train_loop.Refused("not started"), 2), (KeyboardInterrupt(), 130)],
                         ids=["declined", "ctrl-c"])
def test_a_run_that_never_starts_leaves_the_metrics_file_of_an_earlier_run(tmp_path, monkeypatch, stop, status):
    """Declined at its question, or stopped there: an earlier run's --metrics file of that name is as it was; a
    run that starts replaces it with its own records."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 7}\n')
    ask = estimate.ask

    def asked(*args):
        raise stop

    monkeypatch.setattr(estimate, "ask", asked)
    assert cli(*SMALL, "--epochs", 1, "--metrics", metrics) == status
    assert metrics.read_text() == '{"epoch": 7}\n'
    monkeypatch.setattr(estimate, "ask", ask)
    assert cli(*SMALL, "--epochs", 2, "--metrics", metrics) == 0
    assert [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()] == [1, 2]


def test_a_fresh_run_whose_first_checkpoint_fails_leaves_the_metrics_file_of_an_earlier_run(tmp_path, monkeypatch,
                                                                                            capsys):
    """Its first record is taken back with the checkpoint it goes with, and the earlier run's lines stay (they went
    once that record was written whole, before the checkpoint: the file was left empty)."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 7}\n')

    def full(directory, net, training):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", full)
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "run", "--metrics", metrics) == 5
    assert "cannot write the checkpoint" in one_error_line(capsys)
    assert metrics.read_text() == '{"epoch": 7}\n'


@pytest.mark.parametrize("command", ["leapfrog-train", "leapfrog-bench"])
@pytest.mark.parametrize("module", ["numpy", "numpy.dtypes", "tqdm"])
def test_ctrl_c_while_the_command_starts_exits_130_with_one_line(command, module):
    """As the console script runs the command, with Ctrl-C while it imports numpy (the first module of
    weight that any command needs), amid numpy's own import (after which numpy cannot be imported again: the
    line must not need it) or tqdm (which only the commands import, after the package)."""
    code = f"""
import importlib.abc, importlib.metadata, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
(command,) = importlib.metadata.entry_points(group="console_scripts", name={command!r})
sys.exit(command.load()())
"""
    done = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_at_its_default)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", f"{command}: interrupted while starting; "
                                                                    "nothing was run\n")


def test_ctrl_c_while_a_command_imports_torch_as_it_runs_exits_130_with_one_line():
    """``leapfrog-bench`` imports torch once it runs (its PyTorch anchor): Ctrl-C then, outside the command's own
    handling, is still one line and exit status 130, not a traceback."""
    code = """
import importlib.abc, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
from leapfrog_gpu.tools import leapfrog_bench
sys.argv[1:] = ["--backend", "numpy", "--sizes", "8", "--layers", "2", "--batch", "1", "--repeats", "1"]
sys.exit(leapfrog_bench())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=sigint_at_its_default)
    assert (done.returncode, done.stderr) == (130, "leapfrog-bench: interrupted (SIGINT)\n")


@pytest.mark.parametrize("argv,imported", [(["--help"], []),
                                           (["--hidden", "2x8", "--epochs", "1", "--quiet"], ["scipy_openblas32"])],
                         ids=("help", "run"))
def test_a_run_imports_neither_scikit_learn_nor_matplotlib(argv, imported):
    """Most of a slow start was importing scikit-learn (and SciPy with it) to load the digits; the run
    needs them no more than matplotlib. The BLAS comes with the first product, so ``--help`` does
    without it too."""
    code = (f"import sys\nfrom leapfrog_gpu.tools.train import command as train\ntry:\n    code = train.main({argv!r})\n"
            "except SystemExit as stop:\n    code = stop.code or 0\nassert code == 0, code\n"
            "print(sorted({name.partition('.')[0] for name in sys.modules} & {'sklearn', 'scipy', 'scipy_openblas32', 'matplotlib'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(imported)


# -- errors: exit status 2 and one line -----------------------------------------------------------------


@pytest.mark.parametrize("args, hidden", [
    (["--hidden", "4x16"], [16] * 4), (["--hidden", "3x3"], [3] * 3), (["--hidden", "16,16,8"], [16, 16, 8]),
    (["--hidden", "2x16,9"], [16, 16, 9]), (["--hidden", "12"], [12]), (["--layers", 3, "--width", 16], [16] * 3),
    (["--layers", 2], [128] * 2), (["--width", 16], [16] * 4), (["--model", "rnn", "--layers", 2], [64] * 2)])
def test_hidden_widths_explicit_counted_or_by_layers_and_width(args, hidden):
    """``AxB`` with A <= B keeps its meaning, A layers of B; ``--layers``/``--width`` fill in the default's."""
    given = vars(train.build_parser().parse_args([str(arg) for arg in args]))
    assert train.configure(given)["hidden"] == hidden


@pytest.mark.parametrize("text, before, count, width, after", [("128x4", [], 128, 4, []), ("9x3", [], 9, 3, []),
                                                              ("2x16,9x3,5", [16, 16], 9, 3, [5])])
def test_an_either_way_hidden_is_refused_with_a_command_for_each_reading(text, before, count, width, after, capsys):
    """``128x4``: the two commands the refusal gives are its two readings, 4 layers of 128 and 128 of 4 (both gave
    4 of 128), with the other widths of the list kept (both dropped them)."""
    with pytest.raises(SystemExit):
        train.build_parser().parse_args(["--hidden", text])
    said = re.search(r"write (--hidden \S+) or (--hidden \S+|--layers \d+ --width \d+)$",
                     capsys.readouterr().err.strip())
    readings = []
    for command in said.groups():
        given = vars(train.build_parser().parse_args(command.split()))
        readings.append(train.configure(given)["hidden"])
    assert readings == [before + [count] * width + after, before + [width] * count + after]


@pytest.mark.parametrize("args, message", [
    (["--k", 0], "argument --k: must be an integer >= 1 or auto; got '0'"),
    (["--k", "many"], "argument --k: must be an integer >= 1 or auto; got 'many'"),
    (["--k", "auto", "--schedule", "sequential"], "--k auto applies to --schedule leapfrog only"),
    (["--model", "rnn", "--k", "auto", "--schedule", "wavefront"], "--k auto applies to --schedule leapfrog only"),
    (["--k", 4, "--schedule", "sequential"], "--k applies to the schedules with worker streams; --schedule sequential "
                                             "runs its gradients on the main stream: drop --k"),
    (["--model", "rnn", "--k", 4, "--schedule", "bptt"], "--k applies to the schedules with worker streams; --schedule "
                                                         "bptt runs"),
    (["--bucket-mb", 1], "--bucket-mb applies to a run of several ranks (mpiexec -n P, P >= 2); this one runs alone: "
                         "drop it"),
    (["--comm-timeout", 60, "--bucket-mb", 0], "--bucket-mb and --comm-timeout apply to a run of several ranks"),
    (["--batch-size", 0], "argument --batch-size: must be an integer >= 1; got '0'"),
    (["--lr", -0.5], "argument --lr: must be a finite number >= 0; got '-0.5'"),
    (["--lr", "inf"], "argument --lr: must be a finite number >= 0; got 'inf'"),
    (["--lr", "-1e-3"], "argument --lr: must be a finite number >= 0; got '-1e-3'"),  # not taken for an option
    (["--lr", "-inf"], "argument --lr: must be a finite number >= 0; got '-inf'"),
    (["--betas", "-0.1,0.9"], "argument --betas: betas must be a comma-separated list of numbers >= 0; got '-0.1,0.9'"),
    (["--epochs", "two"], "argument --epochs: must be an integer >= 1; got 'two'"),
    (["--schedule", "fast"], "--schedule fast is not a schedule of --model mlp; choose from sequential, leapfrog, "
                             "naumov-scan, naumov-jacobi"),
    (["--schedule", "bptt"], "--schedule bptt is not a schedule of --model mlp; choose from sequential, leapfrog, "
                             "naumov-scan, naumov-jacobi"),
    (["--activation", "softmax"], "argument --activation: invalid choice: 'softmax'"),
    (["--data", "cifar"], "argument --data: invalid choice: 'cifar'"),
    (["--hidden", "4x0"], "argument --hidden: must be widths >= 1 such as 128,64,32, 6x128 (6 layers of 128)"),
    (["--hidden", "0x5,8"], "argument --hidden: must be widths >= 1 such as 128,64,32, 6x128 (6 layers of 128)"),
    (["--hidden=-1x5,8"], "argument --hidden: must be widths >= 1 such as 128,64,32, 6x128 (6 layers of 128)"),
    (["--hidden", "128x4"], "argument --hidden: 128x4: 4 layers of 128 or 128 layers of 4? write --hidden 4x128 "
                            "or --layers 128 --width 4"),
    (["--hidden", "2x16,9x3"], "argument --hidden: 9x3: 3 layers of 9 or 9 layers of 3? write --hidden 2x16,3x9 or "
                               "--hidden 2x16,3,3,3,3,3,3,3,3,3"),
    (["--hidden", "8", "--layers", 2], "--hidden and --layers/--width say the same thing: give one of them"),
    (["--layers", 0], "argument --layers: must be an integer >= 1; got '0'"),
    (["--layers", 10**20, "--width", 4], "argument --layers: must be at most 2147483647; got '1000"),  # no list holds it
    (["--hidden", "2x100000000000000000000"], "argument --hidden: must be at most 2147483647; got '2x1000"),
    (["--blas-threads", 10**20], "argument --blas-threads: must be at most 2147483647"),  # a C int in threadpoolctl
    (["--memory-limit", "1e300"], "argument --memory-limit: must be a number of GiB > 0 and <= 1073741824; got '1e300'"),
    (["--profile-steps", "9:3"], "argument --profile-steps: must be A:B with integers 0 <= A < B"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["--epoch", 1], "unrecognized arguments: --epoch 1"),  # a prefix is not --epochs
    (["--data", "mnist"], "--data mnist needs --data-dir DIR"),
    (["--data-dir", "somewhere"], "--data-dir applies to --data mnist only"),
    (["--metrics", "out", "--checkpoint-dir", "./out"], "--metrics out is --checkpoint-dir's folder or one above it: "
                                                       "give each its own"),  # it said "out: Is a directory"
    (["--metrics", "m.jsonl", "--checkpoint-dir", "m.jsonl/run"], "--metrics m.jsonl is --checkpoint-dir's folder"),
    (["--timeline", "t.png", "--checkpoint-dir", "t.png"], "--timeline t.png is --checkpoint-dir's folder"),
    (["--timeline", "t.png", "--checkpoint-dir", "t.json"], "--timeline's .json t.json is --checkpoint-dir's folder"),
    (["--model", "resmlp", "--hidden", "3x32"], "--model resmlp of widths [64, 32, 32, 32, 10] and --skip 2 makes no "
                                                "skip connection"),  # the first block reads the data, the second ends
    (["--model", "resmlp", "--hidden", "5x32", "--skip", 3], "--model resmlp of widths [64, 32, 32, 32, 32, 32, "
                                                             "10] and --skip 3 makes no skip connection"),
    (["--samples", 10], "--samples applies to --data teacher or adding only"),
    (["--data", "teacher", "--cost", "cross_entropy"], "--data teacher is a regression task: use --cost quadratic"),
    (["--resume"], "--resume needs --checkpoint-dir DIR"),
    (["--epochs", 1, "--profile-steps", "40:46"], "--profile-steps 40:46 reaches past this run's last step, 44"),
    (["--epochs", 10**23], "--epochs 100000000000000000000000 of 45 steps make more than 2**63 - 1 steps, the most "
                           "an optimizer's state counts: give --epochs 204963823041217240 or fewer"),  # 2**63 // 45
    (["--timeline", "/nonexistent-folder/t.png"],
     "--timeline /nonexistent-folder/t.png: the folder /nonexistent-folder does not exist"),
    (["--data", "teacher", "--samples", 64, "--epochs", 1, "--timeline", "t.png"],
     "--timeline records steps 10..14 by default, past this run's last step, 1 (steps count from 0): give "
     "--profile-steps A:B"),
    (["--timeline", "t.txt"], "--timeline t.txt: the chart is written as PNG: give a name ending in .png (its "
                              "intervals go beside it, in .json)"),
    (["--graph", "--timeline", "t.png"],
     "--timeline stamps every launch of eager steps, and a graph step is one launch: drop --graph, or drop --timeline"),
])
def test_bad_options(capsys, args, message):
    assert cli(*args) == 2
    assert one_error_line(capsys).startswith("leapfrog-train: error: " + message)


def test_more_blas_threads_than_openblas_runs_are_refused_in_one_line(capsys):
    """OpenBLAS cuts a count above its MAX_THREADS to that, without a word."""
    most = host_blas.most_threads()
    if most is None:
        pytest.skip("no scipy-openblas32: no MAX_THREADS to read")
    assert cli("--blas-threads", most + 1) == 2
    assert one_error_line(capsys) == (f"leapfrog-train: error: argument --blas-threads: {most + 1} is more threads "
                                      f"than this OpenBLAS runs (at most {most}, its build's MAX_THREADS: it would "
                                      f"run {most}); give at most {most}")


def test_seeds_and_epochs_take_any_integer():
    """A seed or a count of epochs is no width: beyond a C int it is taken (a 32-bit unsigned seed, say), as a
    checkpoint that holds one is resumed."""
    given = vars(train.build_parser("mlp").parse_args(["--seed", "4294967295", "--epochs", str(10**12)]))
    assert (given["seed"], given["epochs"]) == (4294967295, 10**12)


def _mnist_files(directory, break_it):
    """The four MNIST IDX files, 5x5 images, then ``break_it`` applied to the folder."""
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (9, 5, 5)), "y_train": rng.integers(0, 10, 9),
              "x_test": rng.integers(0, 256, (4, 5, 5)), "y_test": rng.integers(0, 10, 4)}
    break_it(arrays)
    for role, stem in datasets.MNIST_FILES.items():
        array = np.asarray(arrays[role], dtype=np.uint8)
        header = bytes([0, 0, 8, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
        (directory / (stem + ".gz")).write_bytes(gzip.compress(header + array.tobytes()))
    return directory


def _set(role, value):
    return lambda arrays: arrays.__setitem__(role, value)


@pytest.mark.parametrize("break_it, after, message", [
    (lambda arrays: None, lambda d: (d / "t10k-images-idx3-ubyte.gz").unlink(),
     "lacks MNIST file(s) t10k-images-idx3-ubyte"),
    (lambda arrays: None, lambda d: (d / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b garbage"),
     "train-labels-idx1-ubyte.gz is not a readable gzip file"),
    (_set("y_test", [1, 2, 13, 4]), lambda d: None, "t10k-labels-idx1-ubyte.gz holds label 13 at index 2"),
    (_set("y_train", np.zeros(8, dtype=int)), lambda d: None,
     "train-images-idx3-ubyte.gz has 9 samples but train-labels-idx1-ubyte.gz has 8 labels"),
    (_set("x_test", np.zeros((4, 6, 5), dtype=int)), lambda d: None,
     "train samples have 25 inputs but test samples have 30"),
], ids=["missing", "malformed", "label-out-of-range", "samples-vs-labels", "image-sizes"])
def test_bad_data_files(tmp_path, capsys, break_it, after, message):
    directory = _mnist_files(tmp_path, break_it)
    after(directory)
    assert cli("--data", "mnist", "--data-dir", directory) == 2
    assert message in one_error_line(capsys)


@pytest.mark.parametrize("content", [b"garbage", b"PK\x03\x04 not really a zip"])
def test_a_corrupt_mnist_npz_is_one_clear_line(tmp_path, capsys, content):
    """Not NumPy's hint to load a pickle unsafely: what the file is not, and what to do."""
    (tmp_path / "mnist.npz").write_bytes(content)
    assert cli("--data", "mnist", "--data-dir", tmp_path / "mnist.npz") == 2
    assert one_error_line(capsys) == (
        f"leapfrog-train: error: {tmp_path / 'mnist.npz'} is not a readable .npz file (not a zip archive; damaged?): "
        "replace it, or give --data-dir the four MNIST IDX files")


def test_mnist_files_train(tmp_path, capsys):
    directory = _mnist_files(tmp_path, lambda arrays: None)
    assert cli("--data", "mnist", "--data-dir", directory, "--hidden", "4x8", "--epochs", 2, "--batch-size", 4) == 0
    assert "mnist: 9 train, 4 test samples | MLP [25, 8, 8, 8, 8, 10]" in capsys.readouterr().out


@pytest.mark.parametrize("other", ["pixels", "samples"])
def test_a_checkpoint_resumes_on_the_data_it_was_trained_on_only(tmp_path, capsys, other):
    """Other MNIST files of the same widths (other pixels, or more samples: another count of steps an epoch, where
    the position was called damaged and the good checkpoint to be deleted) are refused in one line, the checkpoint
    kept; the run resumes on its own data."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    def other_data(arrays):
        if other == "pixels":
            arrays["x_train"] = np.full((9, 5, 5), 7)
        else:  # 12 samples: epochs of 4 steps, not 3
            arrays["x_train"], arrays["y_train"] = np.ones((12, 5, 5)), np.arange(12) % 10

    trained, elsewhere = _mnist_files(tmp_path / "a", lambda arrays: None), _mnist_files(tmp_path / "b", other_data)
    run = ["--data", "mnist", "--hidden", "8", "--batch-size", 3, "--quiet", "--checkpoint-dir", tmp_path / "run"]
    assert cli(*run, "--data-dir", trained, "--epochs", 1) == 0
    before = (tmp_path / "run" / "checkpoint.npz").read_bytes()
    assert cli(*run, "--data-dir", elsewhere, "--epochs", 2, "--resume") == 2
    assert one_error_line(capsys) == ("leapfrog-train: error: the checkpoint was trained on other data than mnist's "
                                      "here (its data's SHA-256 differs): resume it on the data it was "
                                      "trained on (--data, --data-dir)")
    assert (tmp_path / "run" / "checkpoint.npz").read_bytes() == before
    assert cli(*run, "--data-dir", trained, "--epochs", 2, "--resume") == 0


def test_an_output_over_the_mnist_data_or_into_its_folder_is_refused_and_nothing_is_written(tmp_path, capsys):
    """--metrics naming the .npz of --data-dir wrote its lines over the data; a checkpoint (checkpoint.npz) or a
    --metrics x.npz put into the IDX folder made every later run, its --resume too, refuse the folder."""
    (tmp_path / "idx").mkdir()
    folder = _mnist_files(tmp_path / "idx", lambda arrays: None)
    arrays = {role: np.zeros((3, 4)) if role[0] == "x" else np.arange(3) for role in datasets.MNIST_FILES}
    archive = tmp_path / "mnist.npz"
    np.savez(archive, **arrays)
    before = {path: path.read_bytes() for path in [archive, *folder.iterdir()]}
    for data, option, name, line in [
            (archive, "--metrics", archive, f"--metrics names --data-dir's MNIST file, {archive}: give it a name of "
                                            "its own"),
            (folder, "--checkpoint-dir", folder, f"--checkpoint-dir's checkpoint would put checkpoint.npz into "
                                                 f"--data-dir {folder}, which MNIST would then read as data: give it "
                                                 "another folder"),
            (folder, "--metrics", folder / "m.npz", f"--metrics would put m.npz into --data-dir {folder}, which MNIST "
                                                    "would then read as data: give it another folder"),
            (folder, "--metrics", folder / "t10k-labels-idx1-ubyte.gz", "--metrics names --data-dir's MNIST file, "
                                                                        f"{folder / 't10k-labels-idx1-ubyte.gz'}: give "
                                                                        "it a name of its own")]:
        assert cli("--data", "mnist", "--data-dir", data, "--epochs", 1, "--batch-size", 2, option, name) == 2
        assert one_error_line(capsys) == f"leapfrog-train: error: {line}"
    assert {path: path.read_bytes() for path in [archive, *folder.iterdir()]} == before
    assert cli("--data", "mnist", "--data-dir", folder, "--epochs", 1, "--batch-size", 4, "--quiet",
               "--metrics", folder / "m.jsonl") == 0  # a name MNIST does not read


def test_checkpoint_errors(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", run) == 0
    capsys.readouterr()
    assert cli(*SMALL, "--epochs", 2, "--checkpoint-dir", run) == 2
    assert "exists: add --resume to continue it, or choose another --checkpoint-dir" in one_error_line(capsys)
    assert cli("--hidden", "4x128", "--checkpoint-dir", run, "--resume") == 2
    assert one_error_line(capsys) == (
        "leapfrog-train: error: --hidden 128,128,128,128 differs from the checkpoint's 24,24,24,24,24; "
        "drop it to resume, or start a new --checkpoint-dir")
    assert cli("--layers", 2, "--checkpoint-dir", run, "--resume") == 2  # named as typed, with the widths they make
    assert one_error_line(capsys) == (
        "leapfrog-train: error: --layers 2 (--hidden 24,24) differs from the checkpoint's 24,24,24,24,24; "
        "drop it to resume, or start a new --checkpoint-dir")
    assert cli("--checkpoint-dir", tmp_path / "empty", "--resume") == 2
    assert "no checkpoint to resume from" in one_error_line(capsys)
    checkpoint.path_in(run).write_bytes(b"PK\x03\x04 not really a zip")
    assert cli("--checkpoint-dir", run, "--resume") == 2
    assert one_error_line(capsys) == (f"leapfrog-train: error: {checkpoint.path_in(run)} is not an .npz archive "
                                      "(damaged, or another kind of file): delete it, or choose another --checkpoint-dir")


@pytest.mark.parametrize("content", [b"garbage", b"PK\x03\x04 not really a zip"])
def test_a_corrupt_checkpoint_says_to_delete_it_and_never_to_add_resume(tmp_path, capsys, content):
    """Not NumPy's hint to load a pickle unsafely, and without --resume no hint to add --resume (which
    would fail as well): one line that says what to do instead."""
    checkpoint.path_in(tmp_path).write_bytes(content)
    for resume in ([], ["--resume"]):
        assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path, *resume) == 2
        line = one_error_line(capsys)
        assert line.endswith(": delete it, or choose another --checkpoint-dir"), line
        assert "--resume" not in line and "pickle" not in line and "unsafe" not in line, line


def edit_state(directory, path, value):
    """Set the value at ``path`` (keys joined by dots) in the state of ``directory``'s checkpoint to ``value`` (None:
    delete it), as JSON: the checkpoint stays a readable file, its arrays as they were."""
    with np.load(checkpoint.path_in(directory)) as archive:
        arrays = {name: archive[name] for name in archive.files}
    state = json.loads(arrays.pop("state").item())
    *parents, last = path.split(".")
    held = state
    for key in parents:
        held = held[key]
    if value is None:
        del held[last]
    else:
        held[last] = value
    np.savez(checkpoint.path_in(directory), **arrays, state=np.array(json.dumps(state)))


@pytest.mark.parametrize("path, value, words", [
    ("training.epoch", "x", "its epoch is 'x', not an integer >= 0"),
    ("training.step", -5, "its step is -5, not an integer >= 0"),
    ("training.step_in_epoch", 999, "its position (epoch 1, step_in_epoch 999, step 45) does not fit epochs of 45 "
                                    "steps"),
    ("training.start_loss", "x", "its start_loss is 'x', not a finite number >= 0"),
    ("training.rng.state", None, "its rng is {'bit_generator': 'PCG64', 'has_uint32': "),
    ("training.rng.state.state", -5, "its rng is {'bit_generator': 'PCG64', 'state': {'state': -5, "),
    ("training.config", [], "its config is not a JSON object"),
    ("training.config.hidden", "abc", "its options: argument --hidden: must be widths >= 1 such as 128,64,32, "),
    ("training.config.batch_size", 0, "its options: argument --batch-size: must be an integer >= 1; got '0'"),
    ("training.config.dtype", "float16", "its options: argument --dtype: invalid choice: 'float16' "),
    ("training.config.k", 0, "its options: argument --k: must be an integer >= 1 or auto; got '0'"),
    ("training.config.fused", "yes", "its options: --fused is 'yes', neither true nor false"),
    ("training.config.schedule", "bptt", "its options: --schedule bptt is not a schedule of --model mlp; "),
    ("training.config.ranks", 0, "its options: ranks is 0, not a number of processes >= 1"),
    ("training.config.forward_solver", "newton", "its options: --forward-solver applies to --model resmlp or rnn "
                                                 "only"),  # resumed as if sequential, its metrics saying newton
    ("training.config.cell", "lstm", "its options: --cell applies to --model rnn only"),
    ("training.config.optimizer", "adamw", "its optimizer is Adam(lr=0.001, betas=(0.9, 0.999), eps=1e-08, "
                                           "weight_decay=0.0), and its options make AdamW(lr=0.001, "),
    ("optimizer", None, "its optimizer is plain SGD, which keeps no state, and its options make Adam("),
    ("optimizer.kind", "RMSprop", "its optimizer 'RMSprop' is none of SGD, Adam, AdamW, or lacks its "
                                  "hyper-parameters"),
    ("optimizer.hyper.eps", -1, "its optimizer Adam: eps must be > 0 and finite; got -1"),
    ("optimizer.step", 44, "its optimizer's step count is 44, not 45 (its steps)"),
    ("architecture.activation", "foo", "its architecture has activation 'foo', and its options build 'tanh'"),
])
def test_a_damaged_checkpoint_is_refused_in_one_line_and_kept(tmp_path, capsys, path, value, words):
    """A checkpoint edited into one that no run writes, still valid JSON: what --resume reads of it is checked as a
    fresh run's options are, its optimizer made by the library, its counters against each other; refused in one
    line, and left as it was. Without --resume too (no hint to add it), but for what the data (the position) and
    the network (the architecture) check: those are read with --resume only."""
    assert cli(*SMALL, "--optimizer", "adam", "--epochs", 1, "--checkpoint-dir", tmp_path) == 0
    edit_state(tmp_path, path, value)
    before = checkpoint.path_in(tmp_path).read_bytes()
    capsys.readouterr()
    read_with_the_data = path in ("training.step_in_epoch", "architecture.activation")
    for resume in [["--resume"]] + [[]] * (not read_with_the_data):
        assert cli("--quiet", "--epochs", 2, "--checkpoint-dir", tmp_path, *resume) == 2
        line = one_error_line(capsys)
        assert line.startswith(f"leapfrog-train: error: the checkpoint {tmp_path}/checkpoint.npz is damaged: {words}")
        assert line.endswith(": delete it, or choose another --checkpoint-dir"), line
    assert checkpoint.path_in(tmp_path).read_bytes() == before


@pytest.mark.skipif(cuda_available(), reason="checks the message given when no CUDA device is usable")
def test_cupy_backend_without_a_gpu(capsys):
    assert cli("--backend", "cupy", "--epochs", 1) == 2
    line = one_error_line(capsys)
    assert line.startswith("leapfrog-train: error: --backend cupy ") and line.endswith("use --backend numpy")


def test_console_entry_points():
    """As a user runs it: one line on stderr, no traceback, exit 2; ``python -m leapfrog_gpu`` is the same."""
    for module in ("leapfrog_gpu.tools.train", "leapfrog_gpu"):
        done = subprocess.run([sys.executable, "-m", module, "--k", "0"], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == "leapfrog-train: error: argument --k: must be an integer >= 1 or auto; got '0'\n"


# -- GPU ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason=NO_GPU)
def test_cupy_backend_trains_and_profiles(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    assert cli(*SMALL, "--epochs", 2, "--backend", "cupy", "--profile-steps", "3:5", "--metrics", metrics,
               "--checkpoint-dir", tmp_path / "run") == 0
    assert "note" not in capsys.readouterr().err
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert lines[-1]["backend"] == "cupy" and lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert parameters(tmp_path / "run")[1]["step"] == 90


def test_ctrl_c_said_by_rank_0_ends_every_rank_before_the_backend_waits_for_its_streams(monkeypatch):
    """Under mpiexec, rank 0's line for a Ctrl-C ends the job at once: closing the backend first would wait for
    the step's sums on the communication stream, which the interrupted peers never join (each then said its own
    interruption too, after its wait: two lines where one is due)."""
    from leapfrog_gpu.backends.host import NumpyBackend
    from leapfrog_gpu.parallel.comm import Communicator

    done = []

    def said_by_rank_0(*args):
        raise train.StoppedEveryRank

    def abort(self, status, quiet=False):
        done.append(("abort", status, quiet))
        raise SystemExit(status)

    close = NumpyBackend.close
    monkeypatch.setattr(train, "_run", said_by_rank_0)
    monkeypatch.setattr(Communicator, "abort", abort)
    monkeypatch.setattr(NumpyBackend, "close", lambda self: done.append(("close",)) or close(self))
    assert cli(*SMALL, "--backend", "numpy") == 130
    assert done[:2] == [("abort", 130, True), ("close",)]


@pytest.mark.parametrize("args, words", [
    (["--hidden", "2000000000"], r"not enough memory \(Unable to allocate .* GiB for an array with shape "
                                 r"\(2000000000, 64\) and data type float\d+\): ask for smaller sizes"),
    (["--checkpoint-dir", ""], "argument --checkpoint-dir: must name a file or a folder; got ''"),
    (["--timeline", ""], "argument --timeline: must name a file or a folder; got ''"),
    (["--comm-timeout", "0.5"], "argument --comm-timeout: must be a number of seconds >= 1; got '0.5'"),
    (["--lr", "1e39"], r"lr=1e\+39 is beyond float32's largest number, 3.403e\+38, in which this MLP computes its "
                       "steps: give a smaller lr"),
    (["--optimizer", "adam", "--eps", "1e-40"], r"eps 1e-40 is below float32's smallest normal number, 1.175e-38, "
                                                "which a GPU flushes to 0: give eps >= 1.175e-38"),
    (["--lr", "1e-300"], r"the learning rate 1e-300 is below float32's smallest normal number, 1.175e-38, which a "
                         "GPU flushes to 0: give the learning rate >= 1.175e-38 or 0"),
])
def test_what_no_run_here_can_take_is_refused_in_one_line_before_the_first_step(tmp_path, capsys, args, words):
    """Sizes this machine cannot hold, an empty path (which wrote nothing, said nothing), a watchdog that would fire
    at any pause, hyper-parameters that are inf or 0 in float32 (which ended in NaN, exit 3): exit 2, one line."""
    metrics = tmp_path / "metrics.jsonl"
    assert cli("--epochs", 1, "--backend", "numpy", "--metrics", metrics, *args) == 2
    assert re.fullmatch(f"leapfrog-train: error: {words}", one_error_line(capsys))
    assert not metrics.exists() or metrics.read_bytes() == b""


@pytest.mark.parametrize("folder", ["chart.png", "chart.json"])
def test_a_timeline_that_would_be_written_over_a_folder_is_refused_before_the_run(tmp_path, capsys, folder):
    (tmp_path / folder).mkdir()
    assert cli(*SMALL, "--epochs", 1, "--backend", "numpy", "--timeline", tmp_path / "chart.png") == 2
    assert one_error_line(capsys) == (f"leapfrog-train: error: --timeline {tmp_path}/chart.png: {tmp_path}/{folder} "
                                      "is a folder; give the name of a file that is none")


def test_a_checkpoint_dir_that_is_a_file_or_whose_checkpoint_is_a_folder_is_refused_saying_so(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("kept\n")
    (tmp_path / "run" / "checkpoint.npz").mkdir(parents=True)
    assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "notes.txt") == 2
    assert one_error_line(capsys) == (f"leapfrog-train: error: --checkpoint-dir {tmp_path}/notes.txt: it is a file, "
                                      "not a folder; give a folder's name")
    for resume in ([], ["--resume"]):
        assert cli(*SMALL, "--epochs", 1, "--checkpoint-dir", tmp_path / "run", *resume) == 2
        assert one_error_line(capsys) == (f"leapfrog-train: error: {tmp_path}/run/checkpoint.npz is a folder, not a "
                                          "checkpoint: remove it, or choose another --checkpoint-dir")
    assert (tmp_path / "notes.txt").read_text() == "kept\n" and (tmp_path / "run" / "checkpoint.npz").is_dir()


def test_memory_limit_is_what_a_schedule_may_take_before_the_step_is_refused(capsys):
    """A Naumov scan of 4 layers of 64 needs about 4 MiB: refused under --memory-limit 0.001 (GiB) in the command's
    words, not the library's (memory_limit=, Sequential()), and run under 0.01; a forward solver's need names
    --forward-solver."""
    options = ["--backend", "numpy", "--epochs", 1, "--hidden", "4x64", "--schedule", "naumov-scan", "--quiet"]
    assert cli(*options, "--memory-limit", 0.001) == 2
    assert re.fullmatch(r"leapfrog-train: error: NaumovScan needs \d+ bytes \(4.0 MiB\) for sizes of depth L=6, "
                        r"padded width N=64, batch B=32 \(float32\), over the 1073742 bytes \(1.0 MiB\) of "
                        r"--memory-limit; give a larger --memory-limit \(GiB\) or another --schedule",
                        one_error_line(capsys))
    assert cli(*options, "--memory-limit", 0.01) == 0
    assert cli("--backend", "numpy", "--model", "rnn", "--forward-solver", "newton", "--memory-limit", 1e-6) == 2
    assert re.fullmatch(r"leapfrog-train: error: TimeNewton needs \d+ bytes .* for sizes \[8, \d+, 10\] at "
                        r"tau=8, B=\d+ \(float32\), over the 1074 bytes \(1.0 KiB\) of --memory-limit; give a larger "
                        r"--memory-limit \(GiB\) or another --forward-solver", one_error_line(capsys))


@pytest.mark.parametrize("kind", ["checkpoint", "timeline", "text"])
def test_metrics_refuses_a_file_that_holds_something_else(tmp_path, capsys, kind):
    """A --metrics file there already whose first line is no epoch's record (another run's checkpoint or timeline
    .json, a note) is refused in one line and left as it was; one of metrics lines is taken (a fresh run empties
    it)."""
    if kind == "checkpoint":
        assert cli(*SMALL, "--quiet", "--epochs", 1, "--checkpoint-dir", tmp_path / "run") == 0
        other = tmp_path / "run" / "checkpoint.npz"
    elif kind == "timeline":
        assert cli(*SMALL, "--quiet", "--epochs", 1, "--timeline", tmp_path / "t.png") == 0
        other = tmp_path / "t.json"
    else:
        other = tmp_path / "notes.txt"
        other.write_text("hello\n")
    before = other.read_bytes()
    capsys.readouterr()
    assert cli(*SMALL, "--epochs", 1, "--metrics", other) == 2
    assert one_error_line(capsys) == (f"leapfrog-train: error: --metrics {other} holds something other than metrics "
                                      "lines, which the run would write over or append to: give another file")
    assert other.read_bytes() == before
    lines = tmp_path / "metrics.jsonl"
    for _ in range(2):
        assert cli(*SMALL, "--quiet", "--epochs", 1, "--metrics", lines) == 0
    assert len(lines.read_text().splitlines()) == 1


def test_a_run_refused_as_set_up_leaves_no_metrics_file_it_made(tmp_path, capsys):
    """Refused at its estimate, the run wrote no line: a --metrics file it made is gone, one that was there is as it
    was."""
    options = ["--backend", "numpy", "--epochs", 1, "--hidden", "4x64", "--schedule", "naumov-scan", "--quiet",
               "--memory-limit", 0.001]
    assert cli(*options, "--metrics", tmp_path / "new.jsonl") == 2
    (tmp_path / "old.jsonl").write_text('{"epoch": 1}\n')
    assert cli(*options, "--metrics", tmp_path / "old.jsonl") == 2
    assert [p.name for p in tmp_path.iterdir()] == ["old.jsonl"]
    assert (tmp_path / "old.jsonl").read_text() == '{"epoch": 1}\n'
    assert "--memory-limit" in capsys.readouterr().err
