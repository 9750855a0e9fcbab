"""PyTorch in and out: a network's layers as a ``torch.nn.Sequential``, and such a module read back.

The functions take and return widths, activation names and arrays (``MLP.to_torch`` and ``MLP.from_torch``
call them); torch, the crossing of arrays and tensors and who shares whose memory are
``leapfrog_gpu.core.torch_io``'s.

Shapes. ``Linear(n_{l-1}, n_l).weight`` is exactly w^l, (n_l, n_{l-1}), and its ``bias`` is b^l, (n_l,).
The network stores a minibatch as columns, x (n_1, B); a PyTorch module takes rows, (B, n_1):
``module(x.T).T`` is ``feedforward(x)``.
"""

from ..core import torch_io


def to_module(weights, biases, activation, output_activation):
    """A ``torch.nn.Sequential``: for l = 2..L a ``Linear`` holding ``weights[l - 2]`` (n_l, n_{l-1}) and
    ``biases[l - 2]`` (n_l,) as its parameters, then ``activation``'s module (``output_activation``'s after
    the last, none for ``"identity"``). The parameters share the arrays' memory where DLPack allows (see
    ``leapfrog_gpu.core.torch_io``), so pass arrays that nothing else writes."""
    torch = torch_io.import_torch()
    layers = []
    for l, (w, b) in enumerate(zip(weights, biases), start=2):
        layers += torch_io.dense(w, b, output_activation if l == len(weights) + 1 else activation)
    return torch.nn.Sequential(*layers)


def read_module(module):
    """``(sizes, activation, output_activation, dtypes, (weights, biases))`` of a ``torch.nn.Sequential`` of
    ``Linear`` modules, each followed by ``Sigmoid``, ``Tanh``, ``ReLU`` or nothing (``Identity`` modules are
    passed over), every hidden one by the same activation. ``weights`` and ``biases`` are the module's
    tensors, detached (sharing its memory); a Linear without a bias gives zeros. With no hidden layer,
    ``activation`` is the output's (sigmoid for an identity output). ``dtypes`` are its parameters' dtypes' names.

    Raises TypeError for anything but such a module or a layer of another type (a subclass of these included, whose
    forward may compute another function: the layers are read, not the forward), ValueError for an activation
    without a Linear before it, a hidden layer without an activation, mixed hidden activations or widths
    that do not chain.
    """
    torch = torch_io.import_torch()
    if type(module) is not torch.nn.Sequential:
        raise TypeError(f"from_torch reads a torch.nn.Sequential of Linear and activation modules; got "
                        f"{torch_io.kind_of(module)}" + ("; DagNet.from_torch traces a module's forward" if isinstance(
                            module, torch.nn.Module) and not type(module).__module__.startswith("torch.") else ""))
    linears, after = [], []  # each Linear, and the name of the activation that follows it
    for index, layer in enumerate(module):
        name = torch_io.activation_of(layer)
        if type(layer) is torch.nn.Linear:
            linears.append(layer)
            after.append("identity")
        elif name is not None:
            if not linears or after[-1] != "identity":
                raise ValueError(f"module[{index}] ({type(layer).__name__}) must follow a Linear: from_torch reads "
                                 "Linear modules, each followed by at most one activation")
            after[-1] = name
        elif type(layer) is not torch.nn.Identity:
            raise TypeError(f"module[{index}] is a {torch_io.kind_of(layer)}: from_torch reads Linear, Sigmoid, "
                            "Tanh, ReLU and Identity modules")
    if not linears:
        raise ValueError("the module holds no Linear layer: from_torch needs at least one")
    for l, name in enumerate(after[:-1], start=2):
        if name == "identity":
            raise ValueError(f"hidden layer {l} has no activation: a network's hidden layers take "
                             f"{', '.join(torch_io.MODULES.values())}")
        if name != after[0]:
            raise ValueError(f"the hidden layers must share one activation; layer 2 has {after[0]!r}, "
                             f"layer {l} {name!r}")
    weights, biases = (list(group) for group in zip(*map(torch_io.linear_parameters, linears)))
    sizes = [weights[0].shape[1]] + [w.shape[0] for w in weights]
    for l, w in enumerate(weights[1:], start=3):
        if w.shape[1] != sizes[l - 2]:
            raise ValueError(f"the Linear of layer {l} takes {w.shape[1]} inputs but layer {l - 1} has "
                             f"{sizes[l - 2]} units: the widths do not chain")
    activation = after[0] if after[0] in torch_io.MODULES else "sigmoid"  # the output's where no layer is hidden
    torch_io.check_module(module)
    return sizes, activation, after[-1], torch_io.dtypes(module.parameters()), (weights, biases)
