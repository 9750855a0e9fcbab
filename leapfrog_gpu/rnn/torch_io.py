"""PyTorch in and out: a recurrent network as a ``torch.fx.GraphModule`` of ``torch.nn.RNN`` layers and
its output layer, and such a module read back.

The functions take and return widths, activation names and arrays (``RNN.to_torch`` and ``RNN.from_torch``
call them); torch, the crossing of arrays and tensors and who shares whose memory are
``leapfrog_gpu.core.torch_io``'s.

Shapes. The recurrent layer l is a one-layer ``torch.nn.RNN(n_{l-1}, n_l)``: ``weight_ih_l0`` is w^l
(n_l, n_{l-1}), ``weight_hh_l0`` is u^l (n_l, n_l), and ``bias_ih_l0 + bias_hh_l0`` is b^l (n_l,), with
zeros starting its state as a^{l,0} = 0. The output layer is a ``Linear`` holding w^L and b^L and its
activation. The network stores a batch of sequences as x (tau, n_1, B); ``nn.RNN`` takes (tau, B, n_1), so
``module(torch.from_numpy(x).permute(0, 2, 1))`` computes ``feedforward(x)``, as (B, n_L) for
``output="last"`` (its ``.T``) and (tau, B, n_L) for ``"every"`` (its ``.permute(0, 2, 1)``).

``nn.RNN`` has the nonlinearities tanh and relu; an RNN with sigmoid recurrent layers has no such module
and ``to_module`` refuses it. A GRU or LSTM network's layer l is a one-layer ``torch.nn.GRU`` or
``torch.nn.LSTM`` alike, its gates in torch's order: ``bias_ih_l0`` is b^l and ``bias_hh_l0`` zeros, but for
the GRU's n rows, which hold b_hn^l.

The module trains as the network does: b^l is one parameter, so ``bias_hh_l0`` is held at zero
(``requires_grad=False``; torch.optim passes over it), and a GRU's, whose n rows b_hn^l train, has a gradient
hook (``train_b_hn_alone``) that zeroes its r and z rows, which then stay zero under every optimizer of
``torch.optim``. A copy of the module (``copy.deepcopy``, ``torch.save``) keeps ``requires_grad`` and, the GRU
layer being this module's ``GRU`` (a ``torch.nn.GRU``), the hook: torch drops a tensor's hooks as it copies the
tensor, and ``GRU`` registers them again as its state comes back.
"""

import functools
import operator

from ..core import torch_io

NONLINEARITIES = ("tanh", "relu")
"""The activations of the recurrent layers that ``torch.nn.RNN`` computes."""


def to_module(weights, recurrent, biases, activation, output_activation, output, cell="elman", b_hn=None):
    """A ``torch.fx.GraphModule`` named ``RNNModule``: ``layer<l>``, a ``torch.nn.RNN`` holding
    ``weights[l - 2]``, ``recurrent[l - 2]`` and ``biases[l - 2]`` (in ``bias_ih_l0``; ``bias_hh_l0`` zeros)
    for each recurrent layer l = 2..L-1 in turn, then ``layer<L>``, a ``torch.nn.Sequential`` of the output
    ``Linear`` and its activation, at the last step (``output="last"``) or every step (``"every"``). The
    parameters share the arrays' memory where DLPack allows, so pass arrays that nothing else writes. A
    ``"gru"`` or ``"lstm"`` ``cell`` makes ``torch.nn.GRU`` or ``torch.nn.LSTM`` layers, the GRU's
    ``bias_hh_l0`` holding zeros and ``b_hn[l - 2]`` in its n rows."""
    torch = torch_io.import_torch()
    if cell == "elman" and activation not in NONLINEARITIES:
        raise ValueError(f"torch.nn.RNN has no {activation} nonlinearity (it has {' and '.join(NONLINEARITIES)}): "
                         f"an RNN with activation={activation!r} cannot be written as torch.nn.RNN layers")
    graph, modules = torch.fx.Graph(), {}
    a = graph.placeholder("x")
    for l, (w, u, b) in enumerate(zip(weights, recurrent, biases), start=2):
        modules[f"layer{l}"] = (_recurrent_layer(torch, w, u, b, activation) if cell == "elman" else
                                _gated_layer(torch, cell, w, u, b, None if b_hn is None else b_hn[l - 2]))
        a = graph.call_function(operator.getitem, (graph.call_module(f"layer{l}", (a,)), 0))  # every a^{l,t}
    if output == "last":
        a = graph.call_function(operator.getitem, (a, -1))
    L = len(weights) + 1
    modules[f"layer{L}"] = torch.nn.Sequential(*torch_io.dense(weights[-1], biases[-1], output_activation))
    graph.output(graph.call_module(f"layer{L}", (a,)))
    return torch.fx.GraphModule(modules, graph, class_name="RNNModule")


def _recurrent_layer(torch, w, u, b, activation):
    rnn = torch.nn.RNN(w.shape[1], w.shape[0], nonlinearity=activation, device="meta")  # no memory
    rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0 = (torch_io.parameter(p) for p in (w, u, b))
    rnn.bias_hh_l0 = torch.nn.Parameter(torch.zeros_like(rnn.bias_ih_l0.detach()), requires_grad=False)
    rnn.flatten_parameters()  # cuDNN's one buffer on a GPU; nothing on the CPU
    return rnn


def _gated_layer(torch, cell, w, u, b, b_hn):
    kind = {"gru": _gru(), "lstm": torch.nn.LSTM}[cell]
    layer = kind(w.shape[1], u.shape[1], device="meta")
    layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0 = (torch_io.parameter(p) for p in (w, u, b))
    bias_hh = torch.zeros_like(layer.bias_ih_l0.detach())
    if b_hn is not None:
        bias_hh[2 * u.shape[1]:] = torch_io.parameter(b_hn).detach()
    layer.bias_hh_l0 = torch.nn.Parameter(bias_hh, requires_grad=cell == "gru")
    if cell == "gru":
        train_b_hn_alone(layer.bias_hh_l0)
    layer.flatten_parameters()
    return layer


def train_b_hn_alone(bias_hh):
    """Make a GRU layer's ``bias_hh`` (3n,) train its n rows, b_hn, alone: a gradient hook zeroes its r and z
    rows, which then stay as they are (zeros) under every optimizer of ``torch.optim``."""
    bias_hh.register_hook(functools.partial(_b_hn_alone, n=len(bias_hh) // 3))


def _b_hn_alone(gradient, n):
    """A GRU's ``bias_hh`` gradient (3n,) with its r and z rows zeroed."""
    gradient = gradient.clone()
    gradient[:2 * n] = 0
    return gradient


@functools.cache
def _gru():
    """The class ``GRU`` (made once torch is imported)."""
    torch = torch_io.import_torch()

    class GRU(torch.nn.GRU):
        """``torch.nn.GRU`` whose ``bias_hh_l<k>`` train their n rows alone (``train_b_hn_alone``), in a copy too."""

        def __setstate__(self, state):
            super().__setstate__(state)
            for k in range(self.num_layers if self.bias else 0):
                train_b_hn_alone(getattr(self, f"bias_hh_l{k}"))

    GRU.__module__, GRU.__qualname__ = __name__, "GRU"  # where pickle finds it (``__getattr__``)
    return GRU


def __getattr__(name):
    """``GRU``, made on first use: a copy's unpickling looks it up here by name."""
    if name == "GRU":
        return _gru()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_module(module):
    """``(sizes, cell, activation, output_activation, dtypes, tensors)`` of a module whose modules, in the order
    it registers them (containers opened, ``Identity`` passed over), are one or more ``torch.nn.RNN`` of one
    nonlinearity, or ``torch.nn.GRU``, or ``torch.nn.LSTM`` (one kind; each of one or more layers: w^l from
    ``weight_ih_l<k>``, u^l from ``weight_hh_l<k>``, b^l the sum ``bias_ih_l<k> + bias_hh_l<k>`` but in a GRU's
    n rows, where b^l is ``bias_ih``'s and b_hn^l ``bias_hh``'s, zeros with ``bias=False``), then the
    output ``Linear`` (its bias zeros when it has none), then at most one ``Sigmoid``, ``Tanh`` or ``ReLU``:
    what ``to_module`` makes, or a module of one's own laid out alike. ``batch_first`` is read past: it
    changes the module's layout of x, not its function. The weights and recurrent weights are the module's
    tensors, detached (sharing its memory); the biases are new tensors. ``dtypes`` are its parameters' dtypes' names;
    ``cell`` ``"elman"`` (``torch.nn.RNN``), ``"gru"`` or ``"lstm"``, whose activation is tanh; ``tensors``
    ``(weights, recurrent, biases)``, and b_hn after them for a GRU.

    Raises TypeError for anything but a module, or a module of another type in it (a subclass of a torch module
    included, a ``Sequential``'s too: its forward may compute another function), and ValueError for what an
    RNN cannot compute: a bidirectional RNN, dropout between layers, an LSTM's projections (``proj_size``),
    mixed nonlinearities or cells, modules out of that order, widths that do not chain.
    """
    torch = torch_io.import_torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch reads a torch.nn.Module of torch.nn.RNN (GRU, LSTM), Linear and activation "
                        "modules; "
                        f"got {type(module).__name__}")
    rnns, linear, activation = [], None, "identity"
    for name, part in module.named_modules():
        where = f"module.{name} ({type(part).__name__})" if name else f"the module ({type(part).__name__})"
        read = (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM, torch.nn.Linear)  # a subclass with children is refused
        container = type(part) is torch.nn.Identity or any(part.children()) and not isinstance(part, read)
        if container and torch_io.subclassed(part) is None:  # a Sequential's subclass may change its forward
            continue
        if type(part) in (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM, _gru()):  # _gru(): to_module's, of GRU's forward
            if linear is not None:
                raise ValueError(f"{where} comes after the output Linear: an RNN's recurrent layers come first")
            rnns.append((where, _checked(part, where)))
        elif type(part) is torch.nn.Linear:
            if linear is not None or not rnns:
                raise ValueError(f"{where} is not one output Linear after the recurrent layers: from_torch reads "
                                 "torch.nn.RNN modules, then one Linear, then at most one activation")
            linear = part
        elif torch_io.activation_of(part) is not None:
            if linear is None or activation != "identity":
                raise ValueError(f"{where} must follow the output Linear, alone: the recurrent layers' activation "
                                 "is their nonlinearity")
            activation = torch_io.activation_of(part)
        else:  # named as a refusal names it: to_module's GRU, read above, is no subclass of one's own
            where = f"module.{name} ({torch_io.kind_of(part)})" if name else f"the module ({torch_io.kind_of(part)})"
            raise TypeError(f"{where}: from_torch reads torch.nn.RNN, GRU, LSTM, Linear, Sigmoid, Tanh, ReLU and "
                            "Identity modules")
    if linear is None:
        raise ValueError("the module holds no torch.nn.RNN (GRU, LSTM) followed by a Linear: from_torch needs both")
    (first, head), cell = rnns[0], _cell(rnns[0][1])
    for where, rnn in rnns:
        if _cell(rnn) != cell:
            raise ValueError(f"the recurrent layers must share one cell; {first} is {cell!r}, {where} {_cell(rnn)!r}")
        if cell == "elman" and rnn.nonlinearity != head.nonlinearity:
            raise ValueError(f"the recurrent layers must share one nonlinearity; {first} has "
                             f"{head.nonlinearity!r}, {where} {rnn.nonlinearity!r}")
    weights, recurrent, biases, b_hn = [], [], [], []
    for where, rnn in rnns:
        for k in range(rnn.num_layers):
            w, u = (getattr(rnn, f"weight_{kind}_l{k}").detach() for kind in ("ih", "hh"))
            weights.append(w)
            recurrent.append(u)
            if not rnn.bias:
                biases.append(torch.zeros(w.shape[0], dtype=w.dtype, device=w.device))
                b_hn.append(torch.zeros(u.shape[1], dtype=w.dtype, device=w.device))
                continue
            bias_ih, bias_hh = (getattr(rnn, f"bias_{kind}_l{k}").detach() for kind in ("ih", "hh"))
            if cell == "gru":  # b_hn acts inside r * (.): kept apart
                n = 2 * u.shape[1]
                biases.append(torch.cat([bias_ih[:n] + bias_hh[:n], bias_ih[n:]]))
                b_hn.append(bias_hh[n:].clone())
            else:
                biases.append(bias_ih + bias_hh)
    w, b = torch_io.linear_parameters(linear)
    weights.append(w)
    biases.append(b)
    sizes = [weights[0].shape[1]] + [u.shape[1] for u in recurrent] + [w.shape[0]]
    for l, w in enumerate(weights[1:], start=3):
        if w.shape[1] != sizes[l - 2]:
            raise ValueError(f"layer {l} takes {w.shape[1]} inputs but layer {l - 1} has {sizes[l - 2]} units: "
                             "the widths do not chain")
    tensors = (weights, recurrent, biases) + ((b_hn,) if cell == "gru" else ())
    torch_io.check_module(module, (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM, torch.nn.Linear))
    nonlinearity = "tanh" if cell != "elman" else head.nonlinearity
    return sizes, cell, nonlinearity, activation, torch_io.dtypes(module.parameters()), tensors


def _cell(rnn):
    """The cell of a ``torch.nn.RNN``, ``GRU`` or ``LSTM``: ``"elman"``, ``"gru"`` or ``"lstm"``."""
    return {"RNN": "elman", "GRU": "gru", "LSTM": "lstm"}[rnn.mode.split("_")[0]]


def _checked(rnn, where):
    """``rnn``, if an RNN computes what it computes."""
    if rnn.bidirectional:
        raise ValueError(f"{where} is bidirectional: an RNN runs forward in time only; "
                         "read a module with bidirectional=False")
    if rnn.dropout > 0 and rnn.num_layers > 1:
        raise ValueError(f"{where} drops out between its layers (dropout={rnn.dropout}), which an RNN does not; "
                         "set its dropout to 0")
    if getattr(rnn, "proj_size", 0) > 0:
        raise ValueError(f"{where} projects its hidden state (proj_size={rnn.proj_size}), which an RNN's LSTM does "
                         "not; read a module with proj_size=0")
    return rnn
