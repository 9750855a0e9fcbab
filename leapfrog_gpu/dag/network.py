"""Networks that are DAGs of layers (``layers``): nodes given by their inputs, one pass under a schedule.

Node numbering follows the MLP's: the input is node 1, the others 2, 3, ... in a topological order
(the given order where it is one), so that a chain of ``Dense`` layers is ``MLP``'s layers 2..L and
computes what it computes, bit for bit, with the same seed. Each node's output a_v is its layer's
forward of its inputs' outputs; backward, its adjoint abar_v = dC/da_v sums, in a fixed order (the
consumers' numbers, deepest first), the products its consumers hand back, and its error g_v (eq. (4)
at the output) gives its parameters' gradients. Where those run is the schedule's business
(``schedules``, through the pass's ``plan``); forward solvers other than the plain topological sweep:
``forward``.

Heights: ``level[v]``, the longest path from the input to v in edges (the input 0); the depth D is the
output's, the number of non-input nodes on the longest path (a chain of L layers: D = L - 1).
"""

import inspect
import json
from collections.abc import Iterable, Mapping

from ..core import parameters, saving
from ..core.checks import check_batch, check_count, shown
from ..core.functions import COSTS, choose
from ..core.network import Network
from ..core.schedules import Leapfrog, Sequential
from ..core.torch_io import loaded, network_dtype, unread
from ..parallel import reducer
from . import torch_io
from .layers import LAYERS, Add, Dense, Layer, drawn_params, output_width, undefined
from .plan import INPUT, DagPlan, at_node
from .schedules import DagDoubling, DagJacobi, LevelSets


@saving.register
class DagNet(Network):
    """A DAG of layers trained by SGD.

    Args:
        n_input: the input width n_1.
        nodes: ``(name, layer, inputs)`` triples, ``inputs`` a name or a list of names ("x" is the
            input); any order, validated: acyclic, widths that fit, one output node (the one node
            nothing reads).
        cost: ``"quadratic"`` or ``"cross_entropy"`` (the latter with a sigmoid ``Dense`` output).
        dtype, seed, backend: as for ``MLP``; parameters are drawn in node order, each layer's
            ``init`` from one ``numpy.random.default_rng(seed)``.
        check_finite: check every gradient for NaN and Inf before the update and refuse it, as ``MLP``'s
            does, naming the deepest bad one (nodes in reverse order, e.g. ``"nabla_w[h2]"``).
        comm: a ``parallel.Communicator`` to train data-parallel over its ranks, as ``MLP``'s.

    The shape: ``order`` (the nodes but the input, topologically), ``inputs``, ``consumers``, ``layer``
    (each node's ``Layer``), ``n`` (widths), ``n_params`` (each node's number of parameters), ``level``,
    ``depth``, ``output``. ``parameters()`` gives ``{node: {name: array}}`` for the nodes with parameters
    (``nodes``). ``stats`` holds the last pass's
    counters: ``stats["forward"]`` (a forward solver's, when one ran) and ``stats["backward"]``.
    """

    NOUN = "a DagNet"
    SCHEDULES = (Sequential, Leapfrog, LevelSets, DagJacobi, DagDoubling)
    SOLVERS = "None (the forward node by node), ForwardJacobi() or ForwardNewton()"
    CAPTURE_REFUSALS = {"cupy": "a DAG's layers allocate their outputs as they run, which a CUDA graph's capture "
                                "refuses; use graph=False"}
    BASELINE = Sequential  # the schedule the others are measured against

    def __init__(self, n_input, nodes, cost="quadratic", dtype="float32", seed=0, backend="auto", check_finite=False,
                 comm=None):
        with reducer.building(comm):  # a rank that refuses an argument leaves none waiting for it in the comparison
            self._build_graph(n_input, nodes, cost)
            rng = parameters.generator(seed)
            super().__init__(dtype, backend, check_finite)
            self._params = {}
            try:
                for v in self.order:
                    sizes = [self.n[u] for u in self.inputs[v]]
                    with at_node(v):
                        self._params[v] = drawn_params(self.layer[v], rng, sizes, self.dtype, self.backend.xp)
            except BaseException:  # a layer's init refused: the backend's threads end now, not at a collection
                self.close()
                raise
        self.n_params = {v: sum(p.size for p in self._params[v].values()) for v in self.order}
        self.stats = {}
        self._join(comm)

    def _build_graph(self, n_input, nodes, cost):
        """The graph of ``nodes`` on ``n_input`` inputs, each part checked as it is built (a ValueError or TypeError
        says what is wrong): its cost, layers and inputs, order, consumers, widths, output and levels."""
        n_input = check_count("n_input", n_input)
        self.cost = choose("cost", cost, COSTS)
        self.layer, self.inputs = _check_nodes(nodes)
        self._order = tuple(_topological(self.layer, self.inputs))
        self.index = {INPUT: 1, **{v: i for i, v in enumerate(self.order, start=2)}}
        self.consumers = {v: [] for v in (INPUT, *self.order)}
        for v in self.order:
            for u in self.inputs[v]:
                self.consumers[u].append(v)
        sinks = [v for v in self.order if not self.consumers[v]]
        if len(sinks) != 1:
            raise ValueError(f"a DagNet has one output node (one that no node reads); nodes {sinks} are read by none")
        self.output = sinks[0]
        self.n = {INPUT: int(n_input)}
        for v in self.order:
            sizes = [self.n[u] for u in self.inputs[v]]
            try:
                n = self.layer[v].size(sizes)
            except (TypeError, ValueError) as error:
                widths = [f"{u}: {self.n[u]}" for u in self.inputs[v]]
                kind = ValueError if isinstance(error, ValueError) else TypeError
                raise kind(f"node {v!r} ({self.layer[v]!r}) with inputs of widths {widths}: {error}") from error
            with at_node(v):
                self.n[v] = output_width(self.layer[v], sizes, n)
        out = self.layer[self.output]
        if self.cost == "cross_entropy" and not (isinstance(out, Dense) and out.activation == "sigmoid"):
            raise ValueError(f"cost 'cross_entropy' needs a Dense sigmoid output; node {self.output!r} is {out!r}")
        self.level = {INPUT: 0}
        for v in self.order:
            self.level[v] = 1 + max(self.level[u] for u in self.inputs[v])
        self.depth = self.level[self.output]

    def __repr__(self):
        comm = "" if self.comm is None else f", comm={self.comm!r}"
        return (f"DagNet({len(self.order)} nodes, depth {self.depth}, cost={self.cost!r}, dtype={self.dtype!r}, "
                f"backend={self.backend!r}{comm})")

    @property
    def order(self):
        """The nodes but the input, in topological order: a new list, whose changes reach no network."""
        return list(self._order)

    @property
    def nodes(self):
        """The nodes with parameters, in order."""
        return [v for v in self.order if self._params[v]]

    def _live(self):
        return {v: self._params[v] for v in self.nodes}

    def structure(self):
        return {**super().structure(), "cost": self.cost,
                "nodes": [[v, repr(self.layer[v]), repr(self.layer[v].options()), self.inputs[v]]
                          for v in self.order]}

    def architecture(self):
        """What builds this network again (``core.saving``), JSON-able: its input width, its nodes as ``[name, layer,
        options, inputs]`` (the layer's class name and ``Layer.options()``), its cost, dtype and ``check_finite``. A
        TypeError names a node of one's own ``Layer`` whose class takes the name of one of ``layers.LAYERS``, or
        whose options are not JSON-able or do not build it again (``_check_rebuilt``)."""
        for v in self.order:
            kind = type(self.layer[v])
            if kind.__name__ in LAYERS and LAYERS[kind.__name__] is not kind:
                raise TypeError(f"node {v!r} is a {kind.__module__}.{kind.__qualname__}, which has the name of "
                                f"leapfrog_gpu's {kind.__name__}: give its class another name to save it")
            try:
                json.dumps(self.layer[v].options())
            except (TypeError, ValueError) as error:
                raise TypeError(f"node {v!r}: the options() of its {kind.__name__}, which build it again, must be "
                                f"JSON-able (numbers, strings, lists, dicts): {error}") from None
            _check_rebuilt(v, self.layer[v])
        return {"n_input": self.n[INPUT], "cost": self.cost, "dtype": self.dtype, "check_finite": self.check_finite,
                "nodes": [[v, type(self.layer[v]).__name__, self.layer[v].options(), self.inputs[v]]
                          for v in self.order]}

    @classmethod
    def from_architecture(cls, architecture, backend, layers=()):
        """A network of ``architecture`` (``architecture()``'s) on ``backend``, its parameters drawn by seed 0; a node
        of one's own ``Layer`` is built by its class in ``layers``, found by its name (a ``saving.MissingLayer``,
        ``(what, remedy)``, where none is)."""
        known, given = {**{kind.__name__: kind for kind in layers}, **LAYERS}, architecture.get("nodes", ())
        if missing := list(dict.fromkeys(layer for _, layer, _, _ in given if layer not in known)):
            name = next(name for name, layer, _, _ in given if layer == missing[0])
            others = f" (and {len(missing) - 1} more of one's own)" if len(missing) > 1 else ""
            needed = list(dict.fromkeys(layer for _, layer, _, _ in given if layer not in LAYERS))  # given ones too
            raise saving.MissingLayer(f"node {name!r} is a {missing[0]}, a Layer of one's own{others}",
                                      f"give {'its class' if len(needed) == 1 else 'the classes of its own'} to "
                                      f"load: load(path, layers=[{', '.join(needed)}])")
        nodes = [(name, known[layer](**options), inputs) for name, layer, options, inputs in given]
        return cls(**{**architecture, "nodes": nodes}, backend=backend)

    def _label(self, v, name):
        return f"{name} of node {v!r}"

    def to_torch(self):
        """A ``torch.fx.GraphModule`` computing ``feedforward`` on rows: ``net.to_torch()(x.T).T`` is
        ``net.feedforward(x)`` (x (n_1, B)). One call per node, in ``order``: a Dense node's ``Linear`` and
        activation and a LayerNorm node's ``torch.nn.LayerNorm`` registered under the node's name, Add a sum,
        Concat ``torch.cat`` (``leapfrog_gpu.dag.torch_io``). Its parameters are a copy, as they are once the
        enqueued steps have run: later steps do not change them, and training the module does not change the
        network. A TypeError names a node of a layer it cannot translate, a ValueError a node whose name torch
        cannot keep (``torch_io.to_module``); ``from_torch`` reads the module back."""
        return torch_io.to_module([(v, self.layer[v], self.inputs[v]) for v in self.order], self.output,
                                  self.parameters())

    @classmethod
    def from_torch(cls, module, cost="quadratic", backend="auto", dtype=None, **options):
        """A network computing ``module`` on columns: a ``torch.nn.Module`` (traced by
        ``torch.fx.symbolic_trace``) or a ``torch.fx.GraphModule`` (read as it is, ``to_torch``'s included) of
        one input and one output, whose calls are ``Linear`` modules (each taking the sigmoid, tanh or relu
        applied to its output alone into its ``Dense`` node), ``LayerNorm`` modules, sums (``+``) and
        ``torch.cat`` along the features (dim 1 or -1): one node per call, named after its module (a sum or
        a concatenation after its fx node).
        Parameters are copied into the network's own buffers (training it never writes the module); ``dtype``
        defaults to the module's; ``options`` are the other arguments of ``DagNet``. Anything else is refused
        with a ValueError naming the node and its op (``leapfrog_gpu.dag.torch_io.read_module``)."""
        n_input, nodes, found, tensors = torch_io.read_module(module)
        options = unread(cls, options, "n_input", "nodes")
        return loaded(cls(n_input, nodes, cost, network_dtype(dtype, found), backend=backend, **options), tensors)

    # -- public passes ------------------------------------------------------------------------------

    def feedforward(self, x, solver=None):
        """a^out, (n_out, B), for input ``x`` (n_1, B) or (n_1,): node by node, or by ``solver``
        (``ForwardJacobi`` or ``ForwardNewton``)."""
        return super().feedforward(x, solver)

    def plan(self, batch):
        """The ``plan.DagPlan`` of this network at ``batch`` columns: made on first use, kept while it is among the last
        used (``core.network.PLANS``)."""
        batch = check_count("batch", batch)
        return self._plan(batch, lambda: DagPlan(self, batch, self._params, self._controls))

    def _outputs(self):
        out = self.layer[self.output]
        return self.n[self.output], out.activation if isinstance(out, Dense) else repr(out)

    def _check_batch(self, x, y):
        """``x`` (n_1, B) and ``y`` (n_out, B) (or None) as 2-D arrays of the same B."""
        x = check_batch(self.backend.xp, "x", x, self.n[INPUT], self.dtype)
        if y is not None:
            y = check_batch(self.backend.xp, "y", y, self.n[self.output], self.dtype)
            if y.shape[1] != x.shape[1]:
                raise ValueError(f"x and y must hold the same number of samples; got {x.shape[1]} and {y.shape[1]}")
        return x, y


def chain(sizes, activation="sigmoid", output_activation=None, **options):
    """The ``DagNet`` of ``MLP(sizes, activation, ...)``: nodes "2".."L", each a ``Dense`` of the one before."""
    out = output_activation or ("sigmoid" if options.get("cost") == "cross_entropy" else activation)
    nodes, previous = [], INPUT
    for l in range(2, len(sizes) + 1):
        nodes.append((str(l), Dense(sizes[l - 1], out if l == len(sizes) else activation), [previous]))
        previous = str(l)
    return DagNet(sizes[0], nodes, **options)


def from_mlp(mlp):
    """The ``chain`` of ``mlp`` on its backend, with copies of its parameters."""
    net = chain(mlp.sizes, activation=mlp.activation, output_activation=mlp.output_activation, cost=mlp.cost,
                dtype=mlp.dtype, backend=mlp.backend)
    net.set_parameters({str(l): {"w": w, "b": b} for l, (w, b) in enumerate(zip(mlp.weights, mlp.biases), start=2)})
    return net


def residual(sizes, skip=2, activation="sigmoid", output_activation=None, **options):
    """``chain``, with the skip connections ``skips(sizes, skip)``: node "s<l>" = a^l + the block's input, and
    layer l + 1 reads it."""
    made = skips(sizes, skip)
    out = output_activation or ("sigmoid" if options.get("cost") == "cross_entropy" else activation)
    L, nodes, read = len(sizes), [], INPUT
    for l in range(2, L + 1):
        nodes.append((str(l), Dense(sizes[l - 1], out if l == L else activation), [read]))
        read = str(l)
        if l in made:
            nodes.append((f"s{l}", Add(), [str(l), made[l]]))
            read = f"s{l}"
    return DagNet(sizes[0], nodes, **options)


def skips(sizes, skip=2):
    """``{l: u}``, the skip connections of ``residual(sizes, skip)``: the hidden layers in blocks of ``skip`` from
    layer 2 on, the block ending at layer l adds its input, the output of node u (a layer "j" or a skip "s<j>"), to
    a^l wherever the two widths agree; the first block, which reads the network's input, and a block ending at the
    output layer add none."""
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 1:
        raise ValueError(f"skip must be an integer >= 1 (hidden layers per skip connection); got {shown(skip)}")
    L, made, read, read_by = len(sizes), {}, INPUT, {}
    for l in range(2, L + 1):
        read_by[l], read = read, str(l)
        block_input = read_by.get(l - skip + 1)  # what the first layer of the block ending at l read
        if l < L and (l - 1) % skip == 0 and block_input not in (None, INPUT) and \
                sizes[int(block_input.lstrip("s")) - 1] == sizes[l - 1]:
            made[l], read = block_input, f"s{l}"
    return made


def _check_rebuilt(v, layer):
    """A TypeError where ``type(layer)(**layer.options())``, as ``load`` builds node v's layer, fails, or builds one
    whose settings differ: an attribute that both hold, named as an argument of its constructor, and whose values are
    what JSON writes (numbers, strings, bools, None, and lists, tuples and dicts of them) and differ as JSON reads
    them back (a tuple as a list, 2 as 2.0; a layer that keeps the base ``Layer.options()``, none, would be loaded
    with the defaults)."""
    kind, options = type(layer), layer.options()
    remedy = "define options() to return the keyword arguments that build it, as load builds it"
    try:
        rebuilt = kind(**options)
    except Exception as error:  # the constructor of one's own layer: whatever it raises, load would raise too
        raise TypeError(f"node {v!r}: {kind.__name__}(**{options!r}) fails ({error}): {remedy}") from None
    given, again = getattr(layer, "__dict__", {}), getattr(rebuilt, "__dict__", {})
    try:
        arguments = inspect.signature(kind).parameters
    except (TypeError, ValueError):  # a constructor Python cannot read: nothing to compare
        arguments = ()
    for name in (name for name in arguments if name in given and name in again):
        written = [_as_json(value) for value in (given[name], again[name])]
        if None not in written and written[0] != written[1] and json.loads(written[0]) != json.loads(written[1]):
            raise TypeError(f"node {v!r}: {kind.__name__}(**{options!r}) builds one whose {name} is {again[name]!r}, "
                            f"not {given[name]!r}: {remedy}")


def _as_json(value):
    """``value`` as JSON writes it, or None where JSON cannot."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _check_nodes(nodes):
    if isinstance(nodes, (str, Mapping)) or not isinstance(nodes, Iterable):
        raise TypeError(f"nodes must be a list of (name, layer, inputs) triples; got {type(nodes).__name__}")
    layer, inputs = {}, {}
    for entry in nodes:
        if not (isinstance(entry, (tuple, list)) and len(entry) == 3):
            raise TypeError(f"every node must be a (name, layer, inputs) triple; got {shown(entry)}")
        name, node_layer, node_inputs = entry
        if not isinstance(name, str) or not name or name == INPUT:
            raise (ValueError if isinstance(name, str) else TypeError)(
                f"node names must be non-empty strings other than {INPUT!r}; got {shown(name)}")
        if name in layer:
            raise ValueError(f"node {name!r} is given twice")
        if not isinstance(node_layer, Layer):
            raise TypeError(f"node {name!r}: its layer must implement leapfrog_gpu.dag.Layer; got {shown(node_layer)}")
        if type(node_layer).forward is Layer.forward:  # said now, not at the first pass
            raise TypeError(f"node {name!r}: {undefined(node_layer, 'forward(backend, params, inputs)')}")
        if not (isinstance(node_inputs, str) or isinstance(node_inputs, (list, tuple))
                and all(isinstance(u, str) for u in node_inputs)):
            raise TypeError(f"node {name!r}: its inputs must be a node's name or a list of names ({INPUT!r} is "
                            f"the input); got {shown(node_inputs)}")
        node_inputs = [node_inputs] if isinstance(node_inputs, str) else list(node_inputs)
        if not node_inputs:
            raise ValueError(f"node {name!r} has no inputs")
        layer[name], inputs[name] = node_layer, node_inputs
    if not layer:
        raise ValueError("a DagNet needs at least one node")
    for name, given in inputs.items():
        unknown = [u for u in given if u != INPUT and u not in layer]
        if unknown:
            raise ValueError(f"node {name!r} reads unknown nodes {unknown} (the input is {INPUT!r})")
    return layer, inputs


def _topological(layer, inputs):
    """The nodes in a topological order, the given one where possible; a cycle raises and names itself."""
    order, done = [], {INPUT}
    pending = list(layer)
    while pending:
        ready = next((v for v in pending if all(u in done for u in inputs[v])), None)
        if ready is None:
            raise ValueError(f"the nodes form a cycle: {' -> '.join(_cycle(pending, inputs))}")
        pending.remove(ready)
        order.append(ready)
        done.add(ready)
    return order


def _cycle(pending, inputs):
    """A cycle among ``pending`` nodes (each reads at least one pending node), as a list of names."""
    seen, v = [], pending[0]
    while v not in seen:
        seen.append(v)
        v = next(u for u in inputs[v] if u in pending)
    return list(reversed(seen[seen.index(v):] + [v]))

