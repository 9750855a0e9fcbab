"""Checkpoints that a crash cannot half-write: ``np.savez`` into a temporary file beside the target,
``fsync`` of the file, an atomic rename, ``fsync`` of the folder (``cli.replaced_atomically``).

A checkpoint is one ``.npz`` file, ``checkpoint.npz`` in its directory: one array per parameter of the
network, named by the parameter and its layer or node (``w2``, ``u2``, ``b3``: w^2, u^2, b^3 in the
book's shapes), and ``state``, a JSON object that holds at least ``sizes`` (the widths n_1..n_L) and
whatever else the trainer keeps (position, RNG state, config). An MLP's checkpoint is thus ``w2..wL``
and ``b2..bL``, as it has always been. An optimizer with a state adds one array per slot and parameter, named
``slot.`` and the parameter's name (``exp_avg.w2``, ``momentum_buffer.b3``), and its step count to the state
(``optimizer_step``). ``os.replace`` is atomic on POSIX, so a reader finds either the
previous checkpoint or the new one, whole, however the writer dies.
"""

import contextlib
import json
import zipfile
from pathlib import Path

import numpy as np

from ..cli import replaced_atomically

FILENAME = "checkpoint.npz"
_TEMPORARY = (".checkpoint-", ".tmp")  # prefix and suffix of the file being written

LATER = {"model": "mlp", "skip": 2, "tau": 16, "forward_solver": "sequential", "cell": "elman", "optimizer": "sgd",
         "momentum": None, "nesterov": False, "weight_decay": None, "betas": None, "eps": None, "clip_grad_norm": None}
"""Options that came after the first checkpoints, with what a checkpoint without them ran: an MLP of Elman cells
(where recurrent), by plain SGD. A resumed run keeps ``model``, ``skip``, ``tau``, ``cell`` and the optimizer's
options as ``FIXED``, and takes ``forward_solver`` and ``clip_grad_norm`` as ``RESUMED`` (``options``)."""

REMEDY = "delete it, or choose another --checkpoint-dir"
"""What to do about a checkpoint that cannot be read."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or does not fit the network."""


def path_in(directory):
    return Path(directory) / FILENAME


def save(directory, params, state, slots=None):
    """Write ``params`` (``{unit: {name: host array}}``, as a network's ``parameters()``), ``slots`` (the
    optimizer's state, ``{slot: {unit: {name: host array}}}``, if any) and ``state`` (a JSON-able dict) to
    ``directory/checkpoint.npz`` atomically (``cli.replaced_atomically``); return the path. Temporary files
    that a killed writer left behind are removed once this one is in place."""
    directory = Path(directory)
    arrays = {f"{name}{unit}": array for unit, named in params.items() for name, array in named.items()}
    arrays.update({f"{slot}.{name}{unit}": array for slot, held in (slots or {}).items()
                   for unit, named in held.items() for name, array in named.items()})
    arrays["state"] = np.array(json.dumps(state))
    with replaced_atomically(path_in(directory), prefix=_TEMPORARY[0]) as temporary, open(temporary, "wb") as file:
        np.savez(file, **arrays)  # a file object: a name would get ".npz" appended
    for stale in directory.glob("*".join(_TEMPORARY)):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    return path_in(directory)


def load(directory):
    """Return ``(arrays, state)`` from ``directory/checkpoint.npz``: every parameter by its name in the
    file, in the file's order, and the state; a ``CheckpointError`` of one line that says what is wrong
    with it and what to do."""
    path = path_in(directory)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint to resume from: {path} does not exist")
    if not zipfile.is_zipfile(path):  # np.load would take it for a pickle, and say how to load one unsafely
        raise CheckpointError(f"{path} is not a checkpoint (not an .npz archive; damaged?): {REMEDY}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            state = json.loads(archive["state"].item())
            if "sizes" not in state:  # every checkpoint holds the widths
                raise KeyError("sizes")
            arrays = {name: archive[name] for name in archive.files if name != "state"}
    except KeyError as error:
        raise CheckpointError(f"{path} is not a checkpoint of leapfrog-train (it lacks {error}): {REMEDY}") from None
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path} is damaged ({type(error).__name__}: {_first_line(error)}): {REMEDY}") from None
    return arrays, state


def restore(net, arrays, directory):
    """Give ``net`` the parameters of ``arrays`` (``load``'s, of the checkpoint in ``directory``), by the units
    and names of its ``parameters()``; a ``CheckpointError`` naming one the file lacks, or saying why the
    network refuses them."""
    try:
        params = {unit: {name: arrays[f"{name}{unit}"] for name in named} for unit, named in net.parameters().items()}
    except KeyError as error:
        raise CheckpointError(f"{path_in(directory)} lacks the parameter {error} of this network: {REMEDY}") from None
    try:
        net.set_parameters(params)
    except ValueError as error:
        raise CheckpointError(f"{path_in(directory)} does not fit this network ({error}): {REMEDY}") from None


def optimizer_arrays(arrays):
    """The arrays of the optimizer's state among ``load``'s, by their names in the file."""
    return {name: array for name, array in arrays.items() if "." in name}


def restore_optimizer(net, optimizer, arrays, steps, directory):
    """Give ``net`` the state of ``optimizer`` held in ``arrays`` (``optimizer_arrays``) and its step count
    ``steps``; a ``CheckpointError`` naming what the file lacks or why the network refuses it."""
    if not steps and not arrays:
        return  # plain SGD, or a checkpoint from before the optimizers: no state
    try:
        slots = {slot: {unit: {name: arrays[f"{slot}.{name}{unit}"] for name in named}
                        for unit, named in net.parameters().items()} for slot in optimizer.SLOTS}
    except KeyError as error:
        raise CheckpointError(f"{path_in(directory)} lacks the optimizer state {error} of {optimizer!r}: "
                              f"{REMEDY}") from None
    try:
        net.set_optimizer_state(optimizer, {"step": steps, **slots})
    except ValueError as error:
        raise CheckpointError(f"{path_in(directory)} does not fit {optimizer!r} ({error}): {REMEDY}") from None


def _first_line(error):
    return str(error).strip().split("\n")[0].rstrip(".")
