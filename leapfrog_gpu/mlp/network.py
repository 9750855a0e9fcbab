"""The multilayer perceptron: its parameters, the checks of what it is given, and its public API.

Layers are numbered 1..L as in the book; layer 1 is the input. Internally every per-layer quantity is a
dict keyed by that number (``w[l]``, ``z[l]``, ``delta[l]``), so the code reads like the equations of
docs/design.md §1. A minibatch is stored as columns: ``a[l]`` is (n_l, B). The buffers and launches of a
pass at one batch size are its ``plan.MLPPlan`` (``MLP.plan``); what every network shares (the backend,
parameters in and out, the step controls) is ``core.network.Network``.
"""

from ..core import parameters, saving
from ..core.checks import check_batch, check_count, shown, widths
from ..core.convergence import Solver
from ..core.layered import Layered
from ..core.schedules import Leapfrog, Sequential
from ..core.torch_io import loaded, network_dtype, unread
from ..parallel import reducer
from . import torch_io
from .naumov import NaumovJacobi, NaumovScan
from .plan import MLPPlan


@saving.register
class MLP(Layered):
    """A fully connected network trained by SGD, its backward pass run under a schedule.

    Args:
        sizes: widths ``[n_1, ..., n_L]``, at least two (input and output).
        activation: hidden-layer sigma, ``"sigmoid"``, ``"tanh"`` or ``"relu"``.
        cost: ``"quadratic"`` or ``"cross_entropy"`` (the latter with a sigmoid output).
        dtype: ``"float32"`` or ``"float64"``.
        seed: seed of the initial parameters: w ~ N(0, 1/n_{l-1}), b ~ N(0, 1) (Nielsen's network2).
        backend: ``"auto"``, ``"numpy"``, ``"cupy"``, or a backend object (then not closed by this
            network).
        output_activation: the output layer's sigma; default sigmoid for cross-entropy, else ``activation``.
        check_finite: check every gradient for NaN and Inf at the join and refuse the update when one is
            found: the check leaves a code in device memory that the update kernels obey, and the next
            ``synchronize()`` raises ``FloatingPointError`` with the parameters, the optimizer's state and
            its step count as they were before that step (steps enqueued after it do not update either).
            Costs a pass over the gradients and no host synchronization.
        comm: a ``parallel.Communicator`` (``parallel.world()``) to train data-parallel over its
            ranks: each computes on its share of every batch's columns and the gradients are summed
            across ranks (``leapfrog_gpu.parallel.reducer``). ``None`` or one rank: this process alone.

    ``parameters()`` gives ``{l: {"w": w^l, "b": b^l}}`` for l = 2..L. ``weights`` and ``biases`` list copies of w^l
    (n_l, n_{l-1}) and b^l (n_l,) for l = 2..L, on the backend, as they are once the steps enqueued so far have run.
    Every array the network hands out (these, ``feedforward``'s and ``backprop``'s) is complete on return and no
    later step writes it.
    """

    NOUN = "an MLP"
    SCHEDULES = (Sequential, Leapfrog, NaumovScan, NaumovJacobi)
    ONE_PASS = True
    BASELINE = Sequential  # the schedule the others are measured against

    def __init__(self, sizes, activation="sigmoid", cost="quadratic", dtype="float32", seed=0,
                 backend="auto", output_activation=None, check_finite=False, comm=None):
        with reducer.building(comm):  # a rank that refuses an argument leaves none waiting for it in the comparison
            rng = parameters.generator(seed)
            super().__init__(sizes, activation, cost, output_activation, dtype, backend, check_finite)
            self._draw(rng)
        self._join(comm)

    def __repr__(self):
        comm = "" if self.comm is None else f", comm={self.comm!r}"
        return (f"MLP({widths(self.sizes)}, activation={self.activation!r}, cost={self.cost!r}{self._output_flag()}, "
                f"dtype={self.dtype!r}, backend={self.backend!r}{comm})")

    def set_parameters(self, weights, biases=None):
        """Copy parameters in: ``weights`` and ``biases``, lists of w^l (n_l, n_{l-1}) and b^l (n_l,) or
        Nielsen's (n_l, 1) for l = 2..L; or, alone, the dict of ``parameters()`` (``Network.set_parameters``).
        All are checked, and the steps enqueued waited for (raising as ``synchronize``), before any is copied; an
        error names the layer and changes nothing."""
        if biases is None and not isinstance(weights, (list, tuple)):
            return super().set_parameters(weights)
        layers = self.layer_numbers
        return super().set_parameters(parameters.from_lists([("weights", weights, "w", layers),
                                                             ("biases", biases, "b", layers)]))

    def _live(self):
        return {l: {"w": self._w[l], "b": self._b[l]} for l in self.layer_numbers}

    @staticmethod
    def _label(l, name):
        return f"{dict(w='weights', b='biases')[name]} of layer {l}"

    def to_torch(self):
        """A ``torch.nn.Sequential`` of ``Linear`` and activation modules computing ``feedforward`` on rows:
        ``net.to_torch()(x.T).T`` is ``net.feedforward(x)`` (x (n_1, B)). Its parameters are a copy of w^l and
        b^l as they are once the enqueued steps have run, in this network's dtype and on its device (through
        DLPack, or on the host where torch cannot reach it): later steps do not change them, and training the
        module does not change the network (``leapfrog_gpu.mlp.torch_io``)."""
        return torch_io.to_module(self.weights, self.biases, self.activation, self.output_activation)

    @classmethod
    def from_torch(cls, module, cost="quadratic", backend="auto", dtype=None, **options):
        """A network computing ``module``, a ``torch.nn.Sequential`` of ``Linear`` modules each followed by
        ``Sigmoid``, ``Tanh``, ``ReLU`` or nothing (the output alone may have none): widths, activations and
        parameters read from it, copied into the network's own buffers (training it never writes the module).
        ``dtype`` defaults to the module's; ``options`` are the other arguments of ``MLP``."""
        sizes, activation, output_activation, found, tensors = torch_io.read_module(module)
        options = unread(cls, options, "sizes", "activation", "output_activation")
        return loaded(cls(sizes, activation, cost, network_dtype(dtype, found), backend=backend,
                          output_activation=output_activation, **options), tensors)

    # -- public passes ------------------------------------------------------------------------------

    def feedforward(self, x, solver=None):
        """Equations (1)-(3): return a copy of a^L, (n_L, B), for input ``x`` (n_1, B) or (n_1,); by
        ``solver`` (``ForwardJacobi`` or ``ForwardNewton``, which run it as its chain of ``Dense`` layers)."""
        if solver is not None:
            self._check_open()  # first: no other fault of a closed network's matters
            if not (isinstance(solver, Solver) and solver.network == "DagNet"):
                raise TypeError(f"solver must be None (the forward layer by layer), ForwardJacobi() or "
                                f"ForwardNewton(); got {shown(solver)}")
            x, _ = self._check_batch(x, None)
            return solver.feedforward(self, x)
        return super().feedforward(x)

    def backprop(self, x, y, schedule=None):
        """Equations (1)-(7) under ``schedule``, Nielsen's face of ``gradients``: copies of ``(nabla_b,
        nabla_w)``, lists for l = 2..L, summed over the batch (with a communicator: over every rank's share
        of it)."""
        grads = self.gradients(x, y, schedule)
        return [grads[l]["b"] for l in self.layer_numbers], [grads[l]["w"] for l in self.layer_numbers]

    def plan(self, batch):
        """The ``plan.MLPPlan`` of this network at ``batch`` columns (this rank's share, with a communicator):
        its buffers, events and launches, made on first use and kept while among the last used (``core.network.PLANS``).

        For measurements and tools that enqueue parts of a pass themselves (``plan.forward()``,
        ``plan.backward(schedule)``, after a ``backprop`` or ``sgd_step`` has loaded a batch of that
        size); training goes through ``sgd_step``, which checks and loads the batch.
        """
        batch = check_count("batch", batch)
        return self._plan(batch, lambda: MLPPlan(self, batch, self._w, self._b, self._controls))

    def _check_batch(self, x, y):
        """``x`` (n_1, B) and ``y`` (n_L, B) (or None) as 2-D arrays of real numbers on a device this backend can
        read, of the same B."""
        x = check_batch(self.backend.xp, "x", x, self.n[1], self.dtype, self.sizes)
        if y is not None:
            y = check_batch(self.backend.xp, "y", y, self.n[self.L], self.dtype, self.sizes)
            if y.shape[1] != x.shape[1]:
                raise ValueError(f"x and y must hold the same number of samples; got {x.shape[1]} and {y.shape[1]}")
        return x, y
