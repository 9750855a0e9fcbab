"""A network in one file and back: ``Network.save(path)`` writes it, ``load(path)`` builds it again.

The file is one ``.npz`` archive (``numpy.savez``, uncompressed): one array per parameter, named by the parameter
and its unit (``w2``, ``u2``, ``b3``: w^2, u^2, b^3 in the book's shapes; ``wh``: the w of a DagNet's node "h"),
one per slot of the optimizer's state and parameter, named by the slot, a dot and the parameter's name
(``exp_avg.w2``, ``momentum_buffer.b3``), and ``state``, one JSON object::

    {"format": 1, "network": "MLP", "architecture": {...},
     "optimizer": {"kind": "Adam", "hyper": {"lr": ..., "betas": [...], ...}, "step": t} or null, ...}

``architecture`` is what builds the network again: its class's ``architecture()``, which its
``from_architecture`` reads (the widths, activations, cost, dtype and ``check_finite``; an RNN's output and cell
too; a DagNet's input width and nodes). The seed is not kept (the parameters replace what it drew), nor the backend
(``load`` takes one), nor a data-parallel communicator (a loaded network runs alone). ``optimizer`` is the one whose
state the network holds (``held_optimizer()``, its lr that of the last step), null without one. A caller may keep
more in the state under keys of its own (``leapfrog-train``: ``training``, its position, RNG and options).

The write is atomic (``files.replaced_atomically``): a reader finds the previous file or the new one, whole,
however the writer dies. ``load`` refuses, with an ``UnreadableFileError`` (a ValueError) of one line that says what is
wrong and what to do, a missing file, a folder, one that is no ``.npz`` archive, an archive without our ``state``
(someone else's), a damaged one, one of a newer format, of an unknown network, or whose architecture does not fit its
arrays.
"""

import contextlib
import glob
import io
import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np

from ..backends import to_host
from . import optimizers
from .checks import all_finite, check_backend, shown
from .files import DAMAGED, named, regular, replaced_atomically

FORMAT = 1
"""The version of the layout above: the one this library writes, and the newest it reads."""

SUFFIX = ".npz"

KINDS = {}
"""The networks a file may hold, by class name: each registers itself (``register``) as its package is imported."""
NETWORKS = ("DagNet", "MLP", "RNN")
"""The names of the networks that ``leapfrog_gpu.load`` builds: it imports their packages, which fill ``KINDS``."""

OPTIMIZERS = {kind.__name__: kind for kind in (optimizers.SGD, optimizers.Adam, optimizers.AdamW)}

REMEDY = "save the network again, or load another file"


class UnreadableFileError(ValueError):
    """A file that ``load`` cannot read or build a network from; ``problem`` says what is wrong with it, and the
    message adds what to do."""

    def __init__(self, problem, remedy=REMEDY):
        super().__init__(f"{problem}: {remedy}")
        self.problem = problem


class MissingLayer(LookupError):
    """``(what, remedy)``: an architecture's node of a ``Layer`` class of one's own that ``load`` was not given."""


def register(cls):
    """Let ``load`` build ``cls``, a network class with ``architecture()`` and ``from_architecture``; a decorator."""
    KINDS[cls.__name__] = cls
    return cls


def path_of(path):
    """``path`` as a ``Path``, with ``.npz`` appended to a name without it, as ``numpy.savez`` does (``.`` and ``/``,
    which name no file, and a pipe or a device such as ``/dev/stdout``, as they are); a TypeError for what is no path,
    a ValueError for an empty one."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"the path must be a file's name, a str or a pathlib.Path; got {shown(path)}")
    if os.fspath(path) == "":
        raise ValueError("the path is empty: give a file's name, such as 'model.npz'")
    path = Path(path)
    if path.name.endswith(SUFFIX) or not path.name or (path.exists() and not path.is_dir() and not regular(path)):
        return path
    return path.with_name(path.name + SUFFIX)


def array_name(unit, name, slot=None):
    """The name in a file of the parameter ``name`` of ``unit`` (``w2``, ``bh``), or of its ``slot``
    (``exp_avg.w2``)."""
    return f"{'' if slot is None else slot + '.'}{name}{unit}"


# -- writing ---------------------------------------------------------------------------------------------------


STALE = 600
"""Seconds after its last write from which a temporary file beside a saved network is a killed writer's: a writer
(another rank saving the same network, say) writes its file, syncs it and renames it in less."""


def save(net, path, **more):
    """Write ``net`` to ``path`` (``path_of``: ``model`` and ``model.npz`` both write ``model.npz``) atomically: its
    architecture, parameters and optimizer state, and ``more`` (JSON-able values under keys of the caller's own) in
    its state; return the path written. Whatever is refused (a network that cannot be written or that holds NaN or
    Inf, which ``load`` would refuse; a missing folder) is refused before anything is written, and leaves a file
    already there as it was; so does a write that fails. A folder (an existing one, or a name ending in a separator)
    is refused; a write the system refuses raises its OSError, naming ``path`` (not the temporary file): a file
    ``open`` could not write, or a folder in which no file can be made (the new file is written beside ``path``).
    Temporary files that a killed writer left beside it (untouched for ``STALE`` seconds: another process may be
    writing one now) are removed once the new file is in place."""
    kind = type(net).__name__
    if KINDS.get(kind) is not type(net):
        raise TypeError(f"a {kind} cannot be saved: load builds {', '.join(NETWORKS)} again, and no subclass of "
                        "them")
    given, path = path, path_of(path)
    if Path(given).is_dir() or os.fspath(given).endswith(("/", os.sep)):
        raise ValueError(f"cannot save to {given}: it names a folder; give a file's name, such as "
                         f"{Path(given) / 'model.npz'}")
    if not path.parent.is_dir() or path.is_dir():
        raise ValueError(f"cannot save to {path}: there is no folder {path.parent}" if not path.parent.is_dir()
                         else f"cannot save to {path}: it is a folder; give a file's name")
    held, optimizer = net.optimizer_state(), net.held_optimizer()
    if optimizer is not None and OPTIMIZERS.get(type(optimizer).__name__) is not type(optimizer):
        raise TypeError(f"this {kind} holds the state of a {type(optimizer).__name__}, which cannot be saved: load "
                        f"makes {', '.join(OPTIMIZERS)} again, and no subclass of them")
    steps = held.pop("step")
    state = {**more, "format": FORMAT, "network": kind, "architecture": net.architecture(),
             "optimizer": None if optimizer is None else
             {"kind": type(optimizer).__name__, "hyper": optimizer.hyper(), "step": steps}}
    found = [(unit, name, slot, array) for slot, params in [(None, net.parameters()), *held.items()]
             for unit, named in params.items() for name, array in named.items()]
    infinite = [f"{slot + ' of ' if slot else ''}{net._label(unit, name)}" for unit, name, slot, array in found
                if not all_finite(net.backend.xp, array)]
    if infinite:
        raise ValueError(f"cannot save this {kind}: its {infinite[0]} holds NaN or Inf, and load takes finite "
                         "parameters and state only: keep an earlier file, or train again from one")
    arrays = [(array_name(unit, name, slot), array) for unit, name, slot, array in found]
    names = [name for name, _ in arrays] + ["state"]
    twice = [name for name in names if names.count(name) > 1 or f"{name}.npy" in names]
    if twice:
        raise ValueError(f"two arrays of this {kind} would both be read from a file as {twice[0]!r} (a parameter's "
                         "name, then its unit's, and the file's 'state'; NumPy reads a name ending in .npy without it "
                         "too): rename one of their units")
    text = json.dumps(state)  # a value that is not JSON-able raises here, before anything is written
    try:
        with replaced_atomically(path, prefix=f".{path.name}-") as temporary, open(temporary, "wb") as file:
            np.savez(file if regular(file) else _InOrder(file), **{name: to_host(array) for name, array in arrays},
                     state=np.array(text))  # np.savez appends no suffix to a file it is given
    except OSError as error:
        if error.errno is None:
            raise
        raise type(error)(error.errno, error.strerror, os.fspath(path)) from None
    for left in Path(os.path.realpath(path)).parent.glob(glob.escape(f".{path.name}-") + "*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if time.time() - left.stat().st_mtime > STALE:
                left.unlink()
    return path


class _InOrder(io.RawIOBase):
    """A pipe or a device as ``zipfile`` must write it: in order, never seeking back. It cannot tell its position, so
    ``zipfile`` counts the bytes itself; given the device's, it would seek back to fill in each entry's sizes, and a
    ``tell`` that says 0 wherever it is (``/dev/null``'s) made offsets below 0 that it could not write."""

    def __init__(self, file):
        super().__init__()
        self.file = file

    def writable(self):
        return True

    def write(self, data):
        return self.file.write(data)

    def flush(self):
        if not self.file.closed:  # this wrapper's own close, when it is collected, flushes too
            self.file.flush()


# -- reading ---------------------------------------------------------------------------------------------------


def load(path, backend="auto", layers=()):
    """The network saved at ``path`` (by ``Network.save``, or a checkpoint of ``leapfrog-train``) built again on
    ``backend`` (``"auto"``, ``"numpy"``, ``"cupy"`` or a backend object), with its parameters and optimizer state
    bit for bit; close it when done (``with``). ``path`` as ``save`` was given it: ``load("model")`` reads
    model.npz where no file "model" exists. ``layers``: the classes of one's own ``Layer`` that a saved DagNet's
    nodes are, found by their names. A file it cannot read or build from raises an ``UnreadableFileError``."""
    try:
        kinds = None if isinstance(layers, (type, str)) else tuple(layers)
    except TypeError:  # no collection
        kinds = None
    if kinds is None or not all(isinstance(kind, type) for kind in kinds):
        raise TypeError(f"layers must be a list of classes (of one's own Layer, which a saved DagNet's nodes are); "
                        f"got {shown(layers)}")
    kinds = list(dict.fromkeys(kinds))  # a class given twice is given once
    names = [kind.__name__ for kind in kinds]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"layers holds two classes named {twice[0]}: a file names a node's class by its name alone, "
                         "so give one of them")
    layers = kinds
    path = located(path)
    return build(*read(path), backend, path, layers)


def located(path):
    """The file ``path`` names: ``path`` itself, else ``path_of(path)``; an ``UnreadableFileError`` if neither
    is a file."""
    named = path_of(path)  # first: what is no path is refused as such
    candidates = list(dict.fromkeys([Path(path), named]))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    for candidate in candidates:
        if candidate.is_dir():
            raise UnreadableFileError(f"{candidate} is a folder, not a saved network", "give the path of the file "
                                      "that save wrote")
        if candidate.exists():  # a zip file is read by seeking in it
            raise UnreadableFileError(f"{candidate} is a pipe or a device, not a saved network", "save to a file "
                                      "and give its path")
    missing = f"{candidates[0]} does not exist" if len(candidates) == 1 else \
        f"neither {candidates[0]} nor {candidates[1]} exists"
    raise UnreadableFileError(missing, "check the name (save appends .npz to a name without it)")


def read(path):
    """``(state, arrays)`` of the file at ``path`` (``located``): its state, a dict, and every other array by its name,
    in the file's order; an ``UnreadableFileError`` for a file that is none of ours, damaged, or of a newer format. A
    state without ``format`` (a checkpoint of an older ``leapfrog-train``) is given as it is; ``build`` refuses it."""
    path = located(path)
    try:
        with open(path, "rb") as file:
            start = file.read(4)
    except OSError as error:
        raise UnreadableFileError(f"{path} cannot be read ({error.strerror})", "check its permissions") from None
    # np.load takes a file that does not start as a zip for a pickle, and says how to load one unsafely
    if start not in (b"PK\x03\x04", b"PK\x05\x06") or not zipfile.is_zipfile(path):
        raise UnreadableFileError(f"{path} is not an .npz archive (damaged, or another kind of file)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        saved = "state" in arrays
        state = json.loads(arrays.pop("state").item()) if saved else None
    except (*DAMAGED, TypeError, AttributeError) as error:
        raise UnreadableFileError(f"{path} is damaged ({named(error)}: {_first_line(error)})") from None
    except MemoryError as error:  # a header that claims a huge shape, or a file saved on a larger machine
        raise UnreadableFileError(f"{path} holds an array larger than this machine can hold ({_first_line(error)})",
                                  "load it on a machine with more memory if it is not damaged") from None
    if not saved:
        raise UnreadableFileError(f"{path} holds no network saved by leapfrog_gpu (an .npz archive without its "
                                  "'state')", "load it with numpy.load")
    if not isinstance(state, dict):
        raise UnreadableFileError(f"{path} is damaged (its 'state' is {shown(state)}, not the JSON object that save "
                                  "writes)")
    version = state.get("format", FORMAT)  # none: an older leapfrog-train's checkpoint, which build refuses
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UnreadableFileError(f"{path} is damaged (its format is {version!r}, not a version number: 1, 2, ...)")
    if version > FORMAT:
        raise UnreadableFileError(f"{path} is of format {version}; this leapfrog_gpu reads format {FORMAT} and "
                                  "older", "upgrade leapfrog_gpu to load it")
    return state, arrays


def build(state, arrays, backend="auto", path="the file", layers=()):
    """The network that ``state`` and ``arrays`` (``read``'s, of the file at ``path``) describe, on ``backend``, with
    their parameters and optimizer state (``layers``: ``load``'s); an ``UnreadableFileError`` for a state that
    describes none, or arrays that do not fit it."""
    backend = check_backend(backend)  # a bad backend is refused as such, not as the file's fault
    kind, architecture = state.get("network"), state.get("architecture")
    if "format" not in state or not isinstance(architecture, dict):
        raise UnreadableFileError(f"{path} holds no architecture to build a network from (a checkpoint of an "
                                  "older leapfrog-train?)", "load it with leapfrog_gpu.tools.train.models.load")
    if not isinstance(kind, str) or kind not in KINDS:
        raise UnreadableFileError(f"{path} holds a network of unknown kind {kind!r}; this leapfrog_gpu builds "
                                  f"{', '.join(sorted(KINDS))}", "load it with a leapfrog_gpu that knows it")
    try:
        net = KINDS[kind].from_architecture(architecture, backend, layers)
    except MissingLayer as error:  # a class of one's own that load was not given
        raise UnreadableFileError(f"{path} holds a {kind} whose {error.args[0]}", error.args[1]) from None
    except (LookupError, TypeError, ValueError) as error:  # a LookupError: raised by a Layer of one's own
        said = f"{type(error).__name__}: {_first_line(error)}" if isinstance(error, LookupError) else _first_line(error)
        raise UnreadableFileError(f"{path} holds an architecture that builds no {kind} ({said})") from None
    except MemoryError:
        raise UnreadableFileError(f"{path} holds an architecture whose {kind} is too large for this machine's "
                                  "memory to build",
                                  "load it where more memory is free") from None
    try:
        restore(net, arrays)
        held = state.get("optimizer")
        optimizer = None if held is None else optimizer_of(held)
        if optimizer is not None:
            restore_optimizer(net, optimizer, arrays, held.get("step"))
        check_fitted(net, arrays, optimizer)
    except (TypeError, ValueError, AttributeError) as error:
        net.close()
        raise UnreadableFileError(f"{path} does not fit its {kind} ({_first_line(error)})") from None
    except BaseException:
        net.close()
        raise
    return net


def restore(net, arrays):
    """Give ``net`` the parameters held in ``arrays`` (by their names in a file, ``array_name``); a ValueError
    naming the first it lacks, or saying why the network refuses one, and nothing copied."""
    params = {}
    for unit, name in _parameters(net):
        if array_name(unit, name) not in arrays:
            raise ValueError(f"no array {array_name(unit, name)!r} (the parameter {name} of unit {unit!r})")
        params.setdefault(unit, {})[name] = _of_dtype(arrays, array_name(unit, name), net.dtype)
    net.set_parameters(params)


def _of_dtype(arrays, key, dtype):
    """``arrays[key]``, a ValueError unless it is of ``dtype``, the network's: a file gives its arrays bit for bit."""
    array, want = arrays[key], np.dtype(dtype)
    if (array.dtype.kind, array.dtype.itemsize) != (want.kind, want.itemsize):  # either byte order
        raise ValueError(f"array {key!r} is {array.dtype}, not the network's {want}")
    return array


def check_fitted(net, arrays, optimizer=None):
    """A ValueError naming arrays among ``arrays`` that are neither a parameter of ``net`` nor a slot of the state of
    ``optimizer`` (None: none held), by their names in a file."""
    slots = [None, *(() if optimizer is None else optimizer.SLOTS)]
    names = {array_name(unit, name, slot) for unit, name in _parameters(net) for slot in slots}
    extra = [name for name in arrays if name not in names]
    if extra:
        raise ValueError(f"arrays {extra[:3]} fit no parameter of it")


def restore_optimizer(net, optimizer, arrays, steps):
    """Give ``net`` the state of ``optimizer`` held in ``arrays`` (a slot of every parameter, by its name in a file)
    after ``steps`` steps; a ValueError naming the first array it lacks, or saying why the network refuses one."""
    slots = {slot: {} for slot in optimizer.SLOTS}  # every slot, of no parameter in a DagNet that has none
    for slot in optimizer.SLOTS:
        for unit, name in _parameters(net):
            if array_name(unit, name, slot) not in arrays:
                raise ValueError(f"no array {array_name(unit, name, slot)!r} for the state of {optimizer!r}")
            slots[slot].setdefault(unit, {})[name] = _of_dtype(arrays, array_name(unit, name, slot), net.dtype)
    net.set_optimizer_state(optimizer, {"step": steps, **slots})


def _parameters(net):
    """``[(unit, name)]``: every parameter of ``net``, in the order of its ``parameters()``."""
    return [(unit, name) for unit, shapes in reversed(net.gradient_layout()) for name in shapes]


def optimizer_of(held):
    """The optimizer that a file's ``{"kind": ..., "hyper": {...}}`` names; a ValueError for one it cannot name or
    whose hyper-parameters it refuses (``its optimizer Adam: eps must be ...``)."""
    kind, hyper = held.get("kind"), held.get("hyper")
    if kind not in OPTIMIZERS or not isinstance(hyper, dict):
        raise ValueError(f"its optimizer {kind!r} is none of {', '.join(OPTIMIZERS)}, or lacks its hyper-parameters")
    try:
        return OPTIMIZERS[kind](**hyper)
    except (TypeError, ValueError) as error:
        raise ValueError(f"its optimizer {kind}: {_first_line(error)}") from None


def _first_line(error):
    return str(error).strip().split("\n")[0].rstrip(".")
