"""PyTorch in and out: a network's layers as a ``torch.nn.Sequential``, and such a module read back.

The functions take and return widths, activation names and arrays (``MLP.to_torch`` and ``MLP.from_torch``
call them). torch is an optional extra: each function imports it when called, and without it raises an
ImportError that says ``pip install 'leapfrog_gpu[torch]'``.

Shapes. ``Linear(n_{l-1}, n_l).weight`` is exactly w^l, (n_l, n_{l-1}), and its ``bias`` is b^l, (n_l,).
The network stores a minibatch as columns, x (n_1, B); a PyTorch module takes rows, (B, n_1):
``module(x.T).T`` is ``feedforward(x)``.

Memory. Arrays and tensors cross through DLPack, sharing their memory, where both sides are on the same
device (a NumPy array and a CPU tensor, a CuPy array and a CUDA tensor), and through the host, as a copy,
otherwise. Neither direction leaves the network's live parameters and a module's tensors sharing memory:
``to_module`` is given the copies that ``MLP.weights`` and ``MLP.biases`` hand out, so the module owns
parameters that later steps do not change (and training the module leaves the network as it was); what
``read_module`` and ``as_arrays`` return does share the module's memory, and ``MLP.set_parameters`` copies
it into the network's own buffers, so that training the network never writes the user's module.
"""

import numpy as np

MODULES = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "ReLU"}
"""The ``torch.nn`` module of each activation; ``"identity"`` has none (or ``nn.Identity``)."""


def import_torch():
    """``torch``, or an ImportError that names the extra to install."""
    try:
        import torch
    except ImportError as error:
        raise ImportError("PyTorch is not installed; it is an optional extra of leapfrog_gpu: "
                          "pip install 'leapfrog_gpu[torch]'") from error
    return torch


def to_module(weights, biases, activation, output_activation):
    """A ``torch.nn.Sequential``: for l = 2..L a ``Linear`` holding ``weights[l - 2]`` (n_l, n_{l-1}) and
    ``biases[l - 2]`` (n_l,) as its parameters, then ``activation``'s module (``output_activation``'s after
    the last, none for ``"identity"``). The parameters share the arrays' memory where DLPack allows (see the
    module's docstring), so pass arrays that nothing else writes."""
    torch = import_torch()
    layers = []
    for l, (w, b) in enumerate(zip(weights, biases), start=2):
        linear = torch.nn.Linear(w.shape[1], w.shape[0], device="meta")  # no memory, no initialization
        linear.weight, linear.bias = (torch.nn.Parameter(_tensor(torch, p)) for p in (w, b))
        layers.append(linear)
        name = output_activation if l == len(weights) + 1 else activation
        if name != "identity":
            layers.append(getattr(torch.nn, MODULES[name])())
    return torch.nn.Sequential(*layers)


def read_module(module):
    """``(sizes, activation, output_activation, dtype, (weights, biases))`` of a ``torch.nn.Sequential`` of
    ``Linear`` modules, each followed by ``Sigmoid``, ``Tanh``, ``ReLU`` or nothing (``Identity`` modules are
    passed over), every hidden one by the same activation. ``weights`` and ``biases`` are the module's
    tensors, detached (sharing its memory); a Linear without a bias gives zeros. With no hidden layer,
    ``activation`` is the output's (sigmoid for an identity output). ``dtype`` is the weights' dtype name.

    Raises TypeError for anything but such a module or a layer of another type, ValueError for an activation
    without a Linear before it, a hidden layer without an activation, mixed hidden activations or widths
    that do not chain.
    """
    torch = import_torch()
    if not isinstance(module, torch.nn.Sequential):
        raise TypeError(f"from_torch reads a torch.nn.Sequential of Linear and activation modules; "
                        f"got {type(module).__name__}")
    names = {getattr(torch.nn, kind): name for name, kind in MODULES.items()}
    linears, after = [], []  # each Linear, and the name of the activation that follows it
    for index, layer in enumerate(module):
        if isinstance(layer, torch.nn.Linear):
            linears.append(layer)
            after.append("identity")
        elif type(layer) in names:
            if not linears or after[-1] != "identity":
                raise ValueError(f"module[{index}] ({type(layer).__name__}) must follow a Linear: from_torch reads "
                                 "Linear modules, each followed by at most one activation")
            after[-1] = names[type(layer)]
        elif not isinstance(layer, torch.nn.Identity):
            raise TypeError(f"module[{index}] is a {type(layer).__name__}: from_torch reads Linear, Sigmoid, Tanh, "
                            "ReLU and Identity modules")
    if not linears:
        raise ValueError("the module holds no Linear layer: from_torch needs at least one")
    for l, name in enumerate(after[:-1], start=2):
        if name == "identity":
            raise ValueError(f"hidden layer {l} has no activation: a network's hidden layers take "
                             f"{', '.join(MODULES.values())}")
        if name != after[0]:
            raise ValueError(f"the hidden layers must share one activation; layer 2 has {after[0]!r}, "
                             f"layer {l} {name!r}")
    weights = [linear.weight.detach() for linear in linears]
    sizes = [weights[0].shape[1]] + [w.shape[0] for w in weights]
    for l, w in enumerate(weights[1:], start=3):
        if w.shape[1] != sizes[l - 2]:
            raise ValueError(f"the Linear of layer {l} takes {w.shape[1]} inputs but layer {l - 1} has "
                             f"{sizes[l - 2]} units: the widths do not chain")
    biases = [torch.zeros(w.shape[0], dtype=w.dtype, device=w.device) if linear.bias is None
              else linear.bias.detach() for linear, w in zip(linears, weights)]
    activation = after[0] if after[0] in MODULES else "sigmoid"  # after[0] is the output's with no hidden layer
    return sizes, activation, after[-1], str(weights[0].dtype).removeprefix("torch."), (weights, biases)


def as_arrays(tensors, xp):
    """Lists of tensors as arrays that the backend of ``xp`` reads: their memory through DLPack on the same
    device (CPU tensors as NumPy arrays, CUDA ones as CuPy arrays when ``xp`` is CuPy), else a host copy."""
    torch = import_torch()
    return [[_array(torch, tensor, xp) for tensor in group] for group in tensors]


def _array(torch, tensor, xp):
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()  # exact; NumPy has no bfloat16
    if tensor.device.type != "cpu":
        if xp is not np:
            return xp.from_dlpack(tensor)
        tensor = tensor.cpu()
    return np.from_dlpack(tensor)


def _tensor(torch, array):
    """``array`` as a tensor: its memory through DLPack where torch reaches its device, else a CPU copy."""
    if isinstance(array, np.ndarray) or hasattr(array, "__dlpack__") and torch.cuda.is_available():
        return torch.from_dlpack(array)
    return torch.from_numpy(array.get())
