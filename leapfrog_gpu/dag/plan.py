"""A DAG network's pass at one batch size: its buffers and events, and the pieces its schedules enqueue.

What the MLP's ``plan`` is to the MLP: a ``core.plan.Plan``, made once per batch size (``DagNet.plan``).
A pass fills, node by node, ``a`` (outputs, the input's under ``"x"``), ``saved`` (what each layer's
products need), ``g`` (errors), ``contributions`` (``contributions[u][v]``: the product consumer v hands
back to u), ``adjoints`` (abar_v solved for at once, by a solver) and ``grads``; ``load`` clears them on
the main stream, behind the steps enqueued before.

The DAG's schedules (``schedules``) speak to a plan through seven names and nothing else of the network:
its shape, ``order`` (the non-input nodes, topologically), ``depth``, ``consumers`` and ``n`` (widths);
``node`` (one node of the reverse order: g_v, v's products to its inputs, and v given on to ``core.driver``
once its gradients may run), ``blocks`` (N's blocks and the output's g) and ``counters`` (flops and bytes
of the sequential order). A solver leaves abar_v in ``adjoints``.
"""

import contextlib
import weakref

import numpy as np

from ..core import plan
from ..core.checks import shown
from ..core.schedules import Leapfrog, Sequential
from ..parallel.reducer import Reducer
from .blocks import Block, from_products
from .layers import Add, Dense, input_products, layer_output, param_products

INPUT = "x"
"""The input node's name."""


def forward_node(net, v, params, inputs):
    """``(a_v, saved)``: node v's layer's forward of ``inputs`` (each (n_u, B)) on ``params``, v's parameters. A
    ValueError names a layer whose output is not (n_v, B), n_v its ``size`` (the nodes that read it would read
    past its end), or not of the network's dtype (a node reading it would fail in its kernels, naming none); v is
    named in a ValueError or a TypeError of its forward (``layers.layer_output``)."""
    try:
        a, saved = layer_output(net.layer[v], net.backend, params, inputs)
    except (TypeError, ValueError) as error:
        raise named(v, error) from error
    want = (net.n[v], inputs[0].shape[1])
    got = tuple(a.shape) if hasattr(a, "shape") else f"none (a {type(a).__name__})"
    if got != want:
        raise ValueError(f"node {v!r}: {net.layer[v]!r}.forward returned an output of shape {got}, not (n, B) = "
                         f"{want} (n: its size()): make forward return n rows of B columns")
    if a.dtype != net.dtype:
        raise ValueError(f"node {v!r}: {net.layer[v]!r}.forward returned an output of dtype {a.dtype}, not the "
                         f"network's {net.dtype}: make forward compute in its inputs' dtype")
    return a, saved


@contextlib.contextmanager
def at_node(v):
    """A ValueError or a TypeError of the block, about node v's layer, raised again naming v (``named``)."""
    try:
        yield
    except (TypeError, ValueError) as error:
        raise named(v, error) from error


def named(v, error):
    """``error``, a ValueError or a TypeError about node v's layer, as one naming v: what ``at_node`` raises, for a
    pass's hot path to raise from a plain ``try`` (no context manager to enter and leave at every node)."""
    return (ValueError if isinstance(error, ValueError) else TypeError)(f"node {v!r}: {error}")


def vjp_inputs(net, v, params, inputs, saved, g):
    """Node v's products to its inputs from its error g, one (n_u, B) per input (``layers.input_products``: a
    ValueError, here naming v, where its layer gives another number or shape)."""
    try:
        return input_products(net.layer[v], net.backend, params, inputs, saved, g)
    except (TypeError, ValueError) as error:
        raise named(v, error) from error


def jacobian(net, v, params, inputs, saved, i):
    """Node v's Jacobian block of its input i (``Layer.jacobian``); a ValueError of its layer's names v (one built
    from products that are not one per input)."""
    with at_node(v):
        block = net.layer[v].jacobian(net.backend, params, inputs, saved, i)
        if not isinstance(block, Block):
            given = "an array" if hasattr(block, "shape") else shown(block)
            raise TypeError(f"{net.layer[v]!r}.jacobian returned {given}: return a block, DenseBlock (B, n, n_i), "
                            "Diagonal, Factored or Slice")
        n_i, batch = inputs[i].shape
        if (block.batch, *block.shape) != (batch, net.n[v], n_i):
            raise ValueError(f"{net.layer[v]!r}.jacobian of input {i} returned a block of (B, n, n_i) = "
                             f"{(block.batch, *block.shape)}; this node's is {(batch, net.n[v], n_i)}: one (n, n_i) "
                             "matrix per sample of the batch")
        return block


class DagPlan(plan.Plan):
    """The pass of ``net`` (a ``DagNet``) at ``batch`` columns, on its parameters ``params``, with its
    step ``controls``."""

    def __init__(self, net, batch, params, controls):
        super().__init__(net, batch)
        self.net, self.params, self.controls = weakref.proxy(net), params, controls  # weak: the network holds its plans
        self.order, self.depth, self.consumers, self.n = net.order, net.depth, net.consumers, net.n
        self.x, self.y = self.columns(net.n[INPUT]), self.columns(net.n[net.output])
        self.scratch = {v: self.make_scratch(max(p.size for p in params[v].values())) if params[v] else None
                        for v in net.order}
        if net.comm is not None:
            self.reducer = Reducer(self, net.comm, net.gradient_layout())
        self._empty()
        self.allocated()

    def index(self, v):
        return self.net.index[v]

    def last_reader(self, v):
        """``node`` gives a fused node on once its products, the last read of its parameters, are enqueued."""
        return v

    def clear(self):
        """Forget the last pass (run on the main stream, behind it). On a GPU that run is its enqueue, and
        the backend keeps the last pass's arrays until the work that reads them has run."""
        self.backend.keep(self.a, self.saved, self.g, self.grads, self.contributions, self.adjoints)
        self._empty()

    def _empty(self):
        self.a, self.saved, self.grads = {INPUT: self.x}, {}, {}
        self._empty_backward()

    def clear_backward(self):
        """Forget the last backward pass's errors and adjoints, so that a backward pass run again on the same
        forward pass (a calibration's) sums its products afresh; run on the main stream, as ``clear``."""
        self.backend.keep(self.g, self.contributions, self.adjoints)
        self._empty_backward()

    def _empty_backward(self):
        self.g, self.adjoints = {}, {}
        self.contributions = {v: {} for v in self.order}

    def load(self, x, y=None):
        """Enqueue on the main stream: clear the last pass, copy ``x`` (n_1, B) and ``y`` (n_out, B), if given.
        A batch of no column (this rank's empty share, data-parallel) copies nothing and marks the plan
        ``empty``."""
        backend = self.backend
        backend.launch(self.main, "clear", self.clear)
        self.empty = not x.shape[1]
        if self.empty:
            return
        backend.copy_in(self.main, self.x, x)
        if y is not None:
            backend.copy_in(self.main, self.y, y)

    def add_zeros(self):
        """This rank's share of the batch is empty: zero gradients, added to every sum across ranks."""
        self.backend.launch(self.main, "gradients", self._zero_gradients)
        self.reducer.add_zeros()

    def _zero_gradients(self):
        self.grads.update(self.reducer.views)

    # -- forward ------------------------------------------------------------------------------------

    def forward(self, solver=None):
        """Enqueue the forward pass on the main stream: node by node, or by ``solver`` in one launch."""
        backend = self.backend
        if solver is not None:
            backend.launch(self.main, f"forward[{solver!r}]", solver.solve, self.net, self)
            return
        for v in self.order:
            backend.launch(self.main, f"forward[{v}]", self._forward_node, v)

    def _forward_node(self, v):
        """a_v and what its products need, from its inputs' outputs."""
        self.a[v], self.saved[v] = forward_node(self.net, v, self.params[v], self._arguments(v))

    def _arguments(self, v):
        return [self.a[u] for u in self.net.inputs[v]]

    # -- what the schedules enqueue -----------------------------------------------------------------

    def chain(self, schedule, controls=None):
        """The reverse topological order, node by node, for ``Sequential()`` and ``Leapfrog(k)``; a DAG
        schedule's own solve otherwise. Returns the counters of the pass, also the network's
        ``stats["backward"]``."""
        self.backend.launch(self.main, "clear_backward", self.clear_backward)
        if type(schedule) in (Sequential, Leapfrog):
            for v in reversed(self.order):
                yield from self.node(v, controls)
            counters = self.counters()
            stats = {"rounds": counters["sequential_rounds"], "flops": counters["sequential_flops"],
                     "bytes": counters["sequential_bytes"], "memory_bytes": 0, **counters}
        else:
            yield from schedule.chain(self, controls)
            stats = schedule.stats
            stats.update(self.counters())  # the solvers add what they count as they run
        self.net.stats["backward"] = stats
        return stats

    def node(self, v, controls=None, products=True):
        """Enqueue on the main stream g_v, then (``products``) v's products to its inputs; give v on (a node
        with parameters) once its gradients may run: behind g_v or, with ``controls`` (a fused update),
        behind v's products, the last read of v's parameters in the pass."""
        launch, main = self.backend.launch, self.main
        launch(main, f"delta[{v}]", self._error, v)
        if controls is None and self.params[v]:
            yield v
        if products and any(u in self.net.layer for u in self.net.inputs[v]):
            launch(main, f"vjp[{v}]", self._propagate, v)
        if controls is not None and self.params[v]:
            yield v

    def gradients(self, stream, v, controls=None):
        """Enqueue node v's parameter gradients on ``stream``, then its update by ``controls`` when given."""
        self.backend.launch(stream, f"gradients[{v}]", self._gradients, v)
        if controls is not None:
            self.update(stream, v, controls)

    def gradient_arrays(self):
        """``{node: {name: gradient}}`` of the nodes with parameters."""
        return {v: self.grads[v] for v in self.units}

    def output(self):
        """a^out, (n_out, B)."""
        return self.a[self.net.output]

    def blocks(self):
        """``(blocks, e)``: N's blocks {(u, v): (B, n_u, n_v)}, J_{v,u}^T for v below the output and the
        matrix of g -> (its product to u) for the output, and e = {output: g} (eq. (4)); run on the main
        stream after the forward pass."""
        net, xp, blocks = self.net, self.xp, {}
        for v in self.order:
            args = self._arguments(v)
            params, saved = self.params[v], self.saved[v]
            for i, u in enumerate(net.inputs[v]):
                if u not in net.layer:  # the input
                    continue
                if v == net.output:
                    block = from_products(xp, lambda g, i=i: vjp_inputs(net, v, params, args, saved, g)[i],
                                          self.n[v], args[i])
                else:
                    block = jacobian(net, v, params, args, saved, i)
                matrix = block.dense().transpose(0, 2, 1)
                blocks[u, v] = blocks[u, v] + matrix if (u, v) in blocks else matrix
        return blocks, {net.output: self.output_error()}

    def counters(self):
        """Flops and bytes of the adjoint system in the sequential order: each node's error and products.

        A node with parameters counts 2 n n_i B per input (a matrix product) and n B (its error); one
        without, n_i B per input if it is an Add, else nothing (Concat: a copy)."""
        net, flops, moved = self.net, 0, 0
        for v in self.order:
            n, widths = self.n[v], [self.n[u] for u in net.inputs[v] if u in net.layer]
            if self.params[v]:
                flops += sum(2 * n * m * self.batch for m in widths) + n * self.batch
                moved += sum(p.size for p in self.params[v].values()) + 3 * n * self.batch + sum(widths) * self.batch
            else:
                flops += sum(widths) * self.batch if isinstance(net.layer[v], Add) else 0
                moved += n * self.batch + sum(widths) * self.batch
        itemsize = np.dtype(self.dtype).itemsize
        return {"sequential_rounds": len(self.order), "sequential_flops": flops, "sequential_bytes": moved * itemsize}

    # -- the pieces, run on a stream --------------------------------------------------------------------

    def output_error(self):
        """Eq. (4): (a - y) * sigma'(z) (quadratic), a - y (cross-entropy); a - y before the layer's error
        for an output that is not ``Dense``."""
        out = self.net.output
        a, saved, layer = self.a[out], self.saved[out], self.net.layer[out]
        if isinstance(layer, Dense):
            delta = self.xp.empty_like(a)
            self.backend.ops.delta_output(delta, a, self.y, saved["sp"], self.net.cost)
            return delta
        return layer.error(self.backend, self.params[out], saved, a - self.y)

    def _error(self, v):
        """g_v: eq. (4) at the output, else the layer's error of abar_v."""
        if v == self.net.output:
            self.g[v] = self.output_error()
        else:
            self.g[v] = self.net.layer[v].error(self.backend, self.params[v], self.saved[v], self._adjoint(v))

    def _adjoint(self, v):
        """abar_v: as a solver left it in ``adjoints``, else the products handed back by v's consumers,
        summed deepest consumer first."""
        if v in self.adjoints:
            return self.adjoints[v]
        given = self.contributions[v]
        parts = [given[c] for c in sorted(given, key=self.net.index.get, reverse=True)]
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    def _propagate(self, v):
        """Hand g_v's products back to v's inputs (the last read of v's parameters in the pass)."""
        products = vjp_inputs(self.net, v, self.params[v], self._arguments(v), self.saved[v], self.g[v])
        for u, product in zip(self.net.inputs[v], products):
            if u == INPUT:
                continue
            given = self.contributions[u]
            given[v] = given[v] + product if v in given else product  # v may read u more than once

    def _gradients(self, v):
        """Node v's parameter gradients (``layers.param_products``: a ValueError, here naming v, where its layer gives
        other names or shapes than its parameters', raised before any update of an unfused step)."""
        try:
            grads = param_products(self.net.layer[v], self.backend, self.params[v], self._arguments(v),
                                   self.saved[v], self.g[v])
        except (TypeError, ValueError) as error:
            raise named(v, error) from error
        if self.reducer is not None:  # into the buffer the sums across ranks read
            for name, gradient in grads.items():
                self.reducer.views[v][name][...] = gradient
            grads = self.reducer.views[v]
        self.grads[v] = grads

    def check_gradients(self, controls):
        """Enqueue on the main stream the check of every node's gradients for NaN and Inf, nodes in reverse
        order (the deepest first), which leaves the refusal code of the first bad one in ``controls``."""
        codes = [(v, name, controls.code(f"nabla_{name}[{v}]")) for v in reversed(self.order)
                 for name in self.params[v]]
        self.backend.launch(self.main, "check_finite", self._check, controls.array, codes)

    def _check(self, controls, codes):
        for v, name, code in codes:
            self.backend.ops.check_finite(controls, self.grads[v][name], code)

    def update(self, stream, v, controls):
        """Enqueue the update of node v's parameters by their gradients and ``controls``' optimizer, on
        ``stream``."""
        slots = {name: controls.slots(v, name) for name in self.net.layer[v].params}
        self.backend.launch(stream, f"update[{v}]", self._update, v, controls.optimizer, slots, controls.array)

    def _update(self, v, optimizer, slots, controls):
        for name in self.net.layer[v].params:
            optimizer.apply(self.backend.ops, self.params[v][name], self.grads[v][name], slots[name], controls,
                            self.scratch[v])
