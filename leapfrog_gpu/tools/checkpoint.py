"""Checkpoints that a crash cannot half-write: a temporary file beside the target, fsync, rename
(``cli.replaced_atomically``).

A checkpoint is one ``.npz`` file, ``checkpoint.npz`` in its directory: arrays ``w2..wL`` and
``b2..bL`` (Nielsen's shapes) and ``state``, a JSON object that holds at least ``sizes`` (the widths
n_1..n_L) and whatever else the trainer keeps (position, RNG state, config). ``os.replace`` is
atomic on POSIX, so a reader finds either the previous checkpoint or the new one, whole, however the
writer dies.
"""

import contextlib
import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np

from .cli import replaced_atomically

FILENAME = "checkpoint.npz"
_TEMPORARY = (".checkpoint-", ".tmp")  # prefix and suffix of the file being written

_PAUSE_FOR_TEST = "LEAPFROG_TEST_CHECKPOINT_PAUSE"
"""Test hook: when set to a path, ``save`` creates that file once the temporary file is partly
written, then sleeps until killed, so a test can kill the writer at that exact point."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or does not fit the network."""


def path_in(directory):
    return Path(directory) / FILENAME


def save(directory, weights, biases, state):
    """Write ``weights`` and ``biases`` (lists for l = 2..L, host arrays) and ``state`` (a JSON-able
    dict) to ``directory/checkpoint.npz`` atomically (``cli.replaced_atomically``); return the path.
    Temporary files that a killed writer left behind are removed once this one is in place."""
    directory = Path(directory)
    arrays = {f"w{l}": w for l, w in enumerate(weights, start=2)}
    arrays.update({f"b{l}": b for l, b in enumerate(biases, start=2)})
    arrays["state"] = np.array(json.dumps(state))
    with replaced_atomically(path_in(directory), prefix=_TEMPORARY[0]) as temporary, open(temporary, "wb") as file:
        _write_npz(file, arrays)
    for stale in directory.glob("*".join(_TEMPORARY)):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    return path_in(directory)


def load(directory):
    """Return ``(weights, biases, state)`` from ``directory/checkpoint.npz``."""
    path = path_in(directory)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint to resume from: {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            state = json.loads(archive["state"].item())
            layers = range(2, len(state["sizes"]) + 1)
            weights = [archive[f"w{l}"] for l in layers]
            biases = [archive[f"b{l}"] for l in layers]
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(error).__name__}: {error})") from None
    return weights, biases, state


def _write_npz(file, arrays):
    """What ``np.savez`` writes, one member per array, with the test hook after the first."""
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for i, (name, array) in enumerate(arrays.items()):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
            if i == 0 and os.environ.get(_PAUSE_FOR_TEST):
                file.flush()
                Path(os.environ[_PAUSE_FOR_TEST]).touch()
                while True:
                    time.sleep(1)
