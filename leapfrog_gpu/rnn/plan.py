"""One recurrent network at one sequence length tau and batch size B: its buffers, events and launches.

A ``core.plan.Plan``, as the MLP's is. Every per-layer buffer holds all time steps as an (n_l, tau, B)
array: time step t (1-based) is the (n_l, B) view ``buffer[:, t - 1]``, and the whole sequence the
(n_l, tau*B) view ``flat(buffer)``. Both are contiguous in the backend's order for minibatches
(``sequence``): on the host, batch-major, so that a step is a Fortran-contiguous (n_l, B) block that
BLAS writes in place. What does not depend on the time recursion is then one product over tau*B
columns: the input half w^l a^{l-1} + b^l of every z^{l,t}, sigma'(z^l), the part (w^{l+1})^T delta^{l+1}
of every delta^{l,t}, the output layer (2)-(4), nabla_w^l, nabla_u^l and nabla_b^l (sums over time and
batch at once). The recursion over t (u^l a^{l,t-1} forwards, (u^l)^T delta^{l,t+1} backwards) runs step
by step, each step one BLAS call and its elementwise half, bound once (``recursion``).

A gated layer (``cells``: a GRU or an LSTM of G gates) holds G·n_l rows in z^l and delta^l (its gates'
pre-activations and their deltas) and n_l in a^l; ``delta_h[l]`` receives (w^{l+1})^T delta^{l+1} and
``delta_u[l]`` is what u^l sees of delta^l (both delta^l itself for the Elman cell, which has no sigma' of
its own but ``sp``).

The output layer L has a time step per output: tau of them for ``output="every"``, one (t = tau) for
``"last"``, where ``a_last`` holds a contiguous copy of a^{L-1,tau}. Buffers start filled with NaN, so
that a read before its write shows in the result.
"""

import weakref

import numpy as np

from ..backends import ops_numpy
from ..core import plan
from ..parallel.reducer import Reducer
from .cells import KINDS
from .recursion import Recursion
from .schedules import resolve


def flat(buffer):
    """The (n, tau*B) view of an (n, tau, B) buffer."""
    return buffer.reshape(buffer.shape[0], -1)


class RNNPlan(plan.Plan):
    """Buffers, events and launches of ``net`` (an ``RNN``) at sequence length ``tau`` and batch ``batch``,
    on its parameters ``w``, ``u``, ``b`` and ``b_hn`` (dicts by layer, the network's own arrays, updated in
    place; ``b_hn`` empty but for a GRU).

    The schedules of ``schedules`` and ``scans`` enqueue through ``forward``, ``delta_output``, ``from_above``,
    ``sweep``, ``gradients`` and ``update``; the δ of layer l is complete in ``delta[l]`` once the
    schedule hands l on.
    """

    def __init__(self, net, tau, batch, w, u, b, b_hn):
        super().__init__(net, batch)
        n, L, sequence, cell = net.n, net.L, self.sequence, net.cell
        self.w, self.u, self.b, self.b_hn = w, u, b, b_hn  # the network's parameters, by layer, updated in place
        self.net, self.tau, self.L = weakref.proxy(net), tau, L  # a weak reference: the network holds its plans
        self.outputs = tau if net.output == "every" else 1
        rows = {l: net.rows(l) for l in net.layer_numbers}
        self.a = {1: sequence(n[1], tau)}
        self.z, self.sp, self.delta, self.delta_h, self.delta_u = {}, {}, {}, {}, {}
        self.nabla_w, self.nabla_b, self.nabla_u, self.nabla_b_hn = {}, {}, {}, {}
        for l in net.hidden:
            self.z[l], self.delta[l] = sequence(rows[l], tau), sequence(rows[l], tau)
            self.a[l] = sequence(n[l], tau)
            if cell == "elman":
                self.sp[l] = sequence(n[l], tau)
            self.delta_h[l] = self.delta[l] if cell == "elman" else sequence(n[l], tau)
            self.delta_u[l] = sequence(rows[l], tau) if cell == "gru" else self.delta[l]
            self.nabla_u[l] = self.gradient(u[l])
            if cell == "gru":
                self.nabla_b_hn[l] = self.gradient(b_hn[l])
        self.z[L], self.a[L], self.sp[L], self.delta[L] = (sequence(n[L], self.outputs) for _ in range(4))
        self.y = sequence(n[L], self.outputs)
        self.a_last = self.columns(n[L - 1]) if net.output == "last" else None
        for l in net.layer_numbers:
            self.nabla_w[l], self.nabla_b[l] = self.gradient(w[l]), self.gradient(b[l])
        self.scratch = {l: self.make_scratch(rows[l] * max(n[l - 1], n[l]), max(rows[l], n[l - 1]))
                        for l in net.layer_numbers}
        self.parameters = {"w": w, "u": u, "b": b, "b_hn": b_hn}
        self.nabla = {"w": self.nabla_w, "u": self.nabla_u, "b": self.nabla_b, "b_hn": self.nabla_b_hn}
        self.names = {l: list(named) for l, named in net._live().items()}  # the parameters of each layer, in order
        if net.comm is not None:  # the sums across ranks; the gradients are then its views
            self.reducer = Reducer(self, net.comm, net.gradient_layout())
            for l, views in self.reducer.views.items():
                for name, view in views.items():
                    self.nabla[name][l] = view
        self.recursion = {l: Recursion(self, l) if cell == "elman" else KINDS[cell](self, l) for l in net.hidden}
        self.products = self._products()
        self.cache = {}  # the extra buffers of the scan schedules, by kind (``scans``)
        self.rounds = 0  # dependent rounds of the last backward pass, counted as the schedule enqueues them
        self.allocated()

    def sequence(self, n, steps):
        """A NaN-filled (n, steps, B) buffer whose steps ``[:, t]`` and whole ``flat`` view are contiguous in
        the backend's order for minibatches: stored (steps, B, n) where that order is batch-major."""
        if self.backend.batch_order == "F":
            return self.buffer(steps, self.batch, n).transpose(2, 0, 1)
        return self.buffer(n, steps, self.batch)

    def _products(self):
        """The whole-sequence products, bound once (``ops.bind_matmul``), by (name, layer): ``"z"``, w^l a^{l-1};
        ``"above"``, (w^{l+1})^T delta^{l+1} (at t = tau alone below a last-step output); ``"nabla_u"``, the
        sum over t = 2..tau of delta_u^{l,t} (a^{l,t-1})^T, which a worker makes."""
        bind, products = self.backend.ops.bind_matmul, {}
        for l in self.net.hidden:
            products["z", l] = bind(flat(self.z[l]), self.w[l], flat(self.a[l - 1]))
            if l + 1 == self.L and self.a_last is not None:
                products["above", l] = bind(self.delta_h[l][:, self.tau - 1], self.w[l + 1],
                                            self.delta[self.L][:, 0], transpose=True)
            else:
                products["above", l] = bind(flat(self.delta_h[l]), self.w[l + 1], flat(self.delta[l + 1]),
                                            transpose=True)
            if self.tau > 1:
                later, earlier = (x.reshape(x.shape[0], -1) for x in (self.delta_u[l][:, 1:], self.a[l][:, :-1]))
                products["nabla_u", l] = bind(self.nabla_u[l], later, earlier.T, worker=True)
        return products

    # -- the forward pass -----------------------------------------------------------------------------

    def load(self, x, y):
        """Copy ``x`` (tau, n_1, B) and ``y`` ((n_L, B), or (tau, n_L, B)) into a^1 and y, on the main stream.
        A batch of no sequence (this rank's empty share, data-parallel) copies nothing and marks the plan
        ``empty``."""
        self.empty = not x.shape[2]
        if self.empty:
            return
        self.backend.copy_in(self.main, self.a[1], x.transpose(1, 0, 2))
        if y is not None:
            self.backend.copy_in(self.main, self.y, y[:, None, :] if y.ndim == 2 else y.transpose(1, 0, 2))

    def forward(self, solver=None):
        """Enqueue z^{l,t}, a^{l,t} for every layer and time step (the output layer where it has outputs): the
        recurrent layers step by step, or by ``solver`` (a ``newton.TimeNewton``), its buffers made first."""
        launch = self.backend.launch
        if solver is None:
            for l in self.net.hidden:
                launch(self.main, f"z[{l}]", self._forward_layer, l)
        else:
            solver.prepare(self)
            launch(self.main, f"forward[{solver!r}]", solver.solve, self)
        launch(self.main, f"z[{self.L}]", self._forward_output)

    def _forward_layer(self, l):
        """z^l = w^l a^{l-1} + b^l at every step, then the recursion over t (the cell's), then the Elman cell's
        sigma'(z^l) at every step."""
        xp, z = self.xp, flat(self.z[l])
        self.products["z", l]()
        xp.add(z, self.b[l][:, None], out=z)
        with np.errstate(over="ignore"):  # sigmoid: exp(-z) = inf gives sigma = 0, as it should
            for call in self.recursion[l].sweep_forward:
                call()
        if l in self.sp:
            ops_numpy.sigma_prime(z, flat(self.a[l]), flat(self.sp[l]), self.net.activation, xp)

    def output_input(self):
        """a^{L-1} at the time steps with an output: (n_{L-1}, outputs*B), contiguous."""
        return flat(self.a[self.L - 1]) if self.a_last is None else self.a_last

    def _forward_output(self):
        L, net = self.L, self.net
        if self.a_last is not None:
            self.xp.copyto(self.a_last, self.a[L - 1][:, self.tau - 1])
        self.backend.ops.forward(flat(self.z[L]), flat(self.a[L]), flat(self.sp[L]), self.w[L], self.output_input(),
                                 self.b[L], net.output_activation)

    # -- the backward chain ---------------------------------------------------------------------------

    def delta_output(self):
        """Enqueue (4) for every output time step: delta^{L,t} from a^{L,t}, y^t and sigma'(z^{L,t})."""
        L, ops = self.L, self.backend.ops
        self.backend.launch(self.main, f"delta[{L}]", ops.delta_output, flat(self.delta[L]), flat(self.a[L]),
                            flat(self.y), flat(self.sp[L]), self.net.cost)

    def from_above(self, l):
        """delta_h^{l,t} <- (w^{l+1})^T delta^{l+1,t} at every t at once (one product over tau*B columns). Called
        inside a launch on the main stream; zero where layer l+1 has no output."""
        if l + 1 == self.L and self.a_last is not None:
            self.delta_h[l][:, : self.tau - 1].fill(0)
        self.products["above", l]()

    def sweep(self, l):
        """delta^{l,t} <- sigma'(z^{l,t}) * (delta^{l,t} + (u^l)^T delta^{l,t+1}) for t = tau-1..0, 0-based, once
        delta_h^l holds (w^{l+1})^T delta^{l+1} at every step: the recursion of layer l over every step (a gated
        cell's as ``cells`` writes it)."""
        for call in self.recursion[l].sweep_backward:
            call()

    def resolve(self, schedule):
        """``Sequential()`` is ``BPTT()``, ``Leapfrog(k)`` the BPTT chain with k workers (``schedules.resolve``)."""
        return resolve(schedule)

    def chain(self, schedule, controls=None):
        """The chain of ``schedule`` (an RNN schedule), each layer L, L-1, ..., 2 given on once its delta is
        complete; its dependent rounds counted in ``rounds``. Returns its counters, also the network's
        ``stats`` and the schedule's."""
        self.rounds = 0
        yield from schedule.chain(self)
        itemsize = np.dtype(self.dtype).itemsize
        schedule.stats = {"rounds": self.rounds,
                          **schedule.counters(self.net.sizes, self.tau, self.batch, itemsize, self.backend.name,
                                              cell=self.net.cell)}
        self.net.stats = schedule.stats
        return schedule.stats

    def output(self):
        """a^{L,tau} (n_L, B) for ``output="last"``, every a^{L,t} as (tau, n_L, B) for ``"every"``."""
        out = self.a[self.L]
        return out[:, 0] if self.net.output == "last" else out.transpose(1, 0, 2)

    def gradient_arrays(self):
        """``{l: {"w": nabla_w^l, "u": nabla_u^l, "b": nabla_b^l}}`` (no ``"u"`` at the output; a GRU's
        ``"b_hn"`` too), the buffers."""
        return {l: {name: self.nabla[name][l] for name in names} for l, names in self.names.items()}

    # -- gradients and the update ---------------------------------------------------------------------

    def gradients(self, stream, l, controls=None):
        """Enqueue nabla_b^l, nabla_w^l (and nabla_u^l below the output, a GRU's nabla_b_hn^l) on ``stream``; given
        ``controls`` (the network's ``Controls``: the optimizer and its controls in device memory), then the update
        of layer l."""
        ops, launch = self.backend.ops, self.backend.launch
        delta = flat(self.delta[l])
        a_in = self.output_input() if l == self.L else flat(self.a[l - 1])
        launch(stream, f"nabla_b[{l}]", ops.nabla_b, self.nabla_b[l], delta)
        launch(stream, f"nabla_w[{l}]", ops.nabla_w, self.nabla_w[l], delta, a_in)
        if l < self.L:
            launch(stream, f"nabla_u[{l}]", self._nabla_u, l)
        if l in self.nabla_b_hn:  # the sum of delta_u's n rows, r * delta_n
            n_rows = flat(self.delta_u[l])[2 * self.net.n[l]:]
            launch(stream, f"nabla_b_hn[{l}]", ops.nabla_b, self.nabla_b_hn[l], n_rows)
        if controls is not None:
            self.update(stream, l, controls)

    def _nabla_u(self, l):
        """nabla_u^l = sum over t = 2..tau of delta_u^{l,t} (a^{l,t-1})^T: one product over (tau-1)*B columns."""
        if self.tau == 1:
            self.nabla_u[l].fill(0)
        else:
            self.products["nabla_u", l]()

    def check_gradients(self, controls):
        """Enqueue on the main stream the check of every delta and gradient for NaN and Inf, which leaves the
        refusal code of the first bad one in ``controls``: deepest layer first; in each layer its deltas from
        the last time step back, the order BPTT computes them in, then nabla_w, nabla_u, nabla_b, nabla_b_hn.
        Data-parallel, the gradients alone: their sums are every rank's, a rank's deltas its own (an empty
        share's never written)."""
        check, checks, array = self.backend.ops.check_finite, [], controls.array
        for l in range(self.L, 1, -1):
            delta, steps = self.delta[l], self.tau if l < self.L or self.outputs == self.tau else 1
            last = -1 if self.reducer is None else delta.shape[1] - 1  # data-parallel: no delta checked
            for i in range(delta.shape[1] - 1, last, -1):
                t = i + 1 if steps == self.tau else self.tau
                checks.append((check, array, delta[:, i], controls.code(f"delta[{l}] at t = {t}")))
            for name in ("w", "u", "b", "b_hn"):
                if l in self.nabla[name]:
                    checks.append((check, array, self.nabla[name][l], controls.code(f"nabla_{name}[{l}]")))
        self.backend.launch(self.main, "check_finite", _calls, checks)

    def update(self, stream, l, controls):
        """Enqueue the update of every parameter of layer l (w^l, u^l, b^l, a GRU's b_hn^l) on ``stream`` by
        ``controls``' optimizer."""
        self.backend.launch(stream, f"update[{l}]", self._update_layer, l, controls.optimizer,
                            {name: controls.slots(l, name) for name in self.names[l]}, controls.array)

    def _update_layer(self, l, optimizer, slots, controls):
        ops, scratch = self.backend.ops, self.scratch[l]
        for name in self.names[l]:
            optimizer.apply(ops, self.parameters[name][l], self.nabla[name][l], slots[name], controls, scratch)


def _calls(calls):
    """Run each ``(op, *args)`` of ``calls`` in turn: the ops of one launch."""
    for op, *args in calls:
        op(*args)
