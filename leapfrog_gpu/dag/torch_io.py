"""PyTorch in and out: a ``DagNet`` as a ``torch.fx.GraphModule``, one call per node in the network's order,
and a module's graph of calls read back as nodes.

The functions take and return nodes, the output's name and the parameters (``DagNet.to_torch`` and
``DagNet.from_torch`` call them); torch, the crossing of arrays and tensors and who shares whose memory are
``leapfrog_gpu.core.torch_io``'s.

Each layer of ``layers`` becomes what computes it on rows (a batch (B, n), features last): a ``Dense`` node
a ``torch.nn.Sequential`` of a ``Linear`` holding w (n, m) and b (n,) and its activation, a ``LayerNorm``
node a ``torch.nn.LayerNorm`` holding gamma and beta, each registered under the node's name; an ``Add``
node the sum of its inputs, first to last, and a ``Concat`` node ``torch.cat`` of them along the features.
The network stores a batch as columns, x (n_1, B): ``module(x.T).T`` computes ``feedforward(x)``.
``read_module`` reads such a module back, or a module of one's own written with the same calls: one node
per call of a ``Linear`` (and the sigmoid, tanh or relu applied to its output alone), a ``LayerNorm``, a
``+`` or ``torch.cat`` along the features (dim 1 or -1 of the rows).
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
    allows, so pass arrays that nothing else writes. Every node's fx node is named after it where fx keeps the
    name (``_kept``), a module's otherwise by a name of no node (``_spare``), so that ``read_module`` gives
    the nodes back. A TypeError names a node whose layer is not one of ``TRANSLATED``, a ValueError a node
    whose name cannot name a torch module, or an Add or Concat node whose name fx would change."""
    torch = torch_io.import_torch()
    graph, modules = torch.fx.Graph(), {}
    a = {INPUT: graph.placeholder(INPUT)}
    taken = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())  # the names a module has already
    names = {v for v, _, _ in nodes}
    for v, layer, inputs in nodes:
        if type(layer) not in TRANSLATED:
            raise TypeError(f"node {v!r} is a {type(layer).__name__}, which to_torch cannot translate: it translates "
                            f"{', '.join(kind.__name__ for kind in TRANSLATED)} layers")
        if type(layer) in (Add, Concat) and not _kept(torch, v):
            raise ValueError(f"node {v!r} cannot name a torch.fx node: to_torch names each Add and Concat node's "
                             "fx node after the node, which needs an ASCII Python identifier, not a keyword, a "
                             "builtin, 'self' nor a name fx reserves such as 'torch'; rename the node")
        given = [a[u] for u in inputs]
        if type(layer) is Add:  # ((a_1 + a_2) + a_3) + ..., as Add sums them
            a[v] = given[0]
            for k, more in enumerate(given[1:], start=2):
                a[v] = graph.call_function(operator.add, (a[v], more),
                                           name=v if k == len(given) else _spare(graph, names, "add"))
        elif type(layer) is Concat:
            a[v] = graph.call_function(torch.cat, (given,), {"dim": -1}, name=v)
        else:
            modules[_module_name(v, taken)] = _module(torch, layer, params[v])
            a[v] = graph.create_node("call_module", v, tuple(given),
                                     name=v if _kept(torch, v) else _spare(graph, names, "module"))
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


def _kept(torch, v):
    """Whether fx keeps ``v`` as the name of a graph node: an ASCII Python identifier, not a keyword, a builtin
    nor a name its generated code reads (``torch``, ...; ``self``, the generated forward's first argument)."""
    return v != "self" and torch.fx.Graph().create_node("placeholder", v, name=v).name == v


def _spare(graph, names, base):
    """``base``, ``base_1``, ``base_2``, ...: the first that no node of ``graph`` and none of ``names`` has."""
    used, name, k = names | {node.name for node in graph.nodes}, base, 0
    while name in used:
        k += 1
        name = f"{base}_{k}"
    return name


READS = ("Linear modules (each followed by at most one sigmoid, tanh or relu: a module, torch or functional "
         "function, or tensor method), a Sequential of a Linear and its activation, LayerNorm and Identity modules, "
         "+ and torch.add, torch.cat along the features")
"""What ``read_module`` reads, as its refusals say it."""


def read_module(module):
    """``(n_input, nodes, dtypes, tensors)`` of ``module``: a ``torch.nn.Module``, traced by
    ``torch.fx.symbolic_trace``, or a ``torch.fx.GraphModule``, read as it is (``to_module``'s included).

    One input (a placeholder) and one output; one node per call of a ``Linear`` (a ``Dense`` node, taking the
    sigmoid, tanh or relu applied to its output when nothing else reads that output) or of a ``Sequential``
    of a ``Linear`` and at most one activation module, one per ``LayerNorm`` of one normalized dimension, per
    sum of two tensors (``+``, ``torch.add``, ``Tensor.add``; a sum whose first term, and not its second, is a
    sum read by nothing else joins it: ((a + b) + c) is one ``Add`` of three, (h + h) two terms) and per
    ``torch.cat`` along dim 1 or -1 (the features of the rows (B, n)); ``Identity`` modules are passed over.
    A node is named after its module where the module's name is one name (no ``.``) not taken yet, else after
    the fx node (``"add_1"``).

    ``nodes`` are ``(name, layer, inputs)`` triples for ``DagNet``; ``tensors`` ``{node: {name: tensor}}``, the
    module's detached (sharing its memory): w and b of each ``Linear`` (b zeros without a bias), gamma and beta of
    each ``LayerNorm`` (ones and zeros where it has none). ``n_input`` is found from a ``Linear`` or ``LayerNorm``
    that reads the input, alone or through sums and concatenations (``input_width``); ``dtypes`` the names of
    its parameters' dtypes (torch's default dtype's with none). A TypeError refuses what is not a module; a
    ValueError names the first node that a DagNet cannot compute and its op, saying why: any other module, function,
    method or attribute, a second input, a module called twice (a node's parameters are its own), a submodule ``x``
    whose fx node is named ``"x"`` too (the input's name), an activation that does not follow a ``Linear``'s output
    alone, a concatenation along another dim, a sum with a number, a node that leads nowhere, an output that a node
    reads; a module torch.fx cannot trace, or a Linear or LayerNorm given alone (in a Sequential it is read); a
    parameter no network holds as the module does (``core.torch_io.check_module``), or a forward hook.
    """
    torch = torch_io.import_torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch reads a torch.nn.Module or a torch.fx.GraphModule; got {type(module).__name__}")
    if isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)):  # fx would trace into its functions
        raise ValueError(f"from_torch reads the modules a module calls, and a {type(module).__name__} alone calls "
                         f"none: pass torch.nn.Sequential(module)")
    traced = module if isinstance(module, torch.fx.GraphModule) else _traced(torch, module)
    reader = _Reader(torch, traced)
    for node in traced.graph.nodes:
        getattr(reader, node.op, reader.refuse)(node)
    read = reader.finish()
    torch_io.check_module(module)
    return read


def _traced(torch, module):
    """``torch.fx.symbolic_trace(module)``; a module it cannot trace refused with a ValueError on one line (fx raises
    its TraceError, a ValueError, and also RuntimeError, AssertionError, TypeError from the module's code)."""
    try:
        return torch.fx.symbolic_trace(module)
    except ValueError:
        raise
    except Exception as error:  # noqa: BLE001 - what the module's forward raises as fx runs it
        said = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(f"torch.fx cannot trace the module ({type(error).__name__}: {said}): from_torch "
                         "reads a module whose forward torch.fx.symbolic_trace can follow, or a GraphModule") from error


class _Reader:
    """The DagNet nodes of a ``GraphModule``'s graph, read one fx node at a time, in the graph's order."""

    def __init__(self, torch, traced):
        functional = torch.nn.functional
        self.torch, self.traced = torch, traced
        self.functions = {torch.sigmoid: "sigmoid", torch.tanh: "tanh", torch.relu: "relu",
                          functional.sigmoid: "sigmoid", functional.tanh: "tanh", functional.relu: "relu"}
        self.nodes, self.tensors, self.fx = {}, {}, {}  # by node name: (layer, inputs), parameters, its fx node
        self.of = {}  # fx node -> the name of the node (or INPUT) whose output it is
        self.called = {}  # module name -> the fx node that called it
        self.takes = {}  # a Linear's or LayerNorm's node -> the width of its input
        self.returned = None  # the node the module returns

    # -- one method per fx op ------------------------------------------------------------------------

    def placeholder(self, node):
        if INPUT in self.of.values():
            raise self.refused(node, "is a second input: a DagNet has one input")
        self.of[node] = INPUT

    def output(self, node):
        a = node.args[0]
        if not isinstance(a, self.torch.fx.Node):
            raise self.refused(node, f"returns a {type(a).__name__}: a DagNet has one output, a tensor")
        self.returned = self.of[a]

    def call_module(self, node):
        nn, part = self.torch.nn, self.traced.get_submodule(node.target)
        if type(part) is nn.Identity:
            self.of[node] = self.operand(node)
        elif torch_io.activation_of(part) is not None:
            self.activate(node, torch_io.activation_of(part))
        elif type(part) not in (nn.Linear, nn.Sequential, nn.LayerNorm):
            self.refuse(node)
        elif node.target in self.called:
            raise self.refused(node, f"calls module {node.target!r} again (node {self.called[node.target].name!r} "
                                     "called it first): a node's parameters are its own; give each call its own module")
        elif type(part) is nn.LayerNorm:
            self.called[node.target] = node
            self.layer_norm(node, part)
        else:
            self.called[node.target] = node
            linear, activation = (part, "identity") if type(part) is nn.Linear else self.sequential(node, part)
            w, b = torch_io.linear_parameters(linear)
            self.add_node(node, Dense(w.shape[0], activation), [self.operand(node)], {"w": w, "b": b}, w.shape[1])

    def call_function(self, node):
        if node.target in self.functions:
            self.activate(node, self.functions[node.target], ("inplace",))
        elif node.target in (operator.add, self.torch.add):
            self.add(node)
        elif node.target is self.torch.cat:
            self.cat(node)
        else:
            self.refuse(node)

    def call_method(self, node):
        if node.target in ("sigmoid", "tanh", "relu"):
            self.activate(node, node.target)
        elif node.target == "add":
            self.add(node)
        else:
            self.refuse(node)

    # -- the layers ----------------------------------------------------------------------------------

    def sequential(self, node, part):
        """``(linear, activation)`` of a ``Sequential`` of a ``Linear`` and at most one activation module."""
        parts = [p for p in part if type(p) is not self.torch.nn.Identity]
        names = [torch_io.activation_of(p) for p in parts[1:]]
        if not parts or type(parts[0]) is not self.torch.nn.Linear or len(parts) > 2 or None in names:
            raise self.refused(node, f"holds {[type(p).__name__ for p in part]}: from_torch reads a Sequential of a "
                                     "Linear and at most one Sigmoid, Tanh or ReLU (Identity passed over)")
        return parts[0], (names or ["identity"])[0]

    def layer_norm(self, node, part):
        if len(part.normalized_shape) != 1:
            raise self.refused(node, f"normalizes over {len(part.normalized_shape)} dimensions "
                                     f"{tuple(part.normalized_shape)}: a DagNet's LayerNorm normalizes each "
                                     "sample's features, normalized_shape=(n,)")
        n, detached = part.normalized_shape[0], {}
        for name, tensor, default in (("gamma", part.weight, self.torch.ones), ("beta", part.bias, self.torch.zeros)):
            detached[name] = default(n, dtype=self.torch.float64) if tensor is None else tensor.detach()
        self.add_node(node, LayerNorm(part.eps), [self.operand(node)], detached, n)

    def activate(self, node, activation, keywords=()):
        """Give the ``Dense`` node of the ``Linear`` whose output alone ``node`` reads its ``activation`` (through
        ``Identity`` modules that nothing else reads)."""
        source = self.argument(node, keywords)
        while self.passed_over(source) and len(source.users) == 1:
            source = self.argument(source)
        name = self.of.get(source) if isinstance(source, self.torch.fx.Node) else None
        layer = self.nodes[name][0] if name in self.nodes else None
        if not (type(layer) is Dense and layer.activation == "identity" and self.fx[name] is source
                and len(source.users) == 1):
            read = "the input" if name == INPUT else f"node {getattr(source, 'name', source)!r}"
            raise self.refused(node, f"applies {activation} to {read}: a DagNet applies an activation only in a "
                                     "Dense node, to the output of its Linear that nothing else reads")
        self.nodes[name] = (Dense(layer.n, activation), self.nodes[name][1])
        self.of[node] = name

    def passed_over(self, node):
        """Whether fx node ``node`` calls an ``Identity`` module."""
        return (isinstance(node, self.torch.fx.Node) and node.op == "call_module"
                and type(self.traced.get_submodule(node.target)) is self.torch.nn.Identity)

    def add(self, node):
        reads = "the sum of two tensors, alpha 1 or none"
        given = self.arguments(node, ("input", "other"), ("alpha",), reads)
        alpha = given.pop("alpha", 1)
        if set(given) != {"input", "other"} or type(alpha) not in (int, float) or alpha != 1:
            raise self.refused(node, f"takes {len(node.args)} arguments and keywords {sorted(node.kwargs)}: "
                                     f"from_torch reads {reads}")
        first, second = given["input"], given["other"]
        inputs = [self.read(node, value) for value in (first, second)]
        if (self.fx.get(inputs[0]) is first and type(self.nodes[inputs[0]][0]) is Add and len(first.users) == 1
                and second is not first):
            inputs = self.nodes.pop(inputs[0])[1] + inputs[1:]  # ((a + b) + c): one Add, which sums in order
        self.add_node(node, Add(), inputs)

    def cat(self, node):
        given = {**dict(zip(("tensors", "dim"), node.args)), **node.kwargs}
        dim = given.pop("dim", 0)
        if set(given) != {"tensors"} or not isinstance(given["tensors"], (list, tuple)):
            raise self.refused(node, f"takes {sorted(given)}: from_torch reads torch.cat(tensors, dim)")
        if dim not in (1, -1):
            batch = ", the batch" if dim in (0, -2) else ""
            raise self.refused(node, f"concatenates along dim {dim}{batch}: a module reads rows (B, n) and a DagNet "
                                     "concatenates the features, dim=1 or -1")
        self.add_node(node, Concat(), [self.read(node, value) for value in given["tensors"]])

    # -- bookkeeping ---------------------------------------------------------------------------------

    def add_node(self, node, layer, inputs, params=None, takes=None):
        """A node of ``layer`` reading ``inputs``, holding ``params``; ``takes`` the width of its input."""
        plain = node.op == "call_module" and "." not in node.target
        name = node.target if plain and node.target not in self.nodes and node.target != INPUT else node.name
        if name == INPUT:
            raise self.refused(node, f"would be the node {INPUT!r}, the name a DagNet keeps for its input: rename "
                                     "the submodule")
        self.nodes[name], self.fx[name], self.of[node] = (layer, inputs), node, name
        if params:
            self.tensors[name] = params
        if takes is not None:
            self.takes[name] = int(takes)

    def operand(self, node, keywords=()):
        """The one node ``node`` reads (``argument``)."""
        return self.read(node, self.argument(node, keywords))

    def argument(self, node, keywords=()):
        """``node``'s one argument, given alone or by the keyword ``input``, refusing other arguments and keywords
        but ``keywords``."""
        reads = "it called on one tensor alone"
        given = self.arguments(node, ("input",), keywords, reads)
        if "input" not in given:
            raise self.refused(node, f"takes no tensor: from_torch reads {reads}")
        return given["input"]

    def arguments(self, node, names, keywords, reads):
        """``node``'s arguments by name, its positional ones ``names`` in order; more of them, a name given twice, or
        a keyword but ``names`` and ``keywords`` is refused: from_torch ``reads`` another call."""
        given = {**dict(zip(names, node.args)), **node.kwargs}
        if len(node.args) > len(names) or len(given) < len(node.args) + len(node.kwargs) or \
                set(given) - {*names, *keywords}:
            raise self.refused(node, f"takes {len(node.args)} arguments and keywords {sorted(node.kwargs)}: "
                                     f"from_torch reads {reads}")
        return given

    def read(self, node, value):
        if not isinstance(value, self.torch.fx.Node):
            raise self.refused(node, f"reads {value!r}, not a tensor: a DagNet's nodes read other nodes' outputs")
        return self.of[value]

    def finish(self):
        if INPUT not in self.of.values():
            raise ValueError("the module takes no input: a DagNet has one")
        if self.returned == INPUT:
            raise ValueError("the module returns its input: a DagNet's output is a node of its own")
        read = {u: v for v, (_, inputs) in self.nodes.items() for u in inputs}  # each node -> one node reading it
        if self.returned in read:
            raise ValueError(f"the module returns {self.returned!r}, which node {read[self.returned]!r} reads: a "
                             "DagNet's output is a node that no node reads")
        for name in self.nodes:
            if name not in read and name != self.returned:
                raise self.refused(self.fx[name], "is read by no node and is not the output: a DagNet has one "
                                                  "output, the one node nothing reads; remove it")
        n_input = self.input_width()
        if n_input is None:
            raise ValueError("the input's width is not known: from_torch reads it from a Linear or LayerNorm that "
                             "reads the input, alone or through sums and concatenations")
        found = torch_io.dtypes(self.traced.parameters()) or torch_io.dtypes([self.torch.empty(0)])  # default's
        nodes = [(v, layer, inputs) for v, (layer, inputs) in self.nodes.items()]
        return n_input, nodes, found, self.tensors

    def input_width(self):
        """The input's width n, from the first node, in the graph's order, whose width constrains it: each node's
        width is alpha n + beta (a Dense node's its own, a concatenation's the sum of its inputs'); a Linear's or
        LayerNorm's input has its width, an Add's inputs one width. None where nothing constrains it; a
        ValueError names the node where no integer n >= 1 gives its widths one."""
        width = {INPUT: (1, 0)}
        for v, (layer, inputs) in self.nodes.items():
            widths = [width[u] for u in inputs]
            if v in self.takes:
                widths.append((0, self.takes[v]))
            if type(layer) is not Concat:  # the inputs and the width taken are one width
                for (alpha, beta), (other, more) in zip(widths, widths[1:]):
                    if alpha != other:
                        n, rest = divmod(more - beta, alpha - other)
                        if rest or n < 1:
                            what = (f"reads an input of width {_width(alpha, beta)} and takes {more}" if v in self.takes
                                    else f"adds terms of widths {_width(alpha, beta)} and {_width(other, more)}")
                            raise self.refused(self.fx[v], f"{what}: the widths conflict, no integer width n >= 1 "
                                                           "of the input makes them one")
                        return n
            width[v] = ((0, layer.n) if type(layer) is Dense else
                        tuple(map(sum, zip(*widths))) if type(layer) is Concat else widths[0])
        return None

    def refuse(self, node):
        raise self.refused(node, f"is not one from_torch reads: it reads {READS}")

    def refused(self, node, why):
        """A ValueError naming ``node`` and its op: ``why`` a DagNet cannot compute it."""
        if node.op == "call_module":
            op = f"call_module {node.target}: {type(self.traced.get_submodule(node.target)).__name__}"
        elif node.op == "call_function":
            where = getattr(node.target, "__module__", None) or ""
            where = {"_operator": "operator", "builtins": ""}.get(where, where)
            op = f"call_function {where + '.' if where else ''}{getattr(node.target, '__name__', node.target)}"
        else:
            op = f"{node.op} {node.target}"
        return ValueError(f"node {node.name!r} ({op}) {why}")


def _width(alpha, beta):
    """alpha n + beta, as it reads: "2n", "n + 3", "5"."""
    terms = ([f"{alpha if alpha != 1 else ''}n"] if alpha else []) + ([str(beta)] if beta or not alpha else [])
    return " + ".join(terms)
