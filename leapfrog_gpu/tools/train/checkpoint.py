"""Checkpoints that a crash cannot half-write: ``np.savez`` into a temporary file beside the target,
``fsync`` of the file, an atomic rename, ``fsync`` of the folder (``cli.replaced_atomically``).

A checkpoint is one ``.npz`` file, ``checkpoint.npz`` in its directory: arrays ``w2..wL`` and
``b2..bL`` (Nielsen's shapes) and ``state``, a JSON object that holds at least ``sizes`` (the widths
n_1..n_L) and whatever else the trainer keeps (position, RNG state, config). ``os.replace`` is
atomic on POSIX, so a reader finds either the previous checkpoint or the new one, whole, however the
writer dies.
"""

import contextlib
import json
import zipfile
from pathlib import Path

import numpy as np

from ..cli import replaced_atomically

FILENAME = "checkpoint.npz"
_TEMPORARY = (".checkpoint-", ".tmp")  # prefix and suffix of the file being written

REMEDY = "delete it, or choose another --checkpoint-dir"
"""What to do about a checkpoint that cannot be read."""


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
        np.savez(file, **arrays)  # a file object: a name would get ".npz" appended
    for stale in directory.glob("*".join(_TEMPORARY)):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    return path_in(directory)


def load(directory):
    """Return ``(weights, biases, state)`` from ``directory/checkpoint.npz``; a ``CheckpointError`` of one
    line that says what is wrong with it and what to do."""
    path = path_in(directory)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint to resume from: {path} does not exist")
    if not zipfile.is_zipfile(path):  # np.load would take it for a pickle, and say how to load one unsafely
        raise CheckpointError(f"{path} is not a checkpoint (not an .npz archive; damaged?): {REMEDY}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            state = json.loads(archive["state"].item())
            layers = range(2, len(state["sizes"]) + 1)
            weights = [archive[f"w{l}"] for l in layers]
            biases = [archive[f"b{l}"] for l in layers]
    except KeyError as error:
        raise CheckpointError(f"{path} is not a checkpoint of leapfrog-train (it lacks {error}): {REMEDY}") from None
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path} is damaged ({type(error).__name__}: {_first_line(error)}): {REMEDY}") from None
    return weights, biases, state


def _first_line(error):
    return str(error).strip().split("\n")[0].rstrip(".")
