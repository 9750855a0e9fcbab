"""Networks of numbered layers, ``MLP`` and ``RNN``: what they share beyond ``Network``.

Layers are numbered 1..L as in the book; layer 1 is the input and has no parameters. Every per-layer
quantity is a dict keyed by that number: ``w[l]`` (n_l, n_{l-1}) and ``b[l]`` (n_l,) for l = 2..L, drawn
as Nielsen's network2 draws them.
"""

import math

from . import parameters
from .checks import check_sizes
from .functions import ACTIVATIONS, COSTS, choose, resolve_output_activation
from .network import Network


class Layered(Network):
    """A ``Network`` of layers of widths ``sizes`` (at least ``least`` of them, as ``example``, which
    ``layers`` describes), hidden sigma ``activation``, ``cost`` and the output's sigma.

    ``weights`` and ``biases`` list copies of w^l and b^l for l = 2..L, as they are once the steps enqueued
    so far have run; ``LOAD`` says how to load them instead of assigning.
    """

    LOAD = "net.set_parameters(weights, biases)"

    def __init__(self, sizes, activation, cost, output_activation, dtype, backend, check_finite=False,
                 least=2, example="[784, 30, 10]", layers="input and output"):
        self._sizes = tuple(check_sizes(sizes, least, example, layers))
        self.activation = choose("activation", activation, ACTIVATIONS)
        self.cost = choose("cost", cost, COSTS)
        self.output_activation = resolve_output_activation(activation, cost, output_activation)
        super().__init__(dtype, backend, check_finite)
        self.L = len(self.sizes)
        self.n = dict(enumerate(self.sizes, start=1))

    def structure(self):
        """The widths give every parameter's shape; with the activations and the cost, the network."""
        return {"network": type(self).__name__, "dtype": self.dtype, "sizes": self.sizes, "activation": self.activation,
                "cost": self.cost, "output_activation": self.output_activation}

    def _outputs(self):
        return self.n[self.L], self.output_activation

    def _output_flag(self):
        """``", output_activation=..."`` for ``repr`` where it is not the one ``activation`` and ``cost`` give."""
        default = resolve_output_activation(self.activation, self.cost, None)
        return "" if self.output_activation == default else f", output_activation={self.output_activation!r}"

    def architecture(self):
        """What builds this network again (``core.saving``), JSON-able: its constructor's arguments but the seed, the
        backend and a communicator, which ``from_architecture`` takes back."""
        return {"sizes": self.sizes, "activation": self.activation, "cost": self.cost,
                "output_activation": self.output_activation, "dtype": self.dtype, "check_finite": self.check_finite}

    @classmethod
    def from_architecture(cls, architecture, backend, layers=()):
        """A network of ``architecture`` (``architecture()``'s) on ``backend``, its parameters drawn by seed 0
        (``layers``, one's own ``Layer`` classes, build a DagNet's nodes: a network of layers holds none)."""
        return cls(**architecture, backend=backend)

    def _draw(self, rng, rows=None):
        """w^l ~ N(0, 1/n_{l-1}) and b^l ~ N(0, 1) for l = 2..L, from ``rng``, in that order, on the backend;
        ``rows(l)``: the rows of w^l and b^l (default n_l)."""
        xp, self._w, self._b = self.backend.xp, {}, {}
        for l in self.layer_numbers:
            m = self.n[l] if rows is None else rows(l)
            w = rng.standard_normal((m, self.n[l - 1])) / math.sqrt(self.n[l - 1])
            self._w[l] = xp.asarray(w, dtype=self.dtype)
            self._b[l] = xp.asarray(rng.standard_normal(m), dtype=self.dtype)

    @property
    def sizes(self):
        """The widths [n_1, ..., n_L]: a new list, whose changes reach no network."""
        return list(self._sizes)

    @property
    def layer_numbers(self):
        """The numbers of the layers that carry weights: 2..L."""
        return range(2, self.L + 1)

    @property
    def weights(self):
        return self._handed_out([self._w[l] for l in self.layer_numbers])

    @weights.setter
    def weights(self, _):
        raise parameters.read_only("weights", self.LOAD)

    @property
    def biases(self):
        return self._handed_out([self._b[l] for l in self.layer_numbers])

    @biases.setter
    def biases(self, _):
        raise parameters.read_only("biases", self.LOAD)
