"""``mpiexec -n P leapfrog-train``: the accuracy of one process on the whole batches, rank 0 alone speaks and
writes, and no fault leaves a rank waiting: a rank killed, interrupted or stopped ends the job, non-zero,
within a bounded time, and the last checkpoint stays whole. ``profiling/parallel_bench.py`` reports what
the sums cost, fused or not; ``leapfrog-bench`` under mpiexec says where that study went."""

import json
import re
import signal
import sys
import time

import numpy as np
import pytest

import mpirun
from helpers import assert_bitwise_equal, cli, one_error_line, parameters
from leapfrog_gpu.tools.bench import command as bench
from leapfrog_gpu.tools.train import checkpoint, models

sys.path.insert(0, str(mpirun.ROOT / "profiling"))
import parallel_bench  # noqa: E402
import parallel_table  # noqa: E402

pytestmark = [mpirun.needs_mpi, pytest.mark.slow]

TRAIN = [sys.executable, "-m", "leapfrog_gpu"]
TEACHER = ["--data", "teacher", "--inputs", "16", "--outputs", "4", "--hidden", "3x32", "--samples", "1000",
           "--batch-size", "8", "--lr", "0.01", "--backend", "numpy", "--quiet"]  # 63 steps, about 0.1 s an epoch


def test_two_ranks_reach_the_accuracy_of_one_process_with_the_whole_batch(tmp_path):
    """``mpiexec -n 2 leapfrog-train --epochs 3`` (batch 32 per rank) against ``--batch-size 64``: the same
    batches, so the same accuracy but for rounding (the bar is 0.5 %)."""
    two, one = tmp_path / "two", tmp_path / "one"
    out = mpirun.run(2, *TRAIN, "--epochs", 3, "--backend", "numpy", "--metrics", two / "metrics.jsonl",
                     "--checkpoint-dir", two, timeout=120)
    lines = out.splitlines()
    assert lines[0].startswith("digits: 1437 train, 360 test samples")
    assert lines[1].startswith("numpy Leapfrog(k=2) | 3 epochs of 23 steps, batch 32 on each of 2 ranks, lr 0.1")
    assert lines[2].startswith(("estimate: about ", "estimate: under 0.1 s "))
    assert [line.split()[:2] for line in lines[3:6]] == [["epoch", "1/3"], ["epoch", "2/3"], ["epoch", "3/3"]]
    assert len(lines) == 7 and lines[6].startswith("done: 3 epochs")  # rank 0 alone prints
    assert cli("--batch-size", 64, "--epochs", 3, "--backend", "numpy", "--quiet", "--metrics", one / "metrics.jsonl",
               "--checkpoint-dir", one) == 0
    two_metrics, one_metrics = ([json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
                                for d in (two, one))
    assert [m["step"] for m in two_metrics] == [m["step"] for m in one_metrics] == [23, 46, 69]
    assert abs(two_metrics[-1]["test_accuracy"] - one_metrics[-1]["test_accuracy"]) <= 0.005
    assert abs(two_metrics[-1]["train_loss"] - one_metrics[-1]["train_loss"]) <= 1e-4 * one_metrics[-1]["train_loss"]
    state = parameters(two)[1]
    assert state["config"]["ranks"] == 2 and state["config"]["batch_size"] == 32
    assert sorted(p.name for p in two.iterdir()) == ["checkpoint.npz", "metrics.jsonl"]


SMALL = {"rnn": ["--model", "rnn", "--tau", "6", "--hidden", "2x12"], "resmlp": ["--model", "resmlp", "--skip", "1",
                                                                      "--hidden", "3x12"]}


@pytest.mark.parametrize("model", ["rnn", "resmlp"])
def test_two_ranks_train_the_recurrent_and_residual_networks_as_one_process_does(tmp_path, model):
    """``mpiexec -n 2 leapfrog-train --model M`` on batches of 8 per rank against one process on batches of
    16: the same steps on the same global batches, so the same parameters but for float32 rounding."""
    common = [*SMALL[model], "--data", "teacher", "--samples", "300", "--epochs", "2", "--backend", "numpy"]
    two, one = tmp_path / "two", tmp_path / "one"
    out = mpirun.run(2, *TRAIN, *common, "--batch-size", 8, "--metrics", two / "m.jsonl", "--checkpoint-dir", two,
                     timeout=120)
    lines = out.replace("\n  ", " ").splitlines()
    assert lines[0].startswith("teacher") and " | 2 epochs of 19 steps, batch 8 on each of 2 ranks, " in lines[1]
    assert [line.split()[:2] for line in lines[3:5]] == [["epoch", "1/2"], ["epoch", "2/2"]]
    assert len(lines) == 6 and lines[5].startswith("done: 2 epochs, test mse ")  # rank 0 alone prints
    assert cli(*common, "--batch-size", 16, "--quiet", "--metrics", one / "m.jsonl", "--checkpoint-dir", one) == 0
    two_metrics, one_metrics = ([json.loads(line) for line in (d / "m.jsonl").read_text().splitlines()]
                                for d in (two, one))
    assert [m["step"] for m in two_metrics] == [m["step"] for m in one_metrics] == [19, 38]
    assert two_metrics[-1]["ranks"] == 2 and one_metrics[-1]["ranks"] == 1
    assert two_metrics[-1]["test_mse"] == pytest.approx(one_metrics[-1]["test_mse"], rel=1e-4)
    test = models.dataset(parameters(two)[1]["config"])
    with models.load(two, backend="numpy") as net:  # each rank's share summed: the mean over every output value
        a = np.asarray(net.feedforward(test.x_test), np.float64)
    assert two_metrics[-1]["test_mse"] == pytest.approx(np.mean((a - test.y_test) ** 2), rel=1e-5)
    (got, state), (want, _) = parameters(two), parameters(one)
    assert state["config"]["ranks"] == 2 and len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_ctrl_c_under_mpiexec_is_said_in_one_line_by_rank_0(tmp_path):
    """Ctrl-C at the terminal reaches mpiexec and every rank: one line, rank 0's, and exit status 130."""
    metrics = tmp_path / "m.jsonl"
    job = mpirun.launch(2, *TRAIN, *TEACHER, "--epochs", 100, "--checkpoint-dir", tmp_path, "--metrics", metrics)
    mpirun.rank_pids(job, 2)
    wait_for_epochs(metrics, 2, job)  # a checkpoint written, and a whole epoch of steps of both ranks since
    mpirun.os.killpg(job.pid, signal.SIGINT)  # the terminal's foreground job: mpiexec and the ranks
    returncode, out, err = mpirun.finish(job, timeout=120)
    assert returncode == 130, err
    lines = err.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"leapfrog-train: interrupted at epoch \d+, step \d+ and every rank "
                                            rf"stopped at once: {tmp_path}/checkpoint.npz holds the last checkpoint "
                                            rf"written; continue from it with --resume --checkpoint-dir {tmp_path} "
                                            r"under mpiexec -n 2", lines[0]), err
    checkpoint.load(tmp_path)


def test_a_run_that_diverges_on_every_rank_is_said_in_one_line(tmp_path):
    """The divergence rule reads the training loss summed over every rank: each stops at the same epoch, rank 0
    alone says it, and nobody's abort adds MPI's lines."""
    returncode, out, err = mpirun.finish(mpirun.launch(2, *TRAIN, "--data", "teacher", "--samples", 256, "--hidden", 16,
                                                       "--lr", 5, "--epochs", 3, "--backend", "numpy", "--quiet"),
                                         timeout=120)
    assert returncode == 3 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("leapfrog-train: error: the run diverged: its training loss "
                                                         "grew from "), err


@pytest.mark.parametrize("options, said", [
    (["--lr", 1e30], "the training loss is nan after epoch 1, step 23: try a smaller --lr than 1e+30"),
    (["--lr", 1e20, "--check-finite", "--hidden", "3x16"],
     "at epoch 1, step 2: nabla_w[5] holds NaN or Inf; update refused, parameters unchanged: try a smaller --lr"),
])
def test_a_nan_that_every_rank_meets_is_said_in_one_line(options, said):
    """The training loss at an epoch's end is summed over every rank, and ``--check-finite`` checks the gradients
    summed across ranks: every rank meets the NaN at the same step, rank 0 alone says it (once, not once a rank),
    and nobody's abort adds MPI's lines."""
    returncode, out, err = mpirun.finish(mpirun.launch(2, *TRAIN, "--activation", "relu", "--cost", "quadratic",
                                                       "--epochs", 2, "--quiet", *options), timeout=120)
    assert returncode == 3 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(f"leapfrog-train: error: {said}"), err


def edited(directory, change):
    """Rewrite ``directory``'s checkpoint with ``change(arrays)`` applied to its arrays (the state kept)."""
    path = checkpoint.path_in(directory)
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    change(arrays)
    np.savez(path, **arrays)


@pytest.mark.parametrize("spoil, said", [
    (lambda arrays: arrays.update(w2=arrays["w2"][:, :-1]),
     r"rank 0: .*/checkpoint\.npz does not fit this network \(weights of layer 2 must have shape \(32, 16\); got "
     r"\(32, 15\)\)"),
    (lambda arrays: arrays["exp_avg_sq.w2"].flat.__setitem__(0, np.nan),
     r".*/checkpoint\.npz does not fit this network \(exp_avg_sq of weights of layer 2 contains NaN or Inf"),
    (lambda arrays: arrays.update(zz9=np.zeros(3)),
     r"rank 0: .*/checkpoint\.npz does not fit this network \(arrays \['zz9'\] fit no parameter of it\)"),
], ids=["weights", "moments", "extra"])
def test_a_checkpoint_that_does_not_fit_is_said_in_one_line_and_kept(tmp_path, spoil, said):
    """What rank 0 finds in the parameters it restores, or every rank in the optimizer's state, every rank raises:
    rank 0 alone says it, no MPI abort lines, and the file stays as it was."""
    mpirun.run(2, *TRAIN, *TEACHER, "--epochs", 1, "--optimizer", "adam", "--checkpoint-dir", tmp_path, timeout=60)
    edited(tmp_path, spoil)
    before = checkpoint.path_in(tmp_path).read_bytes()
    returncode, out, err = mpirun.finish(mpirun.launch(2, *TRAIN, *TEACHER, "--epochs", 2, "--optimizer", "adam",
                                                       "--checkpoint-dir", tmp_path, "--resume"), timeout=60)
    assert (returncode, out) == (2, "") and len(err.splitlines()) == 1, err
    assert re.match(f"leapfrog-train: error: {said}", err), err
    assert checkpoint.path_in(tmp_path).read_bytes() == before


def test_sizes_no_rank_can_hold_are_said_in_one_line():
    """The teacher's data of a layer of 2e9 units of 1e5 inputs each (PiB), which every rank draws alike (after its
    samples: 16 of them, not the 1000 that take seconds to draw)."""
    returncode, out, err = mpirun.finish(mpirun.launch(2, *TRAIN, *TEACHER, "--hidden", "2000000000", "--inputs",
                                                       100000, "--samples", 16, "--epochs", 1, "--yes"),
                                         timeout=60)
    assert (returncode, out) == (2, "") and len(err.splitlines()) == 1, err
    assert re.fullmatch(r"leapfrog-train: error: not enough memory \(Unable to allocate .* PiB for an array with "
                        r"shape \(2000000000, 100000\) and data type float\d+\): ask for smaller sizes\n", err), err


def test_a_network_no_rank_can_hold_is_said_in_one_line():
    """Digits (64 inputs) through a layer of 2e9 units: every rank fails to draw its weights, before the ranks
    compare their networks."""
    returncode, out, err = mpirun.finish(mpirun.launch(2, *TRAIN, "--hidden", "2000000000", "--epochs", 1, "--yes"),
                                         timeout=60)
    assert (returncode, out) == (2, "") and len(err.splitlines()) == 1, err
    assert re.fullmatch(r"leapfrog-train: error: not enough memory \(Unable to allocate .* GiB for an array with "
                        r"shape \(2000000000, 64\) and data type float64\): ask for smaller sizes\n", err), err


def test_a_bad_option_on_one_rank_alone_ends_the_job_with_its_line(tmp_path):
    """Refused after MPI is set up on every rank: the other rank does not wait in MPI's setup for one that left."""
    good, bad = [*TRAIN, *TEACHER, "--epochs", 1, "--comm-timeout", 5], [*TRAIN, *TEACHER, "--epochs", 0]
    for first, second, rank in ((good, bad, 1), (bad, good, 0)):
        returncode, out, err = mpirun.finish(mpirun.launch(1, *first, ":", "-n", 1, *second), timeout=60)
        assert (returncode, out) == (2, "")
        assert err.splitlines() == [f"leapfrog-train: error: rank {rank}: argument --epochs: must be an integer >= 1; "
                                    "got '0'"]


def test_a_checkpoint_of_two_ranks_resumes_with_two_ranks_only(tmp_path, capsys):
    mpirun.run(2, *TRAIN, *TEACHER, "--epochs", 1, "--checkpoint-dir", tmp_path, timeout=60)
    assert cli("--epochs", 2, "--checkpoint-dir", tmp_path, "--resume") == 2
    assert one_error_line(capsys) == ("leapfrog-train: error: the checkpoint was written by 2 rank(s) of --batch-size "
                                      "8; resume it with as many ranks (mpiexec -n 2)")


def wait_for(path, process, timeout=60):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"the job ended before {path} appeared: {process.communicate()[1]}"
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)


def wait_for_epochs(metrics, epochs, process, timeout=120):
    """Until rank 0 has written the line of epoch ``epochs`` to ``metrics``: evidence of what the ranks ran,
    not of how fast; ``timeout`` only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= epochs):
        assert process.poll() is None, f"the job ended before epoch {epochs}: {process.communicate()[1]}"
        assert time.monotonic() < deadline, f"epoch {epochs} did not end within {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("victim", [1, 0])
def test_a_rank_killed_mid_run_ends_the_job_and_the_last_checkpoint_resumes(tmp_path, victim):
    run, straight = tmp_path / "run", tmp_path / "straight"
    job = mpirun.launch(2, *TRAIN, *TEACHER, "--epochs", 100, "--checkpoint-dir", run)
    pids = mpirun.rank_pids(job, 2)
    wait_for(checkpoint.path_in(run), job)
    time.sleep(0.15)  # inside a later epoch, perhaps while rank 0 writes the next checkpoint
    mpirun.os.kill(pids[victim], signal.SIGKILL)
    returncode, out, err = mpirun.finish(job, timeout=60)  # a job the kill leaves hanging fails here
    assert returncode != 0, (returncode, out, err)
    assert "Killed (signal 9)" in out  # mpiexec's word for it, on its stdout

    state = parameters(run)[1]  # whole: it loads
    assert 1 <= state["epoch"] < 100 and state["step_in_epoch"] == 0
    epochs = state["epoch"] + 1
    mpirun.run(2, *TRAIN, "--epochs", epochs, "--checkpoint-dir", run, "--resume", "--quiet", timeout=60)
    mpirun.run(2, *TRAIN, *TEACHER, "--epochs", epochs, "--checkpoint-dir", straight, timeout=60)
    assert_bitwise_equal(parameters(run)[0], parameters(straight)[0])


INTERRUPTED_ALONE = """
import sys
from leapfrog_gpu.tools.train import command as train
train.PEERS_INTERRUPTED = 0.5
sys.exit(train.main(sys.argv[1:]))
"""
"""leapfrog-train whose ranks but 0, interrupted, wait 0.5 s for rank 0 to end the job (not 10 s): the time a
Ctrl-C at the terminal, which reaches every rank, gives rank 0 to say so first."""


def test_a_rank_that_raises_ends_every_rank_with_one_line(tmp_path):
    """SIGINT sent to rank 1 alone (not through mpiexec) raises KeyboardInterrupt there; rank 0, not
    interrupted, never ends the job, so rank 1 does once it has waited for it."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_ALONE)
    job = mpirun.launch(2, sys.executable, script, *TEACHER, "--epochs", 100, "--checkpoint-dir", tmp_path)
    pids = mpirun.rank_pids(job, 2)
    wait_for(checkpoint.path_in(tmp_path), job)
    mpirun.os.kill(pids[1], signal.SIGINT)
    returncode, out, err = mpirun.finish(job, timeout=60)
    assert returncode == 130, err
    ours = [line for line in err.splitlines() if line.startswith("leapfrog-train")]
    assert ours == ["leapfrog-train: error: rank 1 of 2: interrupted (SIGINT); stopping every rank"], err
    assert "Traceback" not in err and out == ""
    checkpoint.load(tmp_path)


INTERRUPTED_STARTING = """
import importlib, sys
from leapfrog_gpu import tools
from leapfrog_gpu.parallel.launcher import launcher_rank
tools.PEERS_INTERRUPTED = 0.5
if launcher_rank() == 1:
    imported = importlib.import_module
    def interrupted(name, *args):
        if name.endswith(".train.command"):
            raise KeyboardInterrupt
        return imported(name, *args)
    importlib.import_module = interrupted
sys.exit(tools.leapfrog_train())
"""
"""leapfrog-train whose rank 1 is interrupted while it imports the command, before MPI is set up."""


def test_a_rank_interrupted_while_starting_ends_every_rank_with_one_line(tmp_path):
    """Rank 1 stopped by Ctrl-C before MPI is set up still sets it up, in which rank 0 waits for it (it left the
    job waiting there for ever), then ends every rank: exit status 130, its one line."""
    script = tmp_path / "starting.py"
    script.write_text(INTERRUPTED_STARTING)
    returncode, out, err = mpirun.finish(mpirun.launch(2, sys.executable, script, *TEACHER, "--epochs", 100),
                                         timeout=60)
    assert returncode == 130, err
    ours = [line for line in err.splitlines() if line.startswith("leapfrog-train")]
    assert ours == ["leapfrog-train: error: rank 1 of 2: interrupted while starting; stopping every rank"], err
    assert "Traceback" not in err


FAILING_RANK = """
import os, sys
from leapfrog_gpu.mlp import network
from leapfrog_gpu.tools.train import command as train
if os.environ.get("PMI_RANK") == "1":
    step, calls = network.MLP.train_step, []
    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 100:  # in epoch 2 of 63 steps
            raise RuntimeError("step 100 failed on rank 1")
        return step(self, *args, **kwargs)
    network.MLP.train_step = failing
sys.exit(train.main(sys.argv[1:]))
"""
"""leapfrog-train whose rank 1 raises a RuntimeError in its 100th step."""


def test_a_rank_whose_step_raises_ends_every_rank_at_once_with_its_line(tmp_path):
    """An exception other than Ctrl-C on rank 1 alone: rank 1 prints its traceback and one line naming
    it, and ends the job with status 1 at once, not after rank 0 has waited --comm-timeout for it (600 s,
    past the hang guard's limit, so a job that waited for it fails the test; no line of rank 0's says so)."""
    script, run = tmp_path / "failing.py", tmp_path / "run"
    script.write_text(FAILING_RANK)
    job = mpirun.launch(2, sys.executable, script, *TEACHER, "--epochs", 100, "--checkpoint-dir", run,
                        "--comm-timeout", 600)
    returncode, out, err = mpirun.finish(job, timeout=120)
    assert returncode == 1, (returncode, err)
    ours = [line for line in err.splitlines() if line.startswith("leapfrog-train")]
    assert ours == ["leapfrog-train: error: rank 1 of 2: RuntimeError: step 100 failed on rank 1; "
                    "stopping every rank"], err
    assert "Traceback" in err and out == ""  # an unexpected error keeps its traceback
    assert checkpoint.load(run)[1]["epoch"] == 1  # the checkpoint of epoch 1, whole


def test_a_rank_that_hangs_is_given_up_after_the_timeout(tmp_path):
    """A stopped rank neither answers nor exits: the others give up after --comm-timeout and end the job."""
    job = mpirun.launch(2, *TRAIN, *TEACHER, "--epochs", 100, "--checkpoint-dir", tmp_path, "--comm-timeout", 2)
    pids = mpirun.rank_pids(job, 2)
    wait_for(checkpoint.path_in(tmp_path), job)
    mpirun.os.kill(pids[1], signal.SIGSTOP)
    returncode, _, err = mpirun.finish(job, timeout=60)
    assert returncode == 4, err
    ours = [line for line in err.splitlines() if line.startswith("leapfrog-train")]
    assert len(ours) == 1 and ours[0].startswith("leapfrog-train: error: rank 0 of 2: the sum of ")  # layer or loss
    assert ours[0].endswith("has waited 2 s for the other ranks: one of them died, failed or hangs; stopping the job")
    checkpoint.load(tmp_path)


def test_bad_input_under_mpiexec_is_one_line_from_rank_0(tmp_path):
    """An option, a file, a step that every rank refuses, or rank 0's --metrics: rank 0's line alone, no MPI abort."""
    for args, message in (
        (["--lr", "-1"], "leapfrog-train: error: argument --lr: must be a finite number >= 0; got '-1'"),
        (["--data", "mnist", "--data-dir", tmp_path / "none"], "leapfrog-train: error: "),
        (["--batch-size", "719"], "leapfrog-train: error: --batch-size 719 on each of 2 ranks is larger than the 1437 "
                                  "training samples of digits; use at most 718"),
        (["--hidden", "4x64", "--schedule", "naumov-scan", "--memory-limit", "0.001"],  # refused by every rank's step
         "leapfrog-train: error: NaumovScan needs 4235264 bytes (4.0 MiB) for sizes of depth L=6"),
        (["--metrics", tmp_path], f"leapfrog-train: error: rank 0: --metrics {tmp_path}: Is a directory"),  # rank 0's
        (["--lr", "1e39"], "leapfrog-train: error: lr=1e+39 is beyond float32's largest number"),  # the network's
    ):
        returncode, out, err = mpirun.finish(mpirun.launch(2, *TRAIN, *args), timeout=60)
        assert returncode == 2 and (out == "" or "naumov-scan" in args), err  # a step refused after the header
        assert len(err.splitlines()) == 1 and err.startswith(message), err


@pytest.mark.parametrize("options", [["--graph"], ["--fused"], ["--graph", "--fused", "--optimizer", "adam"],
                                     [*SMALL["rnn"], "--graph", "--fused"], [*SMALL["resmlp"], "--graph", "--fused"]],
                         ids=" ".join)
def test_graph_and_fused_steps_under_mpiexec_train_as_one_process_does(tmp_path, options):
    """``mpiexec -n 2 leapfrog-train --graph``, ``--fused`` or both (batch 4 per rank) against one process on
    batches of 8: the same steps on the same global batches, so the same parameters but for float32 rounding,
    for the MLP (by SGD and by Adam), the RNN and the residual network."""
    common = [*TEACHER, "--epochs", "1", *options]  # the model's --hidden after the teacher's
    two, one = tmp_path / "two", tmp_path / "one"
    mpirun.run(2, *TRAIN, *common, "--batch-size", 4, "--checkpoint-dir", two, "--metrics", two / "m.jsonl",
               timeout=120)
    assert cli(*common, "--batch-size", 8, "--checkpoint-dir", one, "--metrics", one / "m.jsonl") == 0
    (got, state), (want, _) = parameters(two), parameters(one)
    config = state["config"]
    assert (config["ranks"], config["graph"], config["fused"]) == (2, "--graph" in options, "--fused" in options)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    two_metrics, one_metrics = ((d / "m.jsonl").read_text().splitlines() for d in (two, one))
    assert json.loads(two_metrics[-1])["test_loss"] == pytest.approx(json.loads(one_metrics[-1])["test_loss"],
                                                                     rel=1e-4)


def test_ranks_with_other_options_are_refused(tmp_path):
    """Every rank compares a digest of its options and data with the others' before the first step."""
    job = mpirun.launch(1, *TRAIN, *TEACHER, "--epochs", 1, ":", "-n", 1, *TRAIN, *TEACHER, "--epochs", 1,
                        "--lr", 0.02)
    returncode, _, err = mpirun.finish(job, timeout=60)
    assert returncode == 2
    assert err.splitlines() == ["leapfrog-train: error: every rank must use the same options and data, but they "
                                "differ in lr: 0.02 on rank 1, 0.01 on rank 0; start every rank with the same "
                                "command line"]


def test_a_resume_given_to_rank_0_alone_is_refused_as_another_option(tmp_path):
    """A --resume on rank 0 alone is refused as any option that differs, in one line, every rank ended (that every
    rank takes part in the broadcast of the checkpoint first, which MPICH does not require to end so:
    test_train's test_a_rank_not_given_resume_takes_part_in_the_broadcast_of_rank_0s_checkpoint)."""
    run = tmp_path / "run"
    mpirun.run(2, *TRAIN, *TEACHER, "--epochs", 1, "--checkpoint-dir", run)
    job = mpirun.launch(1, *TRAIN, *TEACHER, "--epochs", 2, "--checkpoint-dir", run, "--resume", ":", "-n", 1,
                        *TRAIN, *TEACHER, "--epochs", 2, "--checkpoint-dir", run)
    returncode, _, err = mpirun.finish(job, timeout=60)
    assert returncode == 2
    assert err.splitlines() == ["leapfrog-train: error: every rank must use the same options and data, but they "
                                "differ in resume: False on rank 1, True on rank 0; start every rank with the same "
                                "command line"]


PARALLEL_BENCH = mpirun.ROOT / "profiling" / "parallel_bench.py"


@pytest.mark.parametrize("fused", [False, True])
def test_the_parallel_bench_reports_the_sums_and_what_they_hide(tmp_path, fused):
    report = tmp_path / "dp.json"
    out = mpirun.run(2, sys.executable, PARALLEL_BENCH, "--backend", "numpy", "--sizes", 33, "--layers", 4,
                     "--batch", 3, "--k", 2, "--repeats", 3, "--warmup", 1, "--blas-threads", 1,
                     "--bucket-mb", "0,0.01", "--json", report, *["--fused"] * fused, timeout=120)
    lines = out.splitlines()
    assert lines[0] == parallel_bench.TITLE and lines[0].endswith("(> 1: faster)")
    assert lines[1].split()[:9] == ["N", "L", "B", "P", "dtype", "schedule", "k", "bucket", "MB"]
    assert lines[1].endswith("speed-up vs one process")
    assert len(lines) == 3 + 4 + 1  # title, header, rule, (sequential, leapfrog) x 2 bucket sizes, legend: rank 0 only
    assert [line.split()[5] for line in lines[3:7]] == [f"{name}{'+fused' * fused}" for name in (
        "sequential", "sequential", "leapfrog", "leapfrog")]
    records = json.loads(report.read_text())["records"]
    assert [(r["schedule"], r["bucket_mb"]) for r in records] == [
        ("sequential", 0), ("sequential", 0.01), ("leapfrog", 0), ("leapfrog", 0.01)]
    for r in records:
        assert r["P"] == 2 and r["B"] == 3 and r["bytes_summed"] == 4 * 3 * 33 * 34 and r["fused"] == fused
        assert r["exposed_ms"] == r["step_ms"]["median"] - r["local_slowest_ms"]
        assert r["speedup"] == r["one_ms"]["median"] / r["step_ms"]["median"] > 0

    runs = [json.loads(report.read_text()) for _ in range(3)]
    for run, step in zip(runs, (3.0, 1.0, 2.5)):
        run["records"][0]["step_ms"]["median"] = step
    rows = parallel_table.table(runs).splitlines()  # docs/performance.md's: the median over runs, and their range
    assert rows[0].startswith("Speed-up vs one process: ") and rows[2].endswith("| speed-up vs one process |")
    assert len(rows) == 4 + 4 and rows[4].startswith("| 33 | 4 | 3 | 2 | sequential | 0 | 0 | 1 | 2.50 [1.00–3.00] |")


STANDIN = {"PYTHONPATH": f"{mpirun.ROOT / 'tests' / 'harness' / 'standin'}:{mpirun.ROOT / 'tests' / 'harness'}",
           "LEAPFROG_STANDIN_NCCL": "processes"}
"""The CuPy stand-in in every rank, each rank its own NCCL rank (tests/harness/fake_cupy/nccl.py)."""
BENCH_CUPY = [sys.executable, PARALLEL_BENCH, "--backend", "cupy", "--sizes", 9, "--layers", 3, "--batch", 2, "--k", 2,
              "--repeats", 2, "--warmup", 1]


@pytest.mark.parametrize("command", ["parallel_bench.py", "leapfrog-train"])
def test_every_command_binds_each_rank_to_its_own_gpu_under_mpiexec(tmp_path, command):
    """``mpiexec -n 2`` on a stand-in machine with two GPUs: each rank makes its own GPU current before it
    creates its CuPy backend, so NCCL accepts the communicator (two ranks on one GPU it refuses)."""
    env = {**STANDIN, "LEAPFROG_STANDIN_DEVICES": "2"}
    if command == "parallel_bench.py":
        out = mpirun.run(2, *BENCH_CUPY, timeout=120, env=env)
        assert [line.split()[5] for line in out.splitlines()[3:5]] == ["sequential", "leapfrog"]  # below the title
    else:
        out = mpirun.run(2, *TRAIN, *TEACHER[:-3], "--backend", "cupy", "--quiet", "--epochs", 1, "--samples", 64,
                         "--checkpoint-dir", tmp_path, timeout=120, env=env)
        assert parameters(tmp_path)[1]["config"]["ranks"] == 2


def test_two_ranks_on_one_gpu_are_refused_as_nccl_refuses_them():
    """The stand-in's NCCL, one process per rank, on a machine with one GPU: "Duplicate GPU detected"."""
    job = mpirun.launch(2, *BENCH_CUPY, env={**STANDIN, "LEAPFROG_STANDIN_DEVICES": "1"})
    returncode, _, err = mpirun.finish(job, timeout=120)
    assert returncode != 0 and "NCCL_ERROR_INVALID_USAGE" in err
    assert "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 0" in err


@pytest.mark.parametrize("prog, argv", [
    ("leapfrog-bench", ["--sizes", 8, "--layers", 3, "--batch", 1, "--k", 1, "--repeats", 1, "--no-torch"]),
    ("leapfrog-bench --model rnn", ["--model", "rnn", "--sizes", 3, "--tau", 4, "--batch", 1, "--repeats", 1,
                                    "--no-torch"]),
], ids=["mlp", "rnn"])
def test_leapfrog_bench_under_mpiexec_says_where_the_data_parallel_study_went(capsys, tmp_path, prog, argv):
    """Each model's bench: one line, no table (on each rank, a run of a second)."""
    returncode, out, err = mpirun.finish(mpirun.launch(2, sys.executable, "-m", "leapfrog_gpu.tools.bench", *argv,
                                                      "--jsonl", tmp_path / "r.jsonl"), timeout=60)
    assert returncode == 2 and out == ""
    assert err.splitlines() == [f"{prog}: error: under mpiexec, what the sums across ranks cost is measured by "
                                "mpiexec -n P python profiling/parallel_bench.py (docs/data-parallel.md)"]
    assert not list(tmp_path.iterdir())
    assert bench_main("--bucket-mb", 1) == 2 and "unrecognized arguments: --bucket-mb" in capsys.readouterr().err


def bench_main(*args):
    try:
        return bench.main([str(arg) for arg in args])
    except SystemExit as exit:
        return exit.code
