"""Schedules of one pass: where equations (6) and (7) run, and what they wait for (docs/design.md §2).

The main stream runs the chain: the forward pass (2)(3), the output error (4), and (5) for
l = L-1..2. ``Sequential`` computes each layer's (6)(7) on the main stream right after its delta.
``Leapfrog(k)`` records event E_l once delta^l is written; worker ``l mod k`` waits E_l, then computes
(6)(7) for layer l while the main stream runs ahead; the main stream joins every worker before the
update. With ``fused=True`` the SGD update of w^l happens inside (7); since the main stream still reads
w^l for delta^{l-1}, that worker waits E_{l-1} instead (the third hazard of docs/design.md §2).
With ``one_pass=True`` (NumPy backend; it implies ``fused``) the main stream updates w^{l+1} inside (5)
itself, in one sweep over w^{l+1} that reads each row block for delta^l and then updates it while it
is in cache (``ops_numpy.backward_update``), and updates w^2, which no (5) reads, last: the chain never
reads a block after its update, and no other stream touches a weight matrix; the workers keep (6) and
the update of b^l. So each weight matrix moves three times a step: read by (2), read and written by
the sweep.
Equation numbers follow docs/design.md §1 (the seed's own equations were lost from its text).

A schedule talks to the ``plan.Plan`` of the pass only: ``plan.error(l)`` enqueues (4) or (5) on the
main stream, ``plan.gradients(stream, l, controls)`` (6)(7) on a stream of the schedule's choice.
"""

import numbers


class Schedule:
    """The backward chain on the main stream; subclasses say where (6)(7) run and how they join.

    ``fused=True`` fuses the SGD update into (7) during ``sgd_step`` (w -= eta/B * delta a^T, so that
    nabla_w never goes to memory); ``backprop`` still returns nabla_w. There the plan passes
    ``controls``: the step's ``plan.Controls`` (eta / B and the refusal, in device memory), which the
    fused update reads when it runs. ``one_pass=True`` (which implies ``fused``) updates w^{l+1}, l < L,
    in the sweep of (5) that reads it for delta^l (see the module docstring); ``backprop`` is unchanged.
    """

    def __init__(self, fused=False, one_pass=False):
        self.one_pass = bool(one_pass)
        self.fused = bool(fused) or self.one_pass

    def backward(self, plan, controls=None):
        """Enqueue (4), then (5) for l = L-1..2, handing each layer's (6)(7) to ``gradients`` as soon
        as it may run: right after delta^l, or, with a fused update (``controls`` given), once w^l has
        been read for the last time."""
        fuse = self.fused and controls is not None
        sweep = fuse and self.one_pass
        for l in range(plan.L, 1, -1):
            if sweep and l < plan.L:
                plan.error_update(l, controls)  # delta^l and the update of w^{l+1}, in one sweep
            else:
                plan.error(l)
            self.delta_ready(plan, l)
            if not fuse:
                self.gradients(plan, l, after=l)
            elif sweep:
                self.gradients(plan, l, after=l, controls=controls, weights=False)
            elif l < plan.L:  # delta^l was the last read of w^{l+1}
                self.gradients(plan, l + 1, after=self.last_reader(l + 1), controls=controls)
        if sweep:
            plan.rank_update(2, controls)  # w^2, which no (5) reads, updated as the sweep updates the others
        elif fuse:
            self.gradients(plan, 2, after=2, controls=controls)
        self.join(plan)

    def graph_refusal(self, backend):
        """Why a step under this schedule cannot be captured as a graph on ``backend`` ("numpy" or
        "cupy"), or None: every schedule here enqueues a fixed set of launches, events and waits."""
        return None

    @staticmethod
    def last_reader(l):
        """The layer whose (5) reads w^l last: delta^{l-1} = ((w^l)^T delta^l) * sigma'(z^{l-1})."""
        return l - 1

    def delta_ready(self, plan, l):
        """Called once delta^l is enqueued on the main stream."""

    def gradients(self, plan, l, after, controls=None, weights=True):
        """Enqueue (6)(7) of layer l (with the SGD update by ``controls`` when given; ``weights=False``:
        (6) and b^l's update only), ordered after delta^after."""
        raise NotImplementedError

    def _flags(self):
        """The options ``repr`` shows: ``, one_pass=True``, ``, fused=True`` or nothing."""
        return ", one_pass=True" if self.one_pass else ", fused=True" if self.fused else ""

    def join(self, plan):
        raise NotImplementedError


class Sequential(Schedule):
    """Everything on the main stream, in the book's order."""

    k = 0

    def __repr__(self):
        return f"Sequential({self._flags()[2:]})"

    def gradients(self, plan, l, after, controls=None, weights=True):
        """Enqueue (6)(7) of layer l on the main stream, which has already run delta^after."""
        plan.gradients(plan.main, l, controls, weights)

    def join(self, plan):
        """Nothing to join."""


class Leapfrog(Schedule):
    """Equations (6)(7) of layer l on worker stream ``l mod k`` (the seed's levels mk + j).

    ``Leapfrog("auto")``: the plan of a batch size times ``Sequential()`` and ``Leapfrog(k)`` for k in
    ``autotune.KS`` the first time it runs this schedule (that pass waits for the calibration), then
    runs the fastest from then on (``Plan.backward``, ``leapfrog_gpu.autotune``).
    """

    def __init__(self, k, fused=False, one_pass=False):
        super().__init__(fused, one_pass)
        if k == "auto" and type(self) is Leapfrog:
            if self.one_pass:
                raise ValueError("Leapfrog('auto') calibrates the plain and fused schedules only; give k for "
                                 "one_pass=True, e.g. Leapfrog(2, one_pass=True)")
            self.k = k
            return
        accepted = "an integer >= 1 (the number of worker streams)" + (" or 'auto'" if type(self) is Leapfrog else "")
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be {accepted}; got {k!r}")
        if k < 1:
            raise ValueError(f"k must be {accepted}; got {k!r}")
        self.k = int(k)

    def __repr__(self):
        return f"Leapfrog(k={self.k!r}{self._flags()})"

    def backward(self, plan, controls=None):
        if self.k == "auto":
            raise ValueError("Leapfrog('auto') stands for a calibrated choice: run it through the network "
                             "(MLP.backprop or MLP.sgd_step), which makes that choice first")
        super().backward(plan, controls)

    def delta_ready(self, plan, l):
        """Record E_l on the main stream."""
        plan.backend.record(plan.main, plan.delta_ready[l])

    def gradients(self, plan, l, after, controls=None, weights=True):
        """Worker ``l mod k`` waits for E_after, then runs (6)(7) of layer l."""
        worker = self.worker(plan, l % self.k)
        self.wait_for_delta(plan, worker, after)
        plan.gradients(worker, l, controls, weights)

    def worker(self, plan, j):
        """Worker stream j; only workers that own a layer are ever created, so any k is cheap."""
        return plan.workers(min(self.k, plan.L + 1))[j]

    def wait_for_delta(self, plan, worker, l):
        """Guard read-after-write: the worker reads delta^l and a^{l-1}, written by the main stream
        (and, with a fused update, write-after-read: E_{l-1} means the main stream is done with w^l)."""
        plan.backend.wait(worker, plan.delta_ready[l])

    def join(self, plan):
        """Guard write-after-read: nothing on the main stream passes until every busy worker is done."""
        backend = plan.backend
        for j in sorted({l % self.k for l in range(2, plan.L + 1)}):
            done = plan.worker_done(j)
            backend.record(self.worker(plan, j), done)
            backend.wait(plan.main, done)

