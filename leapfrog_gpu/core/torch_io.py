"""PyTorch in and out, what the bridges of ``MLP``, ``RNN`` and ``DagNet`` share: torch imported when
asked for, arrays and tensors crossing between the two, and a dense layer's ``Linear`` and activation
modules, made and read.

torch is optional: each function imports it when called, and without it raises an ImportError that says how
to install it (``INSTALL``).

Memory. Arrays and tensors cross through DLPack, sharing their memory, where both sides are on the same
device (a NumPy array and a CPU tensor, a CuPy array and a CUDA tensor), and through the host, as a copy,
otherwise. Neither direction leaves a network's live parameters and a module's tensors sharing memory: a
network's ``to_torch`` makes its module from the copies that ``weights`` or ``parameters()`` hand out, so
the module owns parameters that later steps do not change (and training the module leaves the network as
it was); what ``as_arrays`` returns does share the module's memory, and ``loaded`` copies it into the
network's own buffers (``set_parameters``), so that training the network never writes the user's module.
"""

from collections.abc import Mapping

import numpy as np

from ..parallel.reducer import broadcast_parameters, building
from .functions import DTYPES

INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
"""How to install PyTorch, the one line every message and document gives: the CPU build, from PyTorch's own
index (the Linux wheel on PyPI is a CUDA build of several GB, which a pip extra could not avoid); the version CI
tests. Where torch must run on a GPU, PyTorch's CUDA build of it instead."""
MODULES = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "ReLU"}
"""The ``torch.nn`` module of each activation; ``"identity"`` has none (or ``nn.Identity``)."""


def import_torch():
    """``torch``, or an ImportError that says how to install it."""
    try:
        import torch
    except ImportError as error:
        raise ImportError("PyTorch is not installed; it is an optional dependency of leapfrog_gpu: "
                          f"{INSTALL}") from error
    return torch


def parameter(array):
    """``array`` as a ``torch.nn.Parameter``: its memory through DLPack where torch reaches its device, else
    a CPU copy."""
    torch = import_torch()
    if isinstance(array, np.ndarray) or hasattr(array, "__dlpack__") and torch.cuda.is_available():
        return torch.nn.Parameter(torch.from_dlpack(array))
    return torch.nn.Parameter(torch.from_numpy(array.get()))


def dense(w, b, activation):
    """The modules of z = w a + b, a = sigma(z) on rows: a ``Linear`` holding w (n, m) as its weight and
    b (n,) as its bias (their memory, see ``parameter``), then ``activation``'s module (none for
    ``"identity"``), as a list."""
    torch = import_torch()
    linear = torch.nn.Linear(w.shape[1], w.shape[0], device="meta")  # no memory, no initialization
    linear.weight, linear.bias = parameter(w), parameter(b)
    return [linear] if activation == "identity" else [linear, getattr(torch.nn, MODULES[activation])()]


def activation_of(module):
    """The name of the activation that ``module`` computes (``Sigmoid``: ``"sigmoid"``, ...), or None for
    a module of any other type."""
    torch = import_torch()
    return {getattr(torch.nn, kind): name for name, kind in MODULES.items()}.get(type(module))


def subclassed(module):
    """The name of the torch module (``"Sequential"``, ``"GRU"``, ...) whose subclass ``module`` is, or None for one of
    torch's own or a plain ``torch.nn.Module``'s: from_torch reads a module's parameters, not the forward that a
    subclass may change."""
    bases = [base.__name__ for base in type(module).__mro__[1:] if base.__module__.startswith("torch.nn.modules")]
    own = type(module).__module__.startswith("torch.") or not bases or bases[0] == "Module"
    return None if own else bases[0]


def kind_of(module):
    """``module``'s type as a refusal names it, saying so of a subclass of a torch module (``subclassed``)."""
    kind, base = type(module).__name__, subclassed(module)
    return kind if base is None else f"{kind}, a subclass of torch.nn.{base} whose forward from_torch would not read"


def linear_parameters(linear):
    """``(w, b)`` of a ``torch.nn.Linear``: its weight (n, m) and bias (n,), detached (sharing its memory);
    zeros for a Linear without a bias."""
    torch = import_torch()
    w = linear.weight.detach()
    b = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device) if linear.bias is None else linear.bias.detach()
    return w, b


def check_module(module, held_by=None):
    """Raise a ValueError naming the first of ``module``'s submodules (itself included) whose forward hooks, or any
    module's (``register_module_forward_hook``), change what it computes where from_torch reads the modules alone;
    or the first parameter that a network could not hold as the module does: one held under two names (tied, or a
    module registered twice: each of a network's layers holds its own), one on the meta device (no values to read),
    or, given ``held_by`` (module types), one held by a module of none of them (the RNN's ``from_torch`` reads the
    modules, not the forward that may use such a one: a learned initial state). A frozen parameter is read, and the
    network trains it."""
    hooked = _hooks(module)
    if hooked:
        raise ValueError(f"from_torch cannot read the forward hooks {hooked}, which change what it computes: remove "
                         "them (handle.remove(), on the handle that registering one returned), or fold what they do "
                         "into the module")
    named = {}
    for owner_name, owner in module.named_modules(remove_duplicate=False):
        for name, tensor in owner.named_parameters(recurse=False, remove_duplicate=False):
            where = repr(".".join(filter(None, (owner_name, name))))
            if held_by is not None and not isinstance(owner, held_by):
                raise ValueError(f"parameter {where} is held by the {type(owner).__name__} module, which from_torch "
                                 f"does not read: it reads the parameters of {', '.join(k.__name__ for k in held_by)} "
                                 "modules")
            if named.setdefault(id(tensor), where) is not where:
                raise ValueError(f"parameter {where} is also {named[id(tensor)]}: each layer of a network holds "
                                 "parameters of its own; give each module its own (copy.deepcopy)")
            if tensor.device.type == "meta":
                raise ValueError(f"parameter {where} is on the meta device, which holds no values: give it values "
                                 "first (module.to_empty(device='cpu'), then initialise it)")


def _hooks(module):
    """Where forward hooks or pre-hooks would run on ``module``: ``"of every module"`` (global ones),
    ``"on module 'name'"``, ``"on the module"`` (itself), or None."""
    torch = import_torch()
    every = torch.nn.modules.module
    if getattr(every, "_global_forward_hooks", None) or getattr(every, "_global_forward_pre_hooks", None):
        return "of every module (register_module_forward_hook)"
    for name, owner in module.named_modules(remove_duplicate=False):
        if owner._forward_hooks or owner._forward_pre_hooks:
            return f"on module {name!r}" if name else "on the module"
    return None


def as_arrays(tensors, xp):
    """Lists of tensors as arrays that the backend of ``xp`` reads: their memory through DLPack on the same
    device (CPU tensors as NumPy arrays, CUDA ones as CuPy arrays when ``xp`` is CuPy), else a host copy."""
    torch = import_torch()
    return [[_array(torch, tensor, xp) for tensor in group] for group in tensors]


def network_dtype(given, found):
    """The dtype of a network made from a module whose parameters are of the dtypes ``found`` (names): ``given``,
    else the one of ``found``; a ValueError that says to give one where the module's is none a network holds
    (float16), or where they are several (a network holds its parameters in one dtype)."""
    found = sorted(set(found))
    if given is None and (len(found) > 1 or found[0] not in DTYPES):
        why = "a network holds its parameters in one dtype" if len(found) > 1 else "which a network does not hold"
        raise ValueError(f"the module's parameters are {' and '.join(found)}, {why}: pass dtype='float32' or "
                         "'float64' to convert them")
    return given or found[0]


def dtypes(tensors):
    """The names of the dtypes of ``tensors`` (``"float32"``, ...)."""
    return [str(tensor.dtype).removeprefix("torch.") for tensor in tensors]


def unread(cls, options, *read):
    """``options``, the other arguments of the constructor of ``cls`` given to its ``from_torch``; a TypeError for
    any of the arguments ``from_torch`` reads from the module (``read``)."""
    given = [name for name in read if name in options]
    if given:
        raise TypeError(f"{cls.__name__}.from_torch reads {' and '.join(given)} from the module: drop "
                        f"{', '.join(name + '=' for name in given)}")
    return options


def loaded(net, tensors):
    """``net``, given ``tensors`` as parameters, copied into its own buffers: lists of tensors in the order of
    its ``set_parameters``, or ``{unit: {name: tensor}}`` as its ``parameters()`` gives; closed before the
    error is raised when it refuses them. Data-parallel, rank 0's then on every rank, as a network made anew
    starts (each rank's module may have been drawn by its own seed)."""
    xp = net.backend.xp
    try:
        with building(net.comm):  # a rank that refuses its tensors leaves none waiting for it below
            if isinstance(tensors, Mapping):
                net.set_parameters({unit: dict(zip(named, as_arrays([named.values()], xp)[0]))
                                    for unit, named in tensors.items()})
            else:
                net.set_parameters(*as_arrays(tensors, xp))
        broadcast_parameters(net)
    except BaseException:
        net.close()
        raise
    return net


def _array(torch, tensor, xp):
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()  # exact; NumPy has no bfloat16
    if tensor.device.type != "cpu":
        if xp is not np:
            return xp.from_dlpack(tensor)
        tensor = tensor.cpu()
    return np.from_dlpack(tensor)
