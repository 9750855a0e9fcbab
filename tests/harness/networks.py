"""One network of every kind, for the tests that run over all three (``tests/core``: the contract, what the core
gives every network, the races): an ``MLP``, an ``RNN`` and a ``DagNet`` of every kind of node and join, each
with relu units (so that weights x 1e15 overflow float32), the batches they train on, and ``Mirror``, two
ranks in one process. The ``network_name`` fixture (``conftest.py``) runs a test over the three names."""

import numpy as np

from helpers import batch
from leapfrog_gpu import MLP, RNN, Add, Concat, Dense, DagNet, LayerNorm
from leapfrog_gpu.backends import collective
from leapfrog_gpu.parallel.comm import Communicator

NAMES = ("MLP", "RNN", "DagNet")
IN, OUT = 3, 2
TAU = 4
"""The RNN's sequence length: its batches are (TAU, IN, B), its targets at every step (TAU, OUT, B)."""
UNITS = {"MLP": [2, 3, 4, 5], "RNN": [2, 3, 4], "DagNet": ["h", "n", "g", "out"]}
"""The units each network's ``parameters()`` names, in order."""


def network(name, backend, seed=1, **options):
    """The network ``name`` ("MLP", "RNN" or "DagNet") on ``backend``, its parameters drawn by ``seed``, with
    ``options`` (``dtype``, ``comm``, ``check_finite``, the RNN's ``cell``, ...) passed on."""
    if name == "MLP":
        return MLP([IN, 6, 5, 4, OUT], activation="relu", seed=seed, backend=backend, **options)
    if name == "RNN":
        activation = "relu" if options.get("cell", "elman") == "elman" else "tanh"  # a gated cell's own
        return RNN([IN, 6, 5, OUT], activation=activation, output="every", seed=seed, backend=backend, **options)
    if name == "DagNet":  # a skip, a concatenation with the input, a layer norm: every kind of node and join
        return DagNet(IN, [("h", Dense(5, "relu"), "x"), ("n", LayerNorm(), "h"), ("g", Dense(5, "relu"), "n"),
                             ("s", Add(), ["g", "h"]), ("c", Concat(), ["s", "x"]), ("out", Dense(OUT, "relu"), "c")],
                        seed=seed, backend=backend, **options)
    raise ValueError(f"no network {name!r}; the names: {', '.join(NAMES)}")


def network_batch(name, size=4, seed=0, dtype=np.float32):
    """A batch of ``size`` samples for the network ``name``: ``helpers.batch``, for the RNN sequences of TAU
    steps with a target at each."""
    return batch([IN, OUT], size, seed, dtype, tau=TAU if name == "RNN" else None)


def arrays(params):
    """The arrays of ``parameters()`` (``{unit: {name: array}}``), in order, as host copies."""
    return [np.array(array) for named in params.values() for array in named.values()]


class Mirror(Communicator):
    """Rank ``rank`` of two in one process; the other rank holds the very same gradients, so every sum doubles
    them (on the host, or through the stand-in's NCCL on the CuPy backend), and every gather returns this
    rank's value twice. ``sums`` lists the size of each part summed on the host. Of a batch of one column
    rank 1's share is empty."""

    size = 2

    def __init__(self, rank=0, bucket_bytes=0):
        super().__init__(bucket_bytes)
        self.rank, self.sums = rank, []

    def allgather(self, value):
        return [value, value]

    def engine(self, backend):
        if backend.name != "numpy":
            if not hasattr(self, "nccl"):
                self.nccl = collective.NcclSum(backend.xp, self.size, self.rank, collective.nccl_unique_id())
            return self.nccl

        def double(part):
            self.sums.append(part.size)
            np.multiply(part, 2, out=part)

        return double
