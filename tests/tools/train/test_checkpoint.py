"""Checkpoints: the network's file with the run's state; a round trip is exact, a checkpoint of the format before
it still reads, and every refusal says what to do with the checkpoint. (The file itself, its atomic write and
its refusals: tests/core/test_saving.py.)"""

import json
import os
import time

import numpy as np
import pytest

from helpers import assert_bitwise_equal
from leapfrog_gpu import RNN, Adam
from leapfrog_gpu.core import saving
from leapfrog_gpu.tools.train import checkpoint

REMEDY = ": delete it, or choose another --checkpoint-dir"
TRAINING = {"sizes": [5, 7, 3], "rng": {"state": 2**100 + 7}, "note": "ü"}


def rnn(seed, sizes=(5, 7, 3)):
    return RNN(list(sizes), seed=seed, dtype="float64", backend="numpy")


def test_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 5, 3)), rng.random((3, 3))  # (tau, n_1, B), and the targets at the last step
    with rnn(0) as net:
        net.train_step(x, y, Adam())
        params = [np.array(a) for named in net.parameters().values() for a in named.values()]
        architecture = json.loads(json.dumps(net.architecture()))
        assert checkpoint.save(tmp_path, net, TRAINING) == tmp_path / "checkpoint.npz"
    got, state = checkpoint.load(tmp_path)
    adam = {"kind": "Adam", "hyper": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.0}, "step": 1}
    assert state == {**TRAINING, "optimizer_step": 1,  # big integers (PCG64 state) and text survive JSON
                     "file": {"network": "RNN", "architecture": architecture, "optimizer": adam}}
    names = ["w2", "u2", "b2", "w3", "b3"]
    assert list(got) == names + [f"{slot}.{name}" for slot in ("exp_avg", "exp_avg_sq") for name in names]
    assert_bitwise_equal([got[name] for name in names], params)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]
    with rnn(1) as net:
        checkpoint.restore(net, got, tmp_path)
        checkpoint.restore_optimizer(net, Adam(), checkpoint.optimizer_arrays(got), 1, tmp_path)
        assert_bitwise_equal([np.array(a) for named in net.parameters().values() for a in named.values()], params)
        assert net.optimizer_state()["step"] == 1
    with rnn(1, (5, 7, 7, 3)) as deeper, pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.restore(deeper, got, tmp_path)
    assert str(error.value) == (f"{tmp_path}/checkpoint.npz does not fit this network (no array 'u3' (the parameter "
                                f"u of unit 3)){REMEDY}")
    with rnn(1, (5, 6, 3)) as narrower, pytest.raises(checkpoint.CheckpointError, match=r"does not fit this network "
                                                      r"\(weights\[0\] \(w\^2\) must have shape \(6, 5\)"):
        checkpoint.restore(narrower, got, tmp_path)


def test_a_checkpoint_of_the_format_before_reads_as_it_did(tmp_path):
    """Its state the run's alone, at the top, with ``optimizer_step``."""
    state = {**TRAINING, "optimizer_step": 3}
    np.savez(tmp_path / "checkpoint.npz", w2=np.ones((7, 5)), state=np.array(json.dumps(state)))
    arrays, got = checkpoint.load(tmp_path)
    assert got == state and list(arrays) == ["w2"]


def test_load_errors(tmp_path):
    """Each says what is wrong in one line and what to do; none repeats NumPy's hint to load a pickle."""
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint to resume from: .* does not exist"):
        checkpoint.load(tmp_path)
    for garbage in (b"garbage", b"PK\x03\x04 not really a zip"):
        (tmp_path / "checkpoint.npz").write_bytes(garbage)
        with pytest.raises(checkpoint.CheckpointError, match=r"is not an .npz archive \(damaged") as error:
            checkpoint.load(tmp_path)
        assert str(error.value).endswith(REMEDY) and "\n" not in str(error.value)
        assert "pickle" not in str(error.value) and "unsafely" not in str(error.value)
    np.savez(tmp_path / "checkpoint.npz", w2=np.zeros((2, 2)))
    with pytest.raises(checkpoint.CheckpointError, match=r"holds no network saved by leapfrog_gpu") as error:
        checkpoint.load(tmp_path)
    assert str(error.value).endswith(REMEDY)
    np.savez(tmp_path / "checkpoint.npz", state=np.array(json.dumps({"epoch": 1})))
    with pytest.raises(checkpoint.CheckpointError, match=r"not a checkpoint of leapfrog-train \(it lacks 'sizes'\)"):
        checkpoint.load(tmp_path)
    for key in ("training", "optimizer"):
        np.savez(tmp_path / "checkpoint.npz", state=np.array(json.dumps({"format": 1, key: [TRAINING]})))
        with pytest.raises(checkpoint.CheckpointError) as error:
            checkpoint.load(tmp_path)
        assert str(error.value) == (f"the checkpoint {tmp_path}/checkpoint.npz is damaged: its {key} is not a JSON "
                                    f"object{REMEDY}")
    np.savez(tmp_path / "checkpoint.npz", state=np.array([{"sizes": [2, 2]}], dtype=object), allow_pickle=True)
    with pytest.raises(checkpoint.CheckpointError, match=r"is damaged \(ValueError: ") as error:
        checkpoint.load(tmp_path)
    assert str(error.value).endswith(REMEDY) and "\n" not in str(error.value)


def test_save_removes_a_killed_writers_temporary_file(tmp_path):
    (tmp_path / ".checkpoint.npz-abc123.tmp").write_bytes(b"PK half a file")
    os.utime(tmp_path / ".checkpoint.npz-abc123.tmp", (time.time() - saving.STALE - 1,) * 2)  # a killed writer's
    with rnn(0) as net:
        checkpoint.save(tmp_path, net, TRAINING)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]
