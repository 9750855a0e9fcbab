"""Checkpoints: a round trip is exact, and a failed write leaves the previous checkpoint and no debris."""

import os
import stat

import numpy as np
import pytest

from leapfrog_gpu.tools import checkpoint


def arrays(seed, sizes=(5, 7, 3)):
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((n, m)).astype(np.float32) for m, n in zip(sizes, sizes[1:])]
    biases = [rng.standard_normal(n).astype(np.float32) for n in sizes[1:]]
    return weights, biases, {"sizes": list(sizes), "rng": {"state": 2**100 + 7}, "note": "ü"}


def test_round_trip_is_exact(tmp_path):
    weights, biases, state = arrays(0)
    assert checkpoint.save(tmp_path, weights, biases, state) == tmp_path / "checkpoint.npz"
    got_w, got_b, got_state = checkpoint.load(tmp_path)
    assert got_state == state  # big integers (PCG64 state) and text survive JSON
    for got, expected in zip(got_w + got_b, weights + biases):
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpoint.save(tmp_path, *arrays(0))
    before = (tmp_path / "checkpoint.npz").read_bytes()
    write_array, calls = np.lib.format.write_array, []

    def fail_on_the_third_array(*args, **kwargs):
        calls.append(None)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        write_array(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", fail_on_the_third_array)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(tmp_path, *arrays(1))
    assert (tmp_path / "checkpoint.npz").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]


def test_save_removes_a_killed_writers_temporary_file(tmp_path):
    (tmp_path / ".checkpoint-abc123.tmp").write_bytes(b"PK half a file")
    checkpoint.save(tmp_path, *arrays(0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]


def test_load_errors(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path)
    (tmp_path / "checkpoint.npz").write_bytes(b"garbage")
    with pytest.raises(checkpoint.CheckpointError, match="not a readable checkpoint"):
        checkpoint.load(tmp_path)
    np.savez(tmp_path / "checkpoint.npz", w2=np.zeros((2, 2)))
    with pytest.raises(checkpoint.CheckpointError, match="KeyError"):
        checkpoint.load(tmp_path)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_checkpoint_gets_the_mode_of_any_new_file(tmp_path, umask):
    """Not the 0600 of a temporary file: what open() gives under the umask, as for the other outputs."""
    previous = os.umask(umask)
    try:
        path = checkpoint.save(tmp_path, *arrays(0))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
