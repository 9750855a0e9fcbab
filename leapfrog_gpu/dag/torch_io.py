"""PyTorch out: a ``DagNet`` as a ``torch.fx.GraphModule``, one call per node in the network's order.

The function takes the nodes, the output's name and the parameters (``DagNet.to_torch`` calls it);
torch, the crossing of arrays and tensors and who shares whose memory are ``leapfrog_gpu.core.torch_io``'s.

Each layer of ``layers`` becomes what computes it on rows (a batch (B, n), features last): a ``Dense`` node
a ``torch.nn.Sequential`` of a ``Linear`` holding w (n, m) and b (n,) and its activation, a ``LayerNorm``
node a ``torch.nn.LayerNorm`` holding gamma and beta, each registered under the node's name; an ``Add``
node the sum of its inputs, first to last, and a ``Concat`` node ``torch.cat`` of them along the features.
The network stores a batch as columns, x (n_1, B): ``module(x.T).T`` computes ``feedforward(x)``.
"""

import keyword
import operator

from ..core import torch_io
from .layers import Add, Concat, Dense, LayerNorm
from .plan import INPUT

TRANSLATED = (Dense, Add, Concat, LayerNorm)
"""The layers ``to_module`` translates; a node of any other layer, a subclass of these included, is refused."""


def to_module(nodes, output, params):
    """A ``torch.fx.GraphModule`` named ``DagNetModule`` computing the DAG of ``nodes``, ``(name, layer,
    inputs)`` triples in a topological order, whose output is node ``output``; ``params`` is ``{node: {name:
    array}}`` for the nodes with parameters. The module's parameters share those arrays' memory where DLPack
    allows, so pass arrays that nothing else writes. A TypeError names a node whose layer is not one of
    ``TRANSLATED``, a ValueError a node whose name cannot name a torch module."""
    torch = torch_io.import_torch()
    graph, modules = torch.fx.Graph(), {}
    a = {INPUT: graph.placeholder(INPUT)}
    taken = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())  # the names a module has already
    for v, layer, inputs in nodes:
        if type(layer) not in TRANSLATED:
            raise TypeError(f"node {v!r} is a {type(layer).__name__}, which to_torch cannot translate: it translates "
                            f"{', '.join(kind.__name__ for kind in TRANSLATED)} layers")
        given = [a[u] for u in inputs]
        if type(layer) is Add:  # ((a_1 + a_2) + a_3) + ..., as Add sums them
            a[v] = given[0]
            for k, more in enumerate(given[1:], start=2):
                a[v] = graph.call_function(operator.add, (a[v], more), name=v if k == len(given) else None)
        elif type(layer) is Concat:
            a[v] = graph.call_function(torch.cat, (given,), {"dim": -1}, name=v)
        else:
            modules[_module_name(v, taken)] = _module(torch, layer, params[v])
            a[v] = graph.call_module(v, tuple(given))
    graph.output(a[output])
    return torch.fx.GraphModule(modules, graph, class_name="DagNetModule")


def _module(torch, layer, params):
    if type(layer) is Dense:
        return torch.nn.Sequential(*torch_io.dense(params["w"], params["b"], layer.activation))
    norm = torch.nn.LayerNorm(params["gamma"].shape[0], eps=layer.eps, device="meta")  # no memory
    norm.weight, norm.bias = torch_io.parameter(params["gamma"]), torch_io.parameter(params["beta"])
    return norm


def _module_name(v, taken):
    """``v``, if it can name a module of the GraphModule ``taken`` and be written in its generated code."""
    if not v.isascii() or any(c in v for c in '."\\') or not v.isprintable() or keyword.iskeyword(v) \
            or hasattr(taken, v):
        raise ValueError(f"node {v!r} cannot name a torch module: to_torch names each Dense and LayerNorm node's "
                         "module after the node, which needs printable ASCII without '.', '\"' or '\\', not a "
                         "Python keyword nor an attribute of torch.fx.GraphModule; rename the node")
    return v
