"""The MLP's pass at one batch size: its buffers, and the launches of equations (1)-(7) and the update.

``MLP.plan(B)`` gives the ``MLPPlan`` of a network at batch size B, made on first use and kept (the last used). The plan
makes the launches, each one a backend op called on its own buffers, and the chain of a backward pass
(``chain``): (4), then (5) for l = L-1..2, each layer given on as its delta is final, so that
``core.driver`` hands its (6)(7) off the chain (on the main stream for ``Sequential()``, on worker
``l mod k`` for ``Leapfrog(k)``); Naumov's schedules (``naumov``) solve the chain their own way through the
same launches.
docs/design.md §1 numbers the equations, §2 gives the schedule and its hazards. Every per-layer quantity
is a dict keyed by the layer number l = 2..L (a^1 is the input), a minibatch stored as columns.

With ``fused=True`` the update of w^l runs on its worker right after (7) (the plain SGD one inside (7)); since the
main stream still reads w^l for delta^{l-1}, that layer is handed off behind E_{l-1} instead (the third hazard of
docs/design.md §2); under one worker on the host the main stream takes the top half of a long layer's update once
its chain is done (``halved``). With ``one_pass=True`` (NumPy backend; it implies ``fused``) the main stream
updates w^{l+1} by the step's optimizer inside (5) itself, in one sweep over w^{l+1} that reads each row block for
delta^l and then updates it while it is in cache (``ops_numpy.backward_update``), and updates w^2, which no (5)
reads, last: the chain never reads a block after its update; the workers keep (6) and the update of b^l (and, at
B = 1, worker 0 an optimizer's sweep of the bottom half of each w's rows: ``halves``). So each weight matrix moves
three times a step, read by (2), read and written by the sweep, and an optimizer's state of it twice, in the sweep.
"""

from ..core import plan
from ..core.schedules import Leapfrog, Sequential
from ..parallel.reducer import Reducer

HALVED = 1 << 18
"""The fewest weights of a layer whose update the main stream halves with its one worker (``MLPPlan.halved``): at
512 x 512 and 1024 x 1024 halving made an Adam step at B = 64 1.03-1.12x as fast, at 256 x 256 0.81x (the two
launches and the wait cost more than half an update saves; docs/performance.md)."""


class MLPPlan(plan.Plan):
    """Everything one network needs at one batch size B, allocated once, and the launches that use it.

    Buffers (NaN until written, so that reading one too early shows in the result): ``a[1]`` (n_1, B);
    for l = 2..L ``z[l]``, ``a[l]``, ``sp[l]`` (sigma'(z^l)), ``delta[l]``, all (n_l, B) in the backend's
    ``batch_order`` (Fortran order on the host, C order on a GPU), ``nabla_w[l]``
    (n_l, n_{l-1}), ``nabla_b[l]`` (n_l,); ``y`` (n_L, B); ``scratch[l]``, what the updates stream
    through, and ``sweep_scratch``, the one-pass sweep's own (the nabla_w of a block of rows, for an optimizer
    other than the plain SGD one; None on a GPU); ``sweep_part`` (max n_l, 1), the part of (5) of the bottom
    half of an optimizer's sweep at B = 1, made on ``helper``, the stream of that half (``halves``). ``w`` and
    ``b`` are the network's parameters themselves, not copies (steps write them as they run: read them in stream
    order, or use ``MLP.weights``), ``controls`` its ``core.controls.Controls``.

    Caches, filled on first use: ``captured`` (graph mode's steps, ``core.capture``), ``naumov`` (Naumov's
    buffers, by solver), ``chosen`` (the schedules ``core.calibrate.choose`` picked, by candidates).
    With a ``reducer`` (``core.plan.Plan``), ``nabla_w`` and ``nabla_b`` are views of its flat buffer.
    """

    def __init__(self, net, batch, w, b, controls):
        super().__init__(net, batch)
        n = dict(enumerate(net.sizes, start=1))
        self.sizes, self.n, self.L, self.layer_numbers = net.sizes, n, net.L, net.layer_numbers
        self.cost = net.cost
        self.activation = {l: net.output_activation if l == net.L else net.activation for l in net.layer_numbers}
        self.w, self.b, self.controls = w, b, controls
        self.a = {1: self.columns(n[1])}
        self.z, self.sp, self.delta, self.nabla_w, self.nabla_b = {}, {}, {}, {}, {}
        for l in net.layer_numbers:
            self.z[l], self.a[l], self.sp[l], self.delta[l] = (self.columns(n[l]) for _ in range(4))
            self.nabla_w[l], self.nabla_b[l] = self.gradient(w[l]), self.gradient(b[l])
        self.y = self.columns(n[net.L])
        self.scratch = {l: self.make_scratch(n[l] * n[l - 1], max(n[l], n[l - 1])) for l in net.layer_numbers}
        self.sweep_scratch = self.make_scratch(max(n[l] * n[l - 1] for l in net.layer_numbers), max(net.sizes))
        self.sweep_part = self.buffer(max(net.sizes), 1)  # the bottom half's part of (5) at B = 1 (``halves``)
        self.naumov = {}
        self.sweep = False  # the chain runs the one-pass sweep: the workers update b alone
        self.helper = self.main  # the stream of the bottom half of an optimizer's sweep at B = 1 (``halves``)
        if net.comm is not None:
            self.reducer = Reducer(self, net.comm, net.gradient_layout())
            for l in net.layer_numbers:
                self.nabla_w[l], self.nabla_b[l] = self.reducer.views[l]["w"], self.reducer.views[l]["b"]
        self.allocated()

    def __repr__(self):
        return f"MLPPlan(B={self.batch}, sizes={self.sizes})"

    # -- the launches -------------------------------------------------------------------------------

    def load(self, x, y=None):
        """Enqueue on the main stream the copies of a checked batch: ``x`` (n_1, B) into a^1 and ``y``
        (n_L, B), if given, into ``y``. A batch of no column (this rank's empty share, data-parallel)
        copies nothing and marks the plan ``empty``."""
        self.empty = not x.shape[1]
        if not self.empty:
            self.backend.copy_in(self.main, self.a[1], x)
            if y is not None:
                self.backend.copy_in(self.main, self.y, y)

    def forward(self, solver=None):
        """Enqueue (2)(3) of every layer on the main stream, in an NVTX range (``MLP`` takes no solver here)."""
        with self.backend.range(self.main, "forward"):
            for l in self.layer_numbers:
                self.backend.launch(self.main, f"z[{l}]", self.backend.ops.forward, self.z[l], self.a[l], self.sp[l],
                                    self.w[l], self.a[l - 1], self.b[l], self.activation[l])

    def output(self):
        """a^L, (n_L, B)."""
        return self.a[self.L]

    def error(self, l):
        """Enqueue delta^l, the error of layer l, into ``delta[l]`` on the main stream: (4) for the output
        layer, (5) below it."""
        backend = self.backend
        if l == self.L:
            backend.launch(self.main, f"delta[{l}]", backend.ops.delta_output, self.delta[l], self.a[l], self.y,
                           self.sp[l], self.cost)
        else:
            backend.launch(self.main, f"delta[{l}]", backend.ops.backward, self.delta[l], self.w[l + 1],
                           self.delta[l + 1], self.sp[l])

    def error_update(self, l, controls):
        """Enqueue on the main stream (the bottom half of an optimizer's at B = 1 on the helper) (5) of a layer
        l < L and the update of w^{l+1} by ``controls`` in one sweep over w^{l+1}: delta^l is w^{l+1}'s last read in
        the pass. The plain SGD step by BLAS's rank update on blocks of rows (``ops.backward_update``); another
        optimizer's in one compiled pass at B = 1, in two halves (``halves``), else by blocks of rows
        (``_block_update``)."""
        backend, optimizer = self.backend, controls.optimizer
        name = f"delta[{l}]+update[{l + 1}]"
        args = (self.delta[l], self.w[l + 1], self.delta[l + 1], self.sp[l], self.a[l])
        if optimizer.plain:
            backend.launch(self.main, name, backend.ops.backward_update, *args, controls.array)
        elif self.batch == 1:
            self.halves(l + 1, controls, chained=True)
        else:
            backend.launch(self.main, name, backend.ops.backward_update, *args, controls.array,
                           *self._block_update(l + 1, controls))

    def last_update(self, l, controls):
        """Enqueue on the main stream (the bottom half of an optimizer's at B = 1 on the helper) the update of w^l
        alone by ``controls``, as the sweep updates the layers above: w^2, which no (5) reads (``ops.rank_update``;
        another optimizer's in two halves at B = 1 (``halves``), else by ``_block_update``)."""
        backend, optimizer, name = self.backend, controls.optimizer, f"update_w[{l}]"
        if optimizer.plain:
            backend.launch(self.main, name, backend.ops.rank_update, self.w[l], self.delta[l], self.a[l - 1],
                           controls.array)
        elif self.batch == 1:
            self.halves(l, controls, chained=False)
        else:
            backend.launch(self.main, name, backend.ops.row_updates, self.w[l], controls.array,
                           *self._block_update(l, controls))

    def halves(self, l, controls, chained):
        """Enqueue the compiled pass of ``optimizer.sweep`` over w^l at B = 1 in two halves of its rows, so that two
        cores stream them: the bottom one on the helper (worker 0 under a leapfrog schedule, else the main stream),
        behind the main stream's work so far, the top one on the main stream, which then waits for the helper.
        ``chained``: each half's part of (5) goes to its own buffer, delta^{l-1} the top's and ``sweep_part`` the
        bottom's, and delta^{l-1} = (top + bottom) * sp^{l-1} follows the join (``ops.delta_parts``): the parts
        add in one order, so that every k gives the same bits."""
        backend, optimizer, ops = self.backend, controls.optimizer, self.backend.ops
        w, delta, a, state = self.w[l], self.delta[l], self.a[l - 1], controls.slots(l, "w")
        rows, width = w.shape
        half = (rows + 1) // 2
        top, bottom = self.delta[l - 1] if chained else None, self.sweep_part[:width] if chained else None
        name = f"delta[{l - 1}]+update[{l}]" if chained else f"update_w[{l}]"

        def sweep(stream, part, chain):
            backend.launch(stream, f"{name} rows {part.start}:{part.stop}", optimizer.sweep, ops, chain, w[part],
                           delta[part], a, {slot: s[part] for slot, s in state.items()}, controls.array)

        if half == rows:  # a single row: no bottom half
            sweep(self.main, slice(0, rows), top)
            if chained:
                backend.launch(self.main, f"delta[{l - 1}]", ops.delta_hidden, top, self.sp[l - 1])
            return
        apart = self.helper is not self.main
        if apart:
            backend.record(self.main, self.event(f"S_{l}"))
            backend.wait(self.helper, self.event(f"S_{l}"))
        sweep(self.helper, slice(half, rows), bottom)
        if apart:
            backend.record(self.helper, self.event(f"H_{l}"))
        sweep(self.main, slice(0, half), top)
        if apart:
            backend.wait(self.main, self.event(f"H_{l}"))
        if chained:
            backend.launch(self.main, f"delta[{l - 1}]", ops.delta_parts, top, bottom, self.sp[l - 1])

    def _block_update(self, l, controls):
        """``(update, rows)``: the update of w^l by ``controls``' optimizer a block of ``rows`` rows at a time,
        ``update(block)``, by the block's nabla_w written into the sweep's own scratch (the workers stream b's
        updates through theirs at the same time)."""
        ops, w, delta, a, optimizer = self.backend.ops, self.w[l], self.delta[l], self.a[l - 1], controls.optimizer
        scratch, state = self.sweep_scratch, controls.slots(l, "w")

        def update(block):
            nabla = scratch[: (block.stop - block.start) * w.shape[1]].reshape(-1, w.shape[1])
            ops.nabla_w(nabla, delta[block], a)
            optimizer.apply(ops, w[block], nabla, {slot: s[block] for slot, s in state.items()}, controls.array,
                            None)

        return update, scratch.size // w.shape[1]

    def gradients(self, stream, l, controls=None):
        """Enqueue (6) and (7) of layer l on ``stream``; with ``controls`` (a ``Controls``), the update of its
        optimizer: the plain SGD update fused into (7), b^l -= eta/B nabla_b^l, and w^l -= eta/B delta^l
        (a^{l-1})^T without nabla_w^l ever written (on the host at B > 1, written whole where w^l is more than one
        block of its scratch, so that the update is bitwise the unfused one); another optimizer's behind (6) and
        (7), on the same stream, at B = 1 on the host without nabla_w^l either (``optimizer.sweep`` with no chain,
        bitwise the update by nabla_w^l). In a one-pass sweep (``sweep``), (6) and the update of b^l only, w^l being
        updated by it."""
        ops, launch = self.backend.ops, self.backend.launch
        inline = controls is not None and self.batch == 1 and self.backend.name == "numpy"
        if self.sweep or inline and not controls.optimizer.plain:
            optimizer = controls.optimizer
            launch(stream, f"nabla_b[{l}]", ops.nabla_b, self.nabla_b[l], self.delta[l])
            launch(stream, f"update_b[{l}]", *optimizer.update(ops, self.b[l], self.nabla_b[l], controls.slots(l, "b"),
                                                                controls.array, self.scratch[l]))
            if not self.sweep:  # one compiled pass over w^l and its state, nabla_w formed inside it
                launch(stream, f"update_w[{l}]", optimizer.sweep, ops, None, self.w[l], self.delta[l], self.a[l - 1],
                       controls.slots(l, "w"), controls.array)
        elif controls is None or not controls.optimizer.plain:
            launch(stream, f"gradients[{l}]", ops.gradients, self.nabla_w[l], self.nabla_b[l], self.delta[l],
                   self.a[l - 1])
            if controls is not None:
                self.update(stream, l, controls)
        else:
            scratch = self.scratch[l]
            if scratch is not None and self.batch > 1 and scratch.size < self.w[l].size:
                scratch = self.nabla_w[l].reshape(-1)  # one block: BLAS may round a product of fewer rows otherwise
            launch(stream, f"nabla_b[{l}]", ops.nabla_b, self.nabla_b[l], self.delta[l])
            launch(stream, f"fused_update[{l}]", _calls,
                   (ops.sgd_update, self.b[l], self.nabla_b[l], controls.array, self.scratch[l]),
                   (ops.fused_update, self.w[l], self.delta[l], self.a[l - 1], controls.array, scratch))

    def joint_update(self, controls):
        """The plain SGD update fused into (7), the host's compiled pass at B = 1 and the one-pass sweep make the
        update in the gradients' pass (``gradients``)."""
        inline = self.batch == 1 and self.backend.name == "numpy"
        return self.sweep or inline or controls.optimizer.plain

    def update(self, stream, l, controls, half=None):
        """Enqueue the update of layer l on ``stream`` by ``controls``: the plain SGD one, w^l -= eta/B
        nabla_w^l and b^l alike, in one launch; another optimizer's of w^l then b^l (``core.optimizers``).
        ``half`` ("top" or "bottom", another optimizer's: ``halved``): that half of w^l's elements alone (its top
        rows, its bottom rows), the bottom one with b^l."""
        ops, optimizer, scratch = self.backend.ops, controls.optimizer, self.scratch[l]
        if optimizer.plain:
            self.backend.launch(stream, f"update[{l}]", ops.update, self.w[l], self.nabla_w[l], self.b[l],
                                self.nabla_b[l], controls.array, scratch)
            return
        w, nabla, state, name = self.w[l], self.nabla_w[l], controls.slots(l, "w"), f"update[{l}]"
        if half is not None:  # an element-wise update of C-contiguous arrays: each half of their elements, in order
            cut = w.size // 2
            part = slice(0, cut) if half == "top" else slice(cut, None)
            w, nabla = w.reshape(-1)[part], nabla.reshape(-1)[part]
            state = {slot: s.reshape(-1)[part] for slot, s in state.items()}
            name = f"update[{l}] {half} half"
        calls = [optimizer.update(ops, w, nabla, state, controls.array, scratch)]
        if half != "top":
            calls.append(optimizer.update(ops, self.b[l], self.nabla_b[l], controls.slots(l, "b"), controls.array,
                                          scratch))
        self.backend.launch(stream, name, _calls, *calls)

    def halved(self, schedule):
        """The layers whose update the main stream halves with their worker once its chain is done (``core.driver``,
        which asks only where an update follows its gradients apart from them): under ``Leapfrog(1)`` on the host,
        those of ``HALVED`` weights or more. The worker runs (7), a product as long as the chain's (5), and the
        update besides: the main stream would wait for the rest at the join."""
        if self.backend.name != "numpy" or type(schedule) is not Leapfrog or schedule.k != 1:
            return ()
        return [l for l in self.layer_numbers if self.w[l].size >= HALVED]

    def gradient_arrays(self):
        """``{l: {"w": nabla_w^l, "b": nabla_b^l}}``, the buffers themselves."""
        return {l: {"w": self.nabla_w[l], "b": self.nabla_b[l]} for l in self.layer_numbers}

    def check_gradients(self, controls):
        """Enqueue on the main stream the check of every gradient for NaN and Inf, deepest first, which
        leaves its refusal code in ``controls``: nabla_w^l before nabla_b^l, nabla_w^L first."""
        check, checks = self.backend.ops.check_finite, []
        for l in reversed(self.layer_numbers):
            checks += [(check, controls.array, self.nabla_w[l], controls.code(f"nabla_w[{l}]")),
                       (check, controls.array, self.nabla_b[l], controls.code(f"nabla_b[{l}]"))]
        self.backend.launch(self.main, "check_finite", _calls, *checks)

    # -- the chain ----------------------------------------------------------------------------------

    def chain(self, schedule, controls=None):
        """Enqueue (4), then (5) for l = L-1..2, giving each layer on once delta^l is written (``core.driver``);
        Naumov's schedules their own solve. With ``one_pass`` and ``controls`` (a fused update), (5) of every
        l < L and the update of w^{l+1} run in one sweep, and w^2, which no (5) reads, is updated last."""
        self.sweep = schedule.one_pass and controls is not None  # set by every pass: Naumov's too (never one)
        self.helper = self.workers(1)[0] if self.sweep and schedule.k else self.main
        if type(schedule) not in (Sequential, Leapfrog):
            return (yield from schedule.chain(self, controls))
        for l in range(self.L, 1, -1):
            if self.sweep and l < self.L:
                self.error_update(l, controls)  # delta^l and the update of w^{l+1}, in one sweep
            else:
                self.error(l)
            yield l
        if self.sweep:
            self.last_update(2, controls)  # w^2, which no (5) reads, updated as the sweep updates the others
        return {}

    def dead_after_pass(self):
        """After the join nothing reads what the pass computed, but the gradients."""
        return self.a, self.z, self.sp, self.delta, {0: self.y}

    def dead_after_step(self):
        return self.nabla_w, self.nabla_b


def _calls(*calls):
    """Run each ``(op, *args)`` in turn: the ops of one launch."""
    for op, *args in calls:
        op(*args)
