"""Networks that are DAGs of layers (``layers``): nodes given by their inputs, one pass under a schedule.

Node numbering follows the MLP's: the input is node 1, the others 2, 3, ... in a topological order
(the given order where it is one), so that a chain of ``Dense`` layers is ``MLP``'s layers 2..L and
computes what it computes, bit for bit, with the same seed. Each node's output a_v is its layer's
forward of its inputs' outputs; backward, its adjoint abar_v = dC/da_v sums, in a fixed order (the
consumers' numbers, deepest first), the products its consumers hand back, and its error g_v (eq. (4)
at the output) gives its parameters' gradients. Where those run is the schedule's business
(``dag_schedules``); forward solvers other than the plain topological sweep: ``forward_solvers``.

Heights: ``level[v]``, the longest path from the input to v in edges (the input 0); the depth D is the
output's, the number of non-input nodes on the longest path (a chain of L layers: D = L - 1).
"""

import math
import numbers

import numpy as np

from .checks import check_batch, check_dtype, open_backend
from .dag_schedules import backward
from .functions import COSTS, choose
from .layers import Add, Dense, Layer

INPUT = "x"
"""The input node's name."""


class GraphNet:
    """A DAG of layers trained by SGD.

    Args:
        n_input: the input width n_1.
        nodes: ``(name, layer, inputs)`` triples, ``inputs`` a name or a list of names ("x" is the
            input); any order, validated: acyclic, widths that fit, one output node (the one node
            nothing reads).
        cost: ``"quadratic"`` or ``"cross_entropy"`` (the latter with a sigmoid ``Dense`` output).
        dtype, seed, backend: as for ``MLP``; parameters are drawn in node order, each layer's
            ``init`` from one ``numpy.random.default_rng(seed)``.

    ``params[v]`` holds node v's parameters by name, on the backend. ``stats`` holds the last pass's
    counters: ``stats["forward"]`` (a forward solver's, when one ran) and ``stats["backward"]``.
    """

    def __init__(self, n_input, nodes, cost="quadratic", dtype="float32", seed=0, backend="auto"):
        if isinstance(n_input, bool) or not isinstance(n_input, numbers.Integral) or n_input < 1:
            raise ValueError(f"n_input must be an integer width >= 1; got {n_input!r}")
        self.cost = choose("cost", cost, COSTS)
        self.dtype = check_dtype(dtype)
        self.layer, self.inputs = _check_nodes(nodes)
        self.order = _topological(self.layer, self.inputs)
        self.index = {INPUT: 1, **{v: i for i, v in enumerate(self.order, start=2)}}
        self.consumers = {v: [] for v in (INPUT, *self.order)}
        for v in self.order:
            for u in self.inputs[v]:
                self.consumers[u].append(v)
        sinks = [v for v in self.order if not self.consumers[v]]
        if len(sinks) != 1:
            raise ValueError(f"a GraphNet has one output node (one that no node reads); nodes {sinks} are read by none")
        self.output = sinks[0]
        self.n = {INPUT: int(n_input)}
        for v in self.order:
            try:
                self.n[v] = int(self.layer[v].size([self.n[u] for u in self.inputs[v]]))
            except ValueError as error:
                widths = [f"{u}: {self.n[u]}" for u in self.inputs[v]]
                raise ValueError(f"node {v!r} ({self.layer[v]!r}) with inputs of widths {widths}: {error}") from None
        out = self.layer[self.output]
        if self.cost == "cross_entropy" and not (isinstance(out, Dense) and out.activation == "sigmoid"):
            raise ValueError(f"cost 'cross_entropy' needs a Dense sigmoid output; node {self.output!r} is {out!r}")
        self.level = {INPUT: 0}
        for v in self.order:
            self.level[v] = 1 + max(self.level[u] for u in self.inputs[v])
        self.depth = self.level[self.output]
        self.backend, self._owns_backend = open_backend(backend)
        xp, rng = self.backend.xp, np.random.default_rng(seed)
        self.params = {}
        for v in self.order:
            drawn = self.layer[v].init(rng, [self.n[u] for u in self.inputs[v]])
            self.params[v] = {name: xp.asarray(drawn[name], dtype=self.dtype) for name in self.layer[v].params}
        chunk = self.backend.ops.SCRATCH
        self._scratch = {v: xp.empty(max(1, min(chunk, max(p.size for p in self.params[v].values()))), dtype=self.dtype)
                         if chunk and self.params[v] else None for v in self.order}
        self._step = xp.zeros(2, dtype=self.dtype)
        self.stats = {}
        self.backend.synchronize()

    def __repr__(self):
        return f"GraphNet({len(self.order)} nodes, depth {self.depth}, cost={self.cost!r}, dtype={self.dtype!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Wait for queued work; close the backend if this network created it."""
        if self._owns_backend:
            self.backend.close()
        else:
            self.backend.synchronize()

    @property
    def nodes(self):
        """The nodes with parameters, in order."""
        return [v for v in self.order if self.params[v]]

    def parameters(self):
        """Copies of every parameter: ``{node: {name: array}}``, as they are once queued steps have run."""
        return self._handed_out(lambda: {v: self.params[v] for v in self.nodes})

    def set_parameters(self, params):
        """Copy ``params`` (``{node: {name: array}}``, the shapes of ``parameters()``) in."""
        self.backend.synchronize()
        for v, named in params.items():
            for name, value in named.items():
                want = self.params[v][name].shape
                if tuple(value.shape) != want:
                    raise ValueError(f"{v}.{name} must have shape {want}; got {tuple(value.shape)}")
                self.params[v][name][...] = self.backend.xp.asarray(value, dtype=self.dtype)
        self.backend.synchronize()

    # -- public passes ------------------------------------------------------------------------------

    def feedforward(self, x, solver=None):
        """a^out, (n_out, B), for input ``x`` (n_1, B) or (n_1,): node by node, or by ``solver``
        (``forward_solvers.ForwardJacobi`` or ``ForwardNewton``)."""
        state = self._load(x, None)
        self._forward(state, solver)
        return self._handed_out(lambda: state.a[self.output])

    def backprop(self, x, y, schedule=None, solver=None):
        """Gradients summed over the batch, ``{node: {name: array}}``, under ``schedule`` (``Sequential()``
        by default, ``Leapfrog(k)`` or a ``dag_schedules`` one), the forward pass by ``solver``."""
        state = self._load(x, y)
        self._forward(state, solver)
        backward(self, state, schedule, None)
        return self._handed_out(lambda: {v: state.grads[v] for v in self.nodes})

    def sgd_step(self, x, y, eta, schedule=None, solver=None):
        """One SGD step: every parameter -= eta / B * its gradient; enqueued, not awaited."""
        if isinstance(eta, bool) or not isinstance(eta, numbers.Real) or not math.isfinite(eta) or eta < 0:
            raise ValueError(f"eta (the learning rate) must be a finite number >= 0; got {eta!r}")
        backend = self.backend
        state = self._load(x, y)
        backend.launch(backend.main, "eta / B", backend.ops.set_element, self._step, 0, eta / state.batch)
        self._forward(state, solver)
        if backward(self, state, schedule, self._step):  # unfused: the update after the join
            for v in self.nodes:
                backend.launch(backend.main, f"update[{v}]", self.update, state, v, self._step)

    def synchronize(self):
        self.backend.synchronize()

    # -- the pieces a schedule enqueues ---------------------------------------------------------------

    def forward_node(self, state, v):
        """a_v and what its products need, from its inputs' outputs."""
        state.a[v], state.saved[v] = self.layer[v].forward(self.backend, self.params[v], self.arguments(state, v))

    def arguments(self, state, v):
        return [state.a[u] for u in self.inputs[v]]

    def error(self, state, v):
        """g_v: eq. (4) at the output, else the layer's error of abar_v (its consumers' products summed)."""
        if v == self.output:
            state.g[v] = self.output_error(state.a[v], state.y, state.saved[v])
        else:
            state.g[v] = self.layer[v].error(self.backend, self.params[v], state.saved[v], self.adjoint(state, v))

    def output_error(self, a, y, saved):
        """Eq. (4): (a - y) * sigma'(z) (quadratic), a - y (cross-entropy); a - y before the layer's error
        for an output that is not ``Dense``."""
        layer = self.layer[self.output]
        if isinstance(layer, Dense):
            delta = self.backend.xp.empty_like(a)
            self.backend.ops.delta_output(delta, a, y, saved["sp"], self.cost)
            return delta
        return layer.error(self.backend, self.params[self.output], saved, a - y)

    def adjoint(self, state, v):
        """abar_v: as a solver left it in ``state.adjoints``, else the products handed back by v's
        consumers, summed deepest consumer first."""
        if v in state.adjoints:
            return state.adjoints[v]
        parts = [state.contributions[v][c] for c in sorted(state.contributions[v], key=self.index.get, reverse=True)]
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    def propagate(self, state, v):
        """Hand g_v's products back to v's inputs (the last read of v's parameters in the pass)."""
        products = self.layer[v].vjp_inputs(self.backend, self.params[v], self.arguments(state, v), state.saved[v],
                                            state.g[v])
        for u, product in zip(self.inputs[v], products):
            if u == INPUT:
                continue
            given = state.contributions[u]
            given[v] = given[v] + product if v in given else product  # v may read u more than once

    def gradients(self, state, v, step=None):
        """Node v's parameter gradients (with the SGD update by ``step`` when given)."""
        state.grads[v] = self.layer[v].vjp_params(self.backend, self.params[v], self.arguments(state, v),
                                                  state.saved[v], state.g[v])
        if step is not None:
            self.update(state, v, step)

    def update(self, state, v, step):
        for name in self.layer[v].params:
            self.backend.ops.sgd_update(self.params[v][name], state.grads[v][name], step, self._scratch[v])

    # -- internals ----------------------------------------------------------------------------------

    def _forward(self, state, solver):
        backend = self.backend
        if solver is not None:
            backend.launch(backend.main, f"forward[{solver!r}]", solver.solve, self, state)
            return
        for v in self.order:
            backend.launch(backend.main, f"forward[{v}]", self.forward_node, state, v)

    def _load(self, x, y):
        x = check_batch(self.backend.xp, "x", x, self.n[INPUT])
        state = State(x.shape[1])
        backend, xp = self.backend, self.backend.xp
        state.a[INPUT] = xp.empty(x.shape, dtype=self.dtype, order=backend.batch_order)
        backend.copy_in(backend.main, state.a[INPUT], x)
        if y is not None:
            y = check_batch(self.backend.xp, "y", y, self.n[self.output])
            if y.shape[1] != x.shape[1]:
                raise ValueError(f"x and y must hold the same number of samples; got {x.shape[1]} and {y.shape[1]}")
            state.y = xp.empty(y.shape, dtype=self.dtype, order=backend.batch_order)
            backend.copy_in(backend.main, state.y, y)
        state.contributions = {v: {} for v in self.order}
        backend.keep(state)
        return state

    def _handed_out(self, arrays):
        """Copies of what ``arrays()`` gives on the main stream (an array or nested dicts of them),
        complete on return."""
        copies = []
        self.backend.launch(self.backend.main, "copy_out", lambda: copies.append(_copy(arrays())))
        self.backend.synchronize()
        return copies[0]


class State:
    """One pass at batch size ``batch``: outputs ``a``, what forward saved, errors ``g``, the products
    handed back (``contributions[u][v]``: from consumer v to u) or ``adjoints`` solved for at once,
    gradients ``grads``, and ``y``."""

    def __init__(self, batch):
        self.batch = batch
        self.a, self.saved, self.g, self.grads, self.contributions, self.adjoints = {}, {}, {}, {}, {}, {}
        self.y = None


def chain(sizes, activation="sigmoid", output_activation=None, **options):
    """The ``GraphNet`` of ``MLP(sizes, activation, ...)``: nodes "2".."L", each a ``Dense`` of the one before."""
    out = output_activation or ("sigmoid" if options.get("cost") == "cross_entropy" else activation)
    nodes, previous = [], INPUT
    for l in range(2, len(sizes) + 1):
        nodes.append((str(l), Dense(sizes[l - 1], out if l == len(sizes) else activation), [previous]))
        previous = str(l)
    return GraphNet(sizes[0], nodes, **options)


def from_mlp(mlp):
    """The ``chain`` of ``mlp`` on its backend, with copies of its parameters."""
    net = chain(mlp.sizes, activation=mlp.activation, output_activation=mlp.output_activation, cost=mlp.cost,
                dtype=mlp.dtype, backend=mlp.backend)
    net.set_parameters({str(l): {"w": w, "b": b} for l, (w, b) in enumerate(zip(mlp.weights, mlp.biases), start=2)})
    return net


def residual(sizes, skip=2, activation="sigmoid", output_activation=None, **options):
    """``chain``, with a skip connection every ``skip`` hidden layers: node "s<l>" = a^l + a^{l-skip}
    wherever the two widths agree, and layer l + 1 reads it."""
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 1:
        raise ValueError(f"skip must be an integer >= 1 (hidden layers per skip connection); got {skip!r}")
    out = output_activation or ("sigmoid" if options.get("cost") == "cross_entropy" else activation)
    L, nodes, read, read_by = len(sizes), [], INPUT, {}
    for l in range(2, L + 1):
        read_by[l] = read
        nodes.append((str(l), Dense(sizes[l - 1], out if l == L else activation), [read]))
        read = str(l)
        block_input = read_by.get(l - skip + 1)  # what the first layer of the block ending at l read
        if l < L and (l - 1) % skip == 0 and block_input not in (None, INPUT):
            if sizes[int(block_input.lstrip("s")) - 1] == sizes[l - 1]:
                nodes.append((f"s{l}", Add(), [str(l), block_input]))
                read = f"s{l}"
    return GraphNet(sizes[0], nodes, **options)


def _copy(arrays):
    if isinstance(arrays, dict):
        return {key: _copy(value) for key, value in arrays.items()}
    return arrays.copy()


def _check_nodes(nodes):
    layer, inputs = {}, {}
    for entry in nodes:
        if not (isinstance(entry, (tuple, list)) and len(entry) == 3):
            raise TypeError(f"every node must be a (name, layer, inputs) triple; got {entry!r}")
        name, node_layer, node_inputs = entry
        if not isinstance(name, str) or not name or name == INPUT:
            raise ValueError(f"node names must be non-empty strings other than {INPUT!r}; got {name!r}")
        if name in layer:
            raise ValueError(f"node {name!r} is given twice")
        if not isinstance(node_layer, Layer):
            raise TypeError(f"node {name!r}: its layer must implement leapfrog_gpu.layers.Layer; got {node_layer!r}")
        node_inputs = [node_inputs] if isinstance(node_inputs, str) else list(node_inputs)
        if not node_inputs:
            raise ValueError(f"node {name!r} has no inputs")
        layer[name], inputs[name] = node_layer, node_inputs
    if not layer:
        raise ValueError("a GraphNet needs at least one node")
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

