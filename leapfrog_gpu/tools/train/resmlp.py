"""``leapfrog-train --model resmlp``: an MLP with a skip connection every ``--skip`` hidden layers, a
``dag.network.residual`` network seen as the training loop sees an MLP.

Its ``Dense`` nodes are the MLP's layers 2..L, so ``weights`` and ``biases`` (and the checkpoints made
of them) have the MLP's shapes; the ``Add`` nodes have no parameters. It runs on one process, eagerly,
without ``--check-finite``: the options refuse the rest.
"""

from ...dag.network import residual


class ResidualMLP:
    """``dag.network.residual(sizes, skip, ...)`` with the MLP's ``sizes``, ``weights``, ``biases``,
    ``set_parameters``, ``sgd_step``, ``feedforward`` and ``synchronize``."""

    comm = None
    check_finite = False

    def __init__(self, sizes, skip, activation, cost, dtype, seed, backend, output_activation=None):
        self.sizes, self.cost, self.skip = list(sizes), cost, skip
        self.net = residual(sizes, skip=skip, activation=activation, output_activation=output_activation,
                            cost=cost, dtype=dtype, seed=seed, backend=backend)
        self.backend = self.net.backend
        self.dense_nodes = [str(l) for l in range(2, len(sizes) + 1)]

    def __repr__(self):
        return f"ResidualMLP({self.sizes}, skip={self.skip})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.net.close()

    @property
    def weights(self):
        params = self.net.parameters()
        return [params[l]["w"] for l in self.dense_nodes]

    @property
    def biases(self):
        params = self.net.parameters()
        return [params[l]["b"] for l in self.dense_nodes]

    def set_parameters(self, weights, biases):
        self.net.set_parameters({l: {"w": w, "b": b} for l, w, b in zip(self.dense_nodes, weights, biases)})

    def sgd_step(self, x, y, eta, schedule=None, graph=False):
        if graph:
            raise ValueError("--model resmlp runs eager steps only")
        self.net.sgd_step(x, y, eta, schedule)

    def feedforward(self, x):
        return self.net.feedforward(x)

    def synchronize(self):
        self.net.synchronize()
