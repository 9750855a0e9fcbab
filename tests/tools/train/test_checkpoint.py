"""Checkpoints: a round trip is exact, and a failed write leaves the previous checkpoint and no debris."""

import os
import stat

import numpy as np
import pytest

from leapfrog_gpu.tools.train import checkpoint


def arrays(seed, sizes=(5, 7, 3)):
    """The parameters of an RNN ``sizes`` as ``parameters()`` gives them (u^l in the recurrent layers), and a state."""
    rng = np.random.default_rng(seed)
    params = {l: {"w": rng.standard_normal((n, m)).astype(np.float32)}
              for l, (m, n) in enumerate(zip(sizes, sizes[1:]), start=2)}
    for l, named in params.items():
        if l < len(sizes):
            named["u"] = rng.standard_normal((sizes[l - 1],) * 2).astype(np.float32)
        named["b"] = rng.standard_normal(sizes[l - 1]).astype(np.float32)
    return params, {"sizes": list(sizes), "rng": {"state": 2**100 + 7}, "note": "ü"}


def test_round_trip_is_exact(tmp_path):
    params, state = arrays(0)
    assert checkpoint.save(tmp_path, params, state) == tmp_path / "checkpoint.npz"
    got, got_state = checkpoint.load(tmp_path)
    assert got_state == state  # big integers (PCG64 state) and text survive JSON
    assert list(got) == ["w2", "u2", "b2", "w3", "b3"]  # each parameter named by its layer, in order
    for name, expected in [(f"{name}{l}", array) for l, named in params.items() for name, array in named.items()]:
        assert got[name].dtype == expected.dtype and got[name].tobytes() == expected.tobytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]
    like = {l: dict.fromkeys(named) for l, named in params.items()}
    net = Receiver(like)
    checkpoint.restore(net, got, tmp_path)
    assert net.given[2]["u"].tobytes() == params[2]["u"].tobytes()
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint.npz lacks the parameter 'u3' of this network"):
        checkpoint.restore(Receiver({**like, 3: {"w": None, "u": None}}), got, tmp_path)
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint.npz does not fit this network \(bad shape\)"):
        checkpoint.restore(Receiver(like, refusal="bad shape"), got, tmp_path)


class Receiver:
    """What ``restore`` asks of a network: its ``parameters()``, and ``set_parameters``, here kept (or refused
    with a ValueError that says ``refusal``)."""

    def __init__(self, like, refusal=None):
        self.like, self.refusal, self.given = like, refusal, None

    def parameters(self):
        return self.like

    def set_parameters(self, params):
        if self.refusal:
            raise ValueError(self.refusal)
        self.given = params


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
    """Each says what is wrong in one line and what to do; none repeats NumPy's hint to load a pickle."""
    remedy = ": delete it, or choose another --checkpoint-dir"
    with pytest.raises(checkpoint.CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path)
    for garbage in (b"garbage", b"PK\x03\x04 not really a zip"):
        (tmp_path / "checkpoint.npz").write_bytes(garbage)
        with pytest.raises(checkpoint.CheckpointError, match=r"is not a checkpoint \(not an .npz archive") as error:
            checkpoint.load(tmp_path)
        assert str(error.value).endswith(remedy) and "\n" not in str(error.value)
        assert "pickle" not in str(error.value) and "unsafely" not in str(error.value)
    np.savez(tmp_path / "checkpoint.npz", w2=np.zeros((2, 2)))
    lacks = r"not a checkpoint of leapfrog-train \(it lacks 'state"
    with pytest.raises(checkpoint.CheckpointError, match=lacks) as error:
        checkpoint.load(tmp_path)
    assert str(error.value).endswith(remedy)
    np.savez(tmp_path / "checkpoint.npz", state=np.array([{"sizes": [2, 2]}], dtype=object), allow_pickle=True)
    with pytest.raises(checkpoint.CheckpointError, match=r"is damaged \(ValueError: ") as error:
        checkpoint.load(tmp_path)
    assert str(error.value).endswith(remedy) and "\n" not in str(error.value)


def test_the_file_is_synced_before_the_rename_and_its_folder_after(tmp_path, monkeypatch):
    """What survives a loss of power: the new file's bytes are on disk before the rename makes it the
    checkpoint, and the rename itself (the folder) after it."""
    calls, fsync, replace = [], os.fsync, os.replace

    def recorded_fsync(fd):
        calls.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recorded_replace(source, target):
        calls.append(("replace", os.path.realpath(source), os.path.realpath(target)))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    path = os.path.realpath(checkpoint.save(tmp_path, *arrays(0)))
    replaced = [i for i, call in enumerate(calls) if call[0] == "replace"]
    assert len(replaced) == 1, calls
    (_, temporary, target), i = calls[replaced[0]], replaced[0]
    assert target == path and os.path.dirname(temporary) == os.path.dirname(path)
    assert ("fsync", temporary) in calls[:i], f"the file is not synced before the rename: {calls}"
    assert ("fsync", os.path.dirname(path)) in calls[i + 1:], f"the folder is not synced after the rename: {calls}"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_checkpoint_gets_the_mode_of_any_new_file(tmp_path, umask):
    """Not the 0600 of a temporary file: what open() gives under the umask, as for the other outputs."""
    previous = os.umask(umask)
    try:
        path = checkpoint.save(tmp_path, *arrays(0))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
