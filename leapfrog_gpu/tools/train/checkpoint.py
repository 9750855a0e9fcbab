"""Checkpoints: ``checkpoint.npz`` in its directory, the file ``Network.save`` writes (``core.saving``: the
parameters, the optimizer's state, the architecture and the optimizer) with the run's own state under ``training``:
``sizes`` (the widths n_1..n_L), its position, RNG state and config. An older checkpoint holds the run's state
alone, with the optimizer's step count as ``optimizer_step``; it resumes as well. What ``--resume`` reads of a
checkpoint is checked before the run starts (``resuming``): a wrong value is refused as ``damaged``.
"""

import contextlib
from pathlib import Path

from ...core import saving

LATER = {"model": "mlp", "skip": 2, "tau": 16, "forward_solver": "sequential", "cell": "elman", "optimizer": "sgd",
         "momentum": None, "nesterov": False, "weight_decay": None, "betas": None, "eps": None, "clip_grad_norm": None,
         "graph": False, "check_finite": False, "allow_divergence": False}
"""Options that came after the first checkpoints (or were not kept by them), with what a checkpoint without them ran:
an MLP (of Elman cells where recurrent) by plain SGD, eager steps, unchecked, stopped where it diverged."""

REMEDY = "delete it, or choose another --checkpoint-dir"
"""What to do about a checkpoint that cannot be read."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, or does not fit the network."""


def path_in(directory):
    return Path(directory) / "checkpoint.npz"


def save(directory, net, training):
    """Write ``net`` with the run's state ``training`` (JSON-able) to ``path_in(directory)``; return the path."""
    return saving.save(net, path_in(directory), training=training)


def read(directory):
    """``(arrays, state)`` of ``directory/checkpoint.npz``: every array by its name in the file, in its order, and
    the file's whole state; a ``CheckpointError`` of one line that says what is wrong with it and what to do."""
    path = path_in(directory)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint: remove it, or choose another --checkpoint-dir")
    if not path.is_file():
        raise CheckpointError(f"no checkpoint to resume from: {path} does not exist")
    with _refused(path):
        state, arrays = saving.read(path)
    return arrays, state


def load(directory):
    """``(arrays, state)`` as ``read``, ``state`` the run's own, with the optimizer's step count as
    ``optimizer_step`` and, under ``file``, what the file holds beside it (``network``, ``architecture`` and
    ``optimizer``: ``core.saving``'s; none in a checkpoint that holds the run's state alone)."""
    arrays, state = read(directory)
    if "format" in state:
        training, held = state.get("training"), state.get("optimizer")
        for key, value in (("training", training), ("optimizer", held)):
            if not isinstance(value, (dict, type(None))):
                raise damaged(directory, f"its {key} is not a JSON object")
        state = {**(training or {}), "optimizer_step": (held or {}).get("step", 0),
                 "file": {key: state.get(key) for key in ("network", "architecture", "optimizer")}}
    if "sizes" not in state:  # every checkpoint holds the widths
        raise CheckpointError(f"{path_in(directory)} is not a checkpoint of leapfrog-train (it lacks 'sizes'): "
                              f"{REMEDY}")
    return arrays, state


def damaged(directory, why):
    """The ``CheckpointError`` of the checkpoint in ``directory`` that holds what ``why`` says."""
    return CheckpointError(f"the checkpoint {path_in(directory)} is damaged: {why}: {REMEDY}")


def built(directory, arrays, state, backend):
    """The network that ``read(directory)``'s ``arrays`` and ``state`` describe, on ``backend``."""
    with _refused(path_in(directory)):
        return saving.build(state, arrays, backend, path_in(directory))


def restore(net, arrays, directory, optimizer=None):
    """Give ``net`` the parameters of ``load(directory)``'s ``arrays``, or raise a ``CheckpointError`` that says why;
    given the ``optimizer`` whose state the run resumes, also where arrays fit neither a parameter nor its state."""
    with _refused(path_in(directory)):
        if optimizer is not None:
            saving.check_fitted(net, arrays, optimizer)
        saving.restore(net, arrays)


def optimizer_arrays(arrays):
    """The arrays of the optimizer's state among ``load``'s, by their names in the file."""
    return {name: array for name, array in arrays.items() if "." in name}


def restore_optimizer(net, optimizer, arrays, steps, directory):
    """Give ``net`` the state of ``optimizer`` in ``arrays`` (``optimizer_arrays``) after ``steps`` steps, or raise a
    ``CheckpointError`` that says why not."""
    if steps or arrays:  # else plain SGD, or a checkpoint from before the optimizers: no state
        with _refused(path_in(directory)):
            saving.restore_optimizer(net, optimizer, arrays, steps)


@contextlib.contextmanager
def _refused(path):
    """A ValueError of ``core.saving`` as a ``CheckpointError`` that says what to do with the checkpoint ``path``."""
    try:
        yield
    except saving.UnreadableFileError as error:
        raise CheckpointError(f"{error.problem}: {REMEDY}") from None
    except ValueError as error:
        raise CheckpointError(f"{path} does not fit this network ({error}): {REMEDY}") from None
