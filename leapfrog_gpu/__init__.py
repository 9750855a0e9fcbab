"""leapfrog_gpu: deep networks whose weight gradients leapfrog the backward chain on k streams.

The library is one engine for three networks. ``core`` is what they share: the network base with its
public passes and step, the pass of one batch shape, the backward driver that hands gradients to k worker
streams, the schedules every network takes (``Sequential``, ``Leapfrog``), the triangular solvers, graph
mode, the checks of what a network is given and a network's file (``net.save(path)``, ``load(path)``). Beside it, one
package per network, each a peer of the others and importing none of them: ``mlp`` (``MLP``, Naumov's
solvers of its backward pass), ``rnn`` (``RNN``, BPTT and the scans over time) and ``dag`` (``DagNet``,
networks that are DAGs of layers, their schedules and forward solvers). ``parallel`` sums gradients across
processes; ``backends`` is where arrays live and how streams run; ``reference`` is the plain NumPy
reference in the book's notation; ``datasets`` the data ``leapfrog-train`` trains on, for ``net.fit`` too.
Imports point downwards only: tools -> networks -> core -> parallel -> backends.

>>> from leapfrog_gpu import MLP, Leapfrog
>>> net = MLP([64, 128, 128, 10], backend="numpy")
>>> net.sgd_step([0.5] * 64, [0.0] * 10, eta=0.1, schedule=Leapfrog(k=2))
>>> net.close()
"""

__version__ = "0.1.0"

_HOMES = {
    "get_backend": "backends", "Leapfrog": "core", "Sequential": "core",
    "SGD": "optimizers", "Adam": "optimizers", "AdamW": "optimizers",
    "MLP": "mlp", "NaumovScan": "mlp", "NaumovJacobi": "mlp",
    "RNN": "rnn", "BPTT": "rnn", "Wavefront": "rnn", "TimeScan": "rnn", "NaumovRNN": "rnn", "TimeNewton": "rnn",
    "DagNet": "dag", "Layer": "dag", "check_layer": "dag", "Dense": "dag", "Add": "dag", "Concat": "dag",
    "LayerNorm": "dag",
    "LevelSets": "dag", "DagJacobi": "dag", "DagDoubling": "dag", "ForwardJacobi": "dag", "ForwardNewton": "dag",
    "load": "saving",
}
"""Each public name and the package it comes from."""

__all__ = list(_HOMES)

_PACKAGES = ("backends", "core", "parallel", "mlp", "rnn", "dag", "reference", "datasets")
"""The library's modules and packages, imported when first asked for as attributes (``leapfrog_gpu.datasets``); not
``tools``, the commands above it."""


def __getattr__(name):
    """The public names, imported when first asked for: ``import leapfrog_gpu`` (which every module of the
    package runs first) imports nothing, so that a command starts, and answers Ctrl-C, at once."""
    from .core.renamed import RENAMED, old_name

    if name in RENAMED:  # kept once asked for: one warning where it is imported
        globals()[name] = old_name(__name__, name, __getattr__(RENAMED[name]))
        return globals()[name]
    if name in _PACKAGES:
        from importlib import import_module

        return import_module(f".{name}", __name__)
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOMES[name]
    if home == "backends":
        from . import backends as package
    elif home == "core":
        from .core import schedules as package
    elif home == "optimizers":
        from .core import optimizers as package
    elif home == "mlp":
        from . import mlp as package
    elif home == "rnn":
        from . import rnn as package
    elif home == "saving":
        from . import dag, mlp, rnn  # noqa: F401 (the networks a file may hold register themselves as they load)
        from .core import saving as package
    else:
        from . import dag as package
    value = getattr(package, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_PACKAGES))
