"""leapfrog_gpu: deep MLPs whose weight gradients leapfrog the backward chain on k streams.

This top level is the library: the network, its parameters and its public API (``network``), the
buffers, events and launches of a pass at one batch size (``plan``), the schedules of a pass
(``schedules``, ``naumov``) and their names (``registry``), graph mode (``graphs``), data parallelism
(``parallel``, the transport; ``data_parallel``, what a network does with it), networks that are DAGs
of layers (``graphnet``, ``layers``) with their backward schedules (``dag_schedules``) and forward
solvers (``forward_solvers``), the recurrent network (``rnn``, its pass ``rnn_pass``, its schedules
``rnn_schedules`` and ``rnn_scans``, its reference ``reference_rnn``), the names of activations and
costs (``functions``), the checks of given parameters (``parameters``) and their way to and from
PyTorch (``torch_io``), the plain NumPy reference
(``reference``) and the calibration behind ``Leapfrog("auto")`` (``autotune``). It imports ``backends``
(where arrays live and how streams run) and never ``tools`` (the commands built on it): imports point
downwards only, tools -> library -> backends.

>>> from leapfrog_gpu import MLP, Leapfrog
>>> net = MLP([64, 128, 128, 10], backend="numpy")
>>> net.sgd_step([0.5] * 64, [0.0] * 10, eta=0.1, schedule=Leapfrog(k=2))
>>> net.close()
"""

__all__ = ["MLP", "RNN", "BPTT", "Leapfrog", "NaumovJacobi", "NaumovRNN", "NaumovScan", "Sequential", "TimeScan",
           "Wavefront", "get_backend", "GraphNet", "Dense", "Add", "Concat", "LayerNorm", "Layer", "LevelSets",
           "DagJacobi", "DagDoubling", "ForwardJacobi", "ForwardNewton"]
__version__ = "0.1.0"


def __getattr__(name):
    """The public names, imported when first asked for: ``import leapfrog_gpu`` (which every module of the
    package runs first) imports nothing, so that a command starts, and answers Ctrl-C, at once."""
    if name == "get_backend":
        from .backends import get_backend as value
    elif name in ("NaumovJacobi", "NaumovScan"):
        from . import naumov
        value = getattr(naumov, name)
    elif name == "MLP":
        from .network import MLP as value
    elif name == "RNN":
        from .rnn import RNN as value
    elif name in ("BPTT", "Wavefront"):
        from . import rnn_schedules
        value = getattr(rnn_schedules, name)
    elif name in ("TimeScan", "NaumovRNN"):
        from . import rnn_scans
        value = getattr(rnn_scans, name)
    elif name in ("Leapfrog", "Sequential"):
        from . import schedules
        value = getattr(schedules, name)
    elif name == "GraphNet":
        from .graphnet import GraphNet as value
    elif name in ("Dense", "Add", "Concat", "LayerNorm", "Layer"):
        from . import layers
        value = getattr(layers, name)
    elif name in ("LevelSets", "DagJacobi", "DagDoubling"):
        from . import dag_schedules
        value = getattr(dag_schedules, name)
    elif name in ("ForwardJacobi", "ForwardNewton"):
        from . import forward_solvers
        value = getattr(forward_solvers, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
