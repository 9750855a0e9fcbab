"""The recurrent network: parameters, validation, and one pass under a schedule (``rnn.schedules``, ``rnn.scans``).

Layers are numbered 1..L as in ``MLP``: layer 1 is the input, layers 2..L-1 are recurrent, layer L is
the output. For t = 1..tau and l = 2..L-1,

    z^{l,t} = w^l a^{l-1,t} + u^l a^{l,t-1} + b^l,    a^{l,t} = sigma(z^{l,t}),    a^{l,0} = 0,   a^{1,t} = x^t

and the output layer z^{L,t} = w^L a^{L-1,t} + b^L, a^{L,t} = sigma_L(z^{L,t}) at every time step
(``output="every"``) or at the last (``output="last"``), with the MLP's output activations and costs, the
cost summed over the time steps that have an output. A GRU or LSTM network (``cell``) has PyTorch's gated
cells in its recurrent layers instead (``cells``), their gates stacked in w^l, u^l and b^l. A batch of B
sequences is ``x`` (tau, n_1, B); targets ``y`` are (n_L, B) for ``"last"`` and (tau, n_L, B) for
``"every"``. The buffers of one (tau, B) live in a ``plan.RNNPlan``; what every network shares is
``core.network.Network``.
"""

import math

import numpy as np

from ..core import parameters, saving, schedules
from ..core.checks import check_count, check_finite_as, check_real, real_array, widths
from ..core.functions import choose
from ..core.layered import Layered
from ..core.schedules import Leapfrog, Sequential
from ..core.torch_io import loaded, network_dtype, unread
from ..parallel import reducer
from . import torch_io
from .cells import ACTIVATION, CELLS, GATED, GATES, STATE
from .plan import RNNPlan
from .scans import NaumovRNN, TimeScan
from .schedules import BPTT, Wavefront, resolve

OUTPUTS = ("last", "every")
"""Where the output layer is applied: at the last time step, or at every one."""

RECURRENT_NORM = 0.9
"""The spectral norm (largest singular value) of every u^l at initialisation: below 1, so that the
linearised recurrence contracts and neither the forward states nor the deltas blow up with tau."""


@saving.register
class RNN(Layered):
    """A recurrent network trained by SGD, its backward pass (BPTT) run under a schedule.

    Args:
        sizes: widths ``[n_1, ..., n_L]``, at least three (input, one recurrent layer, output).
        activation: sigma of the recurrent layers, ``"sigmoid"``, ``"tanh"`` or ``"relu"``: the Elman cell's;
            a gated cell has its own, tanh, and refuses any other.
        cost: ``"quadratic"`` or ``"cross_entropy"`` (the latter with a sigmoid output).
        output: ``"last"`` (one output, at t = tau) or ``"every"`` (one at every time step).
        dtype: ``"float32"`` or ``"float64"``.
        seed: seed of the initial parameters: w and b drawn as ``MLP(sizes, seed=seed)`` draws them
            (w ~ N(0, 1/n_{l-1}), b ~ N(0, 1)), then each u^l ~ N(0, 1/n_l) scaled to spectral norm
            ``recurrent_norm``.
        backend: ``"auto"``, ``"numpy"``, ``"cupy"``, or a backend object (then not closed by this network).
        output_activation: the output layer's sigma; default sigmoid for cross-entropy, else ``activation``.
        recurrent_norm: the spectral norm of each u^l at initialisation, >= 0 (``RECURRENT_NORM``).
        check_finite: check every delta and gradient for NaN and Inf before the update and refuse it, as
            ``MLP``'s does, naming the deepest bad array: deepest layer first, each layer's deltas from the
            last time step back (``"delta[3] at t = 17"``), then its gradients.
        comm: a ``parallel.Communicator`` to train data-parallel over its ranks, as ``MLP``'s: each rank
            computes on its share of every batch's sequences and the gradients are summed across ranks.
        cell: the recurrent layers' cell, ``"elman"``, ``"gru"`` or ``"lstm"`` (PyTorch's, ``cells``); a gated
            cell's w^l, u^l and b^l stack its G gates (G·n_l rows, each gate's u block drawn as u^l is), and a
            GRU's layers also hold b_hn^l (n_l,) ~ N(0, 1).

    ``parameters()`` gives ``{l: {"w": w^l, "u": u^l, "b": b^l}}`` for l = 2..L (no ``"u"`` at the output; a GRU's
    recurrent layers add ``"b_hn"``).
    ``weights``, ``recurrent`` and ``biases`` list copies of w^l (n_l, n_{l-1}) for l = 2..L, u^l (n_l, n_l)
    for l = 2..L-1 and b^l (n_l,) for l = 2..L (G·n_l rows in a recurrent layer of a G-gate cell), as they are
    once the steps enqueued so far have run.
    """

    NOUN = "an RNN"
    LOAD = "net.set_parameters(weights, recurrent, biases), a GRU's with b_hn after them"
    SCHEDULES = (Sequential, Leapfrog, BPTT, Wavefront, TimeScan, NaumovRNN)
    GATED_SCHEDULES = SCHEDULES[:-1]  # a gated cell's: NaumovRNN has no layer operators for its state Jacobians
    SOLVERS = "None (the forward step by step) or a TimeNewton()"
    CAPTURE_REFUSALS = {"cupy": "the recurrent pass runs its products as cupy.matmul calls (cuBLAS), which CuPy "
                                "refuses during stream capture; use graph=False"}
    BASELINE = BPTT  # the schedule the others are measured against

    def __init__(self, sizes, activation="tanh", cost="quadratic", output="last", dtype="float32", seed=0,
                 backend="auto", output_activation=None, recurrent_norm=RECURRENT_NORM, check_finite=False,
                 comm=None, cell="elman"):
        with reducer.building(comm):  # a rank that refuses an argument leaves none waiting for it in the comparison
            self.output = choose("output", output, OUTPUTS)
            self.cell = choose("cell", cell, CELLS)
            if cell != "elman" and activation != ACTIVATION:
                raise ValueError(f"{GATED[cell]} cell has its own activation, {ACTIVATION} (its gates are sigmoids); "
                                 f"got activation={activation!r}: pass activation={ACTIVATION!r}")
            recurrent_norm = check_real("recurrent_norm", recurrent_norm)
            rng = parameters.generator(seed)
            super().__init__(sizes, activation, cost, output_activation, dtype, backend, check_finite, least=3,
                             example="[8, 32, 10]", layers="input, a recurrent layer, output")
            self._draw(rng, self.rows)
            xp, self._u, self._b_hn = self.backend.xp, {}, {}
            for l in self.hidden:
                blocks = []
                for _ in range(GATES[self.cell]):
                    u = rng.standard_normal((self.n[l], self.n[l])) / math.sqrt(self.n[l])
                    blocks.append(u * recurrent_norm / max(np.linalg.norm(u, 2), np.finfo(np.float64).tiny))
                self._u[l] = xp.asarray(np.concatenate(blocks), dtype=self.dtype)
            if self.cell == "gru":
                self._b_hn = {l: xp.asarray(rng.standard_normal(self.n[l]), dtype=self.dtype) for l in self.hidden}
        self.stats = {}  # the counters of the last backward pass (``schedules``)
        self._join(comm)

    def __repr__(self):
        cell = "" if self.cell == "elman" else f", cell={self.cell!r}"
        comm = "" if self.comm is None else f", comm={self.comm!r}"
        return (f"RNN({widths(self.sizes)}, activation={self.activation!r}, cost={self.cost!r}{self._output_flag()}, "
                f"output={self.output!r}{cell}, dtype={self.dtype!r}, backend={self.backend!r}{comm})")

    @property
    def hidden(self):
        """The recurrent layers, which also carry u: 2..L-1."""
        return range(2, self.L)

    def rows(self, l):
        """The rows of w^l and b^l (and u^l): G·n_l in a recurrent layer of a G-gate cell, else n_l."""
        return self.n[l] * (GATES[self.cell] if l in self.hidden else 1)

    @property
    def state_sizes(self):
        """``[n_1, S_2, ..., S_{L-1}, n_L]``: the width of each recurrent layer's state over time (the LSTM's
        (h, c): 2 n_l), what the scans' matrices are made of."""
        return [n * (STATE[self.cell] if l in self.hidden else 1) for l, n in self.n.items()]

    @property
    def recurrent(self):
        return self._handed_out([self._u[l] for l in self.hidden])

    @recurrent.setter
    def recurrent(self, _):
        raise parameters.read_only("recurrent", self.LOAD)

    @property
    def b_hn(self):
        """A GRU's b_hn^l (n_l,) for l = 2..L-1, copies as the others are: the last list of ``set_parameters``."""
        if self.cell != "gru":
            raise AttributeError(f"b_hn is the GRU's alone; this RNN's cells are {self.cell!r}")
        return self._handed_out([self._b_hn[l] for l in self.hidden])

    @b_hn.setter
    def b_hn(self, _):
        raise parameters.read_only("b_hn", self.LOAD)

    def set_parameters(self, weights, recurrent=None, biases=None, b_hn=None):
        """Copy parameters in: ``weights``, ``recurrent`` and ``biases``, lists in the shapes of
        ``self.weights``, ``self.recurrent``, ``self.biases`` (and for a GRU ``b_hn``, one (n_l,) array per
        recurrent layer); or, alone, the dict of ``parameters()`` (``Network.set_parameters``). All are checked,
        and the steps enqueued waited for (raising as ``synchronize``), before any is copied; an error names the
        parameter and changes nothing."""
        if recurrent is None and biases is None and b_hn is None and not isinstance(weights, (list, tuple)):
            return super().set_parameters(weights)
        if self.cell == "gru" and b_hn is None and recurrent is not None and biases is not None:
            raise ValueError("a GRU needs b_hn too: set_parameters(weights, recurrent, biases, b_hn), b_hn one (n_l,) "
                             "array per recurrent layer")
        if self.cell != "gru" and b_hn is not None:
            raise ValueError(f"b_hn is the GRU's alone; this RNN's cells are {self.cell!r}: pass no b_hn")
        groups = [("weights", weights, "w", self.layer_numbers), ("recurrent", recurrent, "u", self.hidden),
                  ("biases", biases, "b", self.layer_numbers)]
        return super().set_parameters(parameters.from_lists(groups + ([("b_hn", b_hn, "b_hn", self.hidden)]
                                                                        if self.cell == "gru" else [])))

    def _live(self):
        live = {l: {"w": self._w[l], "u": self._u[l], "b": self._b[l]} for l in self.hidden}
        for l, b_hn in self._b_hn.items():
            live[l]["b_hn"] = b_hn
        live[self.L] = {"w": self._w[self.L], "b": self._b[self.L]}
        return live

    def structure(self):
        return {**super().structure(), "output": self.output, "cell": self.cell}

    def architecture(self):
        return {**super().architecture(), "output": self.output, "cell": self.cell}

    def _label(self, l, name):
        group = dict(w="weights", u="recurrent", b="biases", b_hn="b_hn")[name]
        first = self.hidden[0] if name in ("u", "b_hn") else 2
        return f"{group}[{l - first}] ({name}^{l})"

    def to_torch(self):
        """A ``torch.fx.GraphModule`` computing ``feedforward`` in torch's layout: for x (tau, n_1, B) as a tensor,
        ``module(x.permute(0, 2, 1))`` gives a^{L,tau} as (B, n_L) for ``output="last"`` and every a^{L,t} as
        (tau, B, n_L) for ``"every"``. One ``torch.nn.RNN`` per recurrent layer l
        (``weight_ih_l0`` w^l, ``weight_hh_l0`` u^l, ``bias_ih_l0`` b^l, ``bias_hh_l0`` zeros), then the output
        ``Linear`` and its activation (``leapfrog_gpu.rnn.torch_io``). Its parameters are a copy, as they are
        once the enqueued steps have run: later steps do not change them, and training the module does not
        change the network. A ValueError for ``activation="sigmoid"``, which ``torch.nn.RNN`` does not have. A
        GRU or LSTM network's layers are ``torch.nn.GRU`` or ``torch.nn.LSTM`` (``bias_hh_l0`` zeros but a GRU's
        n rows, b_hn^l). ``bias_hh_l0``'s zeros do not train (b^l is one parameter): torch.optim over
        ``module.parameters()`` steps the function the network's own steps do."""
        return torch_io.to_module(self.weights, self.recurrent, self.biases, self.activation,
                                  self.output_activation, self.output, self.cell,
                                  self.b_hn if self.cell == "gru" else None)

    @classmethod
    def from_torch(cls, module, cost="quadratic", output="last", backend="auto", dtype=None, **options):
        """A network computing ``module``, read as ``to_torch`` writes it: its ``torch.nn.RNN`` modules (tanh
        or relu, one or more layers each; ``bias_ih + bias_hh`` summed into b^l), or its ``torch.nn.GRU`` (a GRU
        network, b_hn^l from ``bias_hh``'s n rows) or ``torch.nn.LSTM`` modules, then its output ``Linear``
        and at most one activation, in the order the module registers them. A module does not say where its
        output layer is applied: ``output`` does, as for ``RNN``. Parameters are copied into the network's
        own buffers (training it never writes the module); ``dtype`` defaults to the module's; ``options``
        are the other arguments of ``RNN``. What an RNN cannot compute is refused, each with its reason
        (``leapfrog_gpu.rnn.torch_io.read_module``)."""
        sizes, cell, activation, output_activation, found, tensors = torch_io.read_module(module)
        options = unread(cls, options, "sizes", "activation", "output_activation", "cell")
        return loaded(cls(sizes, activation, cost, output, network_dtype(dtype, found), backend=backend,
                          output_activation=output_activation, cell=cell, **options), tensors)

    # -- public passes --------------------------------------------------------------------------------

    def feedforward(self, x, solver=None):
        """The outputs for ``x`` (tau, n_1, B) or (tau, n_1): a copy of a^{L,tau} (n_L, B) for
        ``output="last"``, of every a^{L,t} as (tau, n_L, B) for ``"every"``; the recurrent layers step by
        step, or by ``solver`` (``TimeNewton``: its ``stats`` say how)."""
        return super().feedforward(x, solver)

    def gradients(self, x, y, schedule=None, *, solver=None):
        """BPTT under ``schedule``, the forward pass by ``solver`` (None: step by step): copies of the gradients
        summed over the time steps and the batch, ``{l: {"w": nabla_w^l, "u": nabla_u^l, "b": nabla_b^l}}`` as
        ``parameters()`` (no ``"u"`` at the output)."""
        return super().gradients(x, y, schedule, solver=solver)

    def plan(self, tau, batch):
        """The ``plan.RNNPlan`` of this network at sequence length ``tau`` and ``batch`` sequences: its buffers,
        events and launches, made on first use and kept while among the last used (``core.network.PLANS``)."""
        tau, batch = check_count("tau", tau), check_count("batch", batch)
        return self._plan((tau, batch), lambda: RNNPlan(self, tau, batch, self._w, self._u, self._b, self._b_hn))

    # -- validation -----------------------------------------------------------------------------------

    def _check_sequences(self, name, value, width, what, tau=None, also=""):
        """``value`` as (tau, width, B), from (tau, width, B) or (tau, width); ``tau`` given: it must match.
        Returns it with the shape it was given, which errors show (``also``: what else it may be, in words)."""
        value = real_array(self.backend.xp, name, value)
        given = tuple(value.shape)
        if value.ndim == 2:
            value = value.reshape(*value.shape, 1)
        want = f"({'tau' if tau is None else tau}, {width}, B) or ({'tau' if tau is None else tau}, {width})"
        if value.ndim != 3 or value.shape[1] != width or (tau is not None and value.shape[0] != tau):
            raise ValueError(f"{name} ({what}) must have shape {want} for sizes {widths(self.sizes)}"
                             f"{'' if tau is None else ', tau as in x'}{also}; got {given}")
        return value, given

    def _check_batch(self, x, y):
        """``x`` (tau, n_1, B) and ``y`` (its targets, or None) checked, as 3-D arrays."""
        x, given = self._check_x(x)
        return x, None if y is None else self._check_y(y, x.shape[0], given)

    def _labels(self, x_shape):
        """As ``Network``'s, x's time axis dropped too but for an output at every step: ((tau, B), 1) then, with
        ((tau,), 1) for one sequence; else ((B,), 0)."""
        return (tuple(x_shape[:1] + x_shape[2:]), 1) if self.output == "every" else (tuple(x_shape[2:]), 0)

    def _check_schedule(self, schedule):
        """As ``Network``'s; a gated cell's layers also refuse ``NaumovRNN``, by name, and an error names the
        schedules they run (``GATED_SCHEDULES``)."""
        if isinstance(schedule, NaumovRNN):
            schedule.refuse_gated(self.cell)
        if self.cell != "elman":
            schedules.check(schedule, self.NOUN, self.GATED_SCHEDULES)
        return super()._check_schedule(schedule)

    def _check_pass(self, schedule, shape):
        """A scan's memory check, before the plan of (tau, B) is made (``Leapfrog("auto")`` runs the BPTT
        chain, which allocates nothing more)."""
        if not schedule.auto:
            resolve(schedule).check(self.sizes, *shape, self.dtype, cell=self.cell)

    def _check_x(self, x):
        x, given = self._check_sequences("x", x, self.n[1], "the input of layer 1")
        if x.shape[0] == 0 or x.shape[2] == 0:
            raise ValueError(f"x holds an empty batch: shape {given}, need tau >= 1 and B >= 1")
        check_finite_as(self.backend.xp, "x", x, self.dtype)
        return x, given

    def _check_y(self, y, tau, x_given):
        what = f"the target of layer L={self.L}"
        if self.output == "every":
            y, given = self._check_sequences("y", y, self.n[self.L], what + " at every time step", tau,
                                             f", or class labels of shape ({tau}, B) or ({tau},)")
            samples = y.shape[2]
        else:
            y = real_array(self.backend.xp, "y", y)
            given = tuple(y.shape)
            if y.ndim == 1:
                y = y.reshape(-1, 1)
            if y.ndim != 2 or y.shape[0] != self.n[self.L]:
                raise ValueError(f"y ({what}, output='last') must have shape ({self.n[self.L]}, B) or "
                                 f"({self.n[self.L]},) for sizes {widths(self.sizes)}, or class labels of shape (B,); "
                                 f"got {given}")
            samples = y.shape[1]
        batch = 1 if len(x_given) == 2 else x_given[2]
        if samples != batch:
            raise ValueError(f"x and y must hold the same number of sequences B; got {batch} in x of shape {x_given} "
                             f"and {samples} in y of shape {given}")
        check_finite_as(self.backend.xp, "y", y, self.dtype)
        return y
