"""``leapfrog-train`` under faults: Ctrl-C checkpoints the last completed step and exits 130,
``--check-finite`` stops on a non-finite gradient, ``--fused`` changes nothing but speed, and fuzzed
command lines either run or exit 2 with one line."""

import contextlib
import io
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import assert_bitwise_equal, cli, one_error_line, parameters
from leapfrog_gpu.tools.train import checkpoint, command as train

pytestmark = pytest.mark.slow

TEACHER = ["--data", "teacher", "--inputs", "16", "--outputs", "4", "--hidden", "3x32", "--samples", "4000",
           "--batch-size", "8", "--lr", "0.01"]  # 500 steps, most of a second an epoch


@pytest.mark.timeout(240)
def test_sigint_checkpoints_the_last_completed_step_and_exits_130(tmp_path):
    run, straight = tmp_path / "run", tmp_path / "straight"
    command = [sys.executable, "-m", "leapfrog_gpu", *TEACHER, "--epochs", "12", "--checkpoint-dir", str(run)]
    trainer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not a runner's
    for line in trainer.stdout:  # the header, then one line per epoch
        if line.split()[:2] == ["epoch", "1/12"]:
            break
    else:
        pytest.fail(f"the trainer ended before its first epoch: {trainer.stderr.read()}")
    time.sleep(0.3)  # well inside epoch 2
    trainer.send_signal(signal.SIGINT)
    out, err = trainer.communicate(timeout=120)
    assert trainer.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("leapfrog-train: interrupted at epoch ")
    assert "continue with --resume" in err and "Traceback" not in err

    state = parameters(run)[1]
    assert state["epoch"] >= 1 and state["step"] == state["epoch"] * 500 + state["step_in_epoch"]
    epochs = state["epoch"] + 1  # finish the interrupted epoch, then compare with a straight run
    assert cli("--quiet", "--epochs", epochs, "--checkpoint-dir", run, "--resume") == 0
    assert cli(*TEACHER, "--quiet", "--epochs", epochs, "--checkpoint-dir", straight) == 0
    assert_bitwise_equal(parameters(run)[0], parameters(straight)[0])


def test_check_finite_stops_on_a_non_finite_gradient(tmp_path, capsys):
    args = ["--hidden", "3x16", "--activation", "relu", "--cost", "quadratic", "--quiet"]
    assert cli(*args, "--epochs", 1, "--checkpoint-dir", tmp_path) == 0
    before = checkpoint.path_in(tmp_path).read_bytes()
    capsys.readouterr()
    assert cli(*args, "--epochs", 2, "--lr", 1e20, "--check-finite", "--checkpoint-dir", tmp_path, "--resume") == 3
    line = one_error_line(capsys)
    assert "holds NaN or Inf; update refused, parameters unchanged: try a smaller --lr than 1e+20" in line
    assert "at epoch 2, step " in line
    assert checkpoint.path_in(tmp_path).read_bytes() == before


def test_fused_training_is_bitwise_the_plain_one(tmp_path):
    plain, fused = tmp_path / "plain", tmp_path / "fused"
    args = ["--hidden", "3x24", "--epochs", 2, "--quiet"]
    assert cli(*args, "--checkpoint-dir", plain) == 0
    assert cli(*args, "--fused", "--checkpoint-dir", fused) == 0
    assert cli(*args, "--schedule", "sequential", "--fused", "--checkpoint-dir", tmp_path / "seq") == 0
    assert_bitwise_equal(parameters(plain)[0], parameters(fused)[0])
    assert_bitwise_equal(parameters(plain)[0], parameters(tmp_path / "seq")[0])


def test_fused_with_check_finite_is_refused(capsys):
    assert cli("--fused", "--check-finite") == 2
    assert "--check-finite needs the update after the gradients" in one_error_line(capsys)


VALUES = st.one_of(st.integers(-3, 40).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.sampled_from(["", "x", "2x", "3x8", "8,4", "0x4", "nan", "sequential", "leapfrog", "relu",
                                    "float64", "teacher", "numpy", "mnist", "1:2", "5:2"]))
OPTIONS = ["--hidden", "--activation", "--cost", "--dtype", "--epochs", "--batch-size", "--lr", "--seed",
           "--schedule", "--k", "--backend", "--blas-threads", "--profile-steps", "--data", "--samples"]
FLAGS = ["--fused", "--check-finite", "--resume"]


@settings(max_examples=60, deadline=None)
@given(options=st.lists(st.tuples(st.sampled_from(OPTIONS), VALUES), max_size=4),
       flags=st.lists(st.sampled_from(FLAGS), max_size=2, unique=True))
def test_fuzzed_command_lines_run_or_exit_2_with_one_line(options, flags):
    """In this process (an exception other than the command's exit would fail the test as a traceback would)."""
    base = ["--data", "teacher", "--inputs", "3", "--outputs", "2", "--samples", "24", "--hidden", "2x3",
            "--epochs", "1", "--quiet"]
    argv = base + [part for option in options for part in option] + flags
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        status = cli(*argv)
    assert status in (0, 2, 3), (argv, stderr.getvalue())
    assert "Traceback" not in stderr.getvalue(), (argv, stderr.getvalue())
    if status == 2:
        assert len(stderr.getvalue().strip().splitlines()) == 1, (argv, stderr.getvalue())


def test_a_rank_that_ends_the_job_removes_the_empty_folders_the_run_made_first(tmp_path, capsys):
    """Under mpiexec an error of one rank, or Ctrl-C before a checkpoint, ends every rank by ``MPI_Abort``, which runs
    no ``finally``: where rank 0 (which makes them) ends the job, the folders of ``--checkpoint-dir`` that this run
    made, still empty, go first (one process removes them on its way out); a folder holding a checkpoint stays. (Where
    another rank ends it, or the watchdog, rank 0's empty folders stay.)"""
    class Aborting:
        size, rank = 2, 0

        def abort(self, status, quiet=False):
            raise SystemExit(status)

    made = train._missing_folders(tmp_path / "runs" / "a")
    made[0].mkdir(parents=True)
    with pytest.raises(SystemExit, match="130"):
        train._fail(Aborting(), "interrupted (SIGINT)", 130, made, quiet=True)
    assert list(tmp_path.iterdir()) == []
    made[0].mkdir(parents=True)
    (made[0] / "checkpoint.npz").write_bytes(b"kept")
    with pytest.raises(SystemExit, match="2"):
        train._fail(Aborting(), "a bad option", 2, made)
    assert (made[0] / "checkpoint.npz").read_bytes() == b"kept"
    assert capsys.readouterr().err.count("stopping every rank") == 2
