"""Each network's schedules and forward solvers by name: what the commands' ``--schedule`` and ``--forward-solver``
take. A network (``model``) is ``"mlp"``, ``"rnn"`` or ``"dag"``; its schedules are its class's ``SCHEDULES`` by
their ``name``, its ``BASELINE`` first (what the others are measured against, on the main stream: it takes no
``k``). ``Sequential()``, which a network runs when given no schedule, is named only where it is the baseline.

    schedule_names("rnn")                     # ('bptt', 'leapfrog', 'wavefront', 'timescan', 'naumov-rnn')
    make_schedule("dag", "level-sets", k=4)   # LevelSets(k=4)
    refusal("rnn", "sequential")              # "unknown RNN schedule 'sequential'; choose from bptt, ..."
"""

import functools
import inspect

from ..core.schedules import Leapfrog, Sequential
from ..dag.forward import ForwardJacobi, ForwardNewton
from ..dag.network import DagNet
from ..mlp.network import MLP
from ..rnn.network import RNN
from ..rnn.newton import TimeNewton
from .cli import names

NETWORKS = {"mlp": MLP, "rnn": RNN, "dag": DagNet}
SOLVERS = {
    "dag": {"sequential": None, "jacobi": ForwardJacobi, "newton": ForwardNewton},
    "rnn": {"sequential": None, "newton": TimeNewton, "quasi-newton": functools.partial(TimeNewton, quasi=True)},
}
"""The forward solvers of the networks that take one, by name, ``sequential`` (the pass node by node, step by
step: no solver) first."""


def classes(model):
    """``model``'s schedule classes by name, its baseline first."""
    if model not in NETWORKS:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(NETWORKS)}")
    network = NETWORKS[model]
    rest = [cls for cls in network.SCHEDULES if cls not in (network.BASELINE, Sequential)]
    return {cls.name: cls for cls in [network.BASELINE, *rest]}


def schedule_names(model):
    """The names of ``model``'s schedules, its baseline first."""
    return tuple(classes(model))


def refusal(model, name):
    """``None`` when ``name`` is one of ``model``'s schedules, else one line that names the valid ones."""
    names = schedule_names(model)
    return None if name in names else f"unknown {model.upper()} schedule {name!r}; choose from {', '.join(names)}"


def takes_k(model, name):
    """Whether the schedule ``name`` of ``model`` runs gradients on ``k`` worker streams: all but the baseline."""
    return _class(model, name) is not NETWORKS[model].BASELINE


def make_schedule(model, name, k=2, fused=False, one_pass=False, memory_limit=None):
    """The schedule ``name`` of ``model``: with ``k`` worker streams where it takes them (``takes_k``),
    ``fused`` (the SGD update fused into the gradients' pass), ``one_pass`` (the MLP's sequential and
    leapfrog only) and ``memory_limit`` (bytes, for the solvers whose buffers grow past the weights'; None:
    their default). An unknown name raises ``ValueError`` with ``refusal``'s line."""
    cls = _class(model, name)
    options = {"fused": fused}
    if one_pass:
        if model != "mlp" or cls not in (Sequential, Leapfrog):
            raise ValueError(f"one_pass applies to the MLP's sequential and leapfrog, not the {model.upper()}'s {name}")
        options["one_pass"] = True
    if takes_k(model, name):
        options["k"] = k
    if memory_limit is not None and "memory_limit" in inspect.signature(cls).parameters:
        options["memory_limit"] = memory_limit
    return cls(**options)


def make_solver(model, name, memory_limit=None):
    """A new forward solver ``name`` of ``model`` (``SOLVERS``), with ``memory_limit`` (bytes, for the solvers whose
    buffers grow past the weights'; ``ForwardJacobi`` holds none; None: their default), or ``None`` for
    ``sequential``."""
    solver = SOLVERS[model][name]
    if solver is None:
        return None
    limited = memory_limit is not None and "memory_limit" in inspect.signature(solver).parameters
    return solver(**({"memory_limit": memory_limit} if limited else {}))


def names_type(model):
    """An argparse type: a comma-separated list of ``model``'s schedule names, an unknown one refused as
    ``refusal`` says it."""
    return names(schedule_names(model), f"{model.upper()} schedule")


def _class(model, name):
    why = refusal(model, name)
    if why:
        raise ValueError(why)
    return classes(model)[name]
