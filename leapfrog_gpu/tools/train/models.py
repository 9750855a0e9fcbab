"""The networks ``leapfrog-train`` trains (``--model``), each on its datasets (``leapfrog_gpu.datasets``): ``mlp``,
an ``MLP``; ``resmlp``, the same layers with a skip connection every ``--skip`` hidden layers where the widths agree
(``dag.network.residual``, a ``DagNet`` whose parameters are named as the MLP's); ``rnn``, an ``RNN`` of ``--cell``
recurrent layers on sequences, with an output at the last step or at every step. The DAG's and the RNN's forward
pass may be solved (``--forward-solver``: ``dag.forward``, ``rnn.newton``). The loop sees them as what the three
share (``core.network.Network``).
"""

from ... import datasets
from ...dag.network import residual
from ...mlp.network import MLP
from ...rnn.network import RNN
from ..schedules import SOLVERS, make_schedule, make_solver
from . import checkpoint

DATA = {"mlp": ("digits", "mnist", "teacher"), "resmlp": ("digits", "mnist", "teacher"),
        "rnn": ("digits", "pixels", "teacher", "adding")}
"""The datasets each model trains on (``--data``)."""

REGRESSION = ("teacher", "adding")
"""The datasets of real targets (the others are classes)."""

READ = ("digits", "pixels", "mnist")
"""The datasets read from files, of the same bits on any machine: a checkpoint keeps their digest. The others are
drawn and computed as the run starts (their targets by BLAS products, whose last bits vary between CPUs): their
options, which a checkpoint fixes, make them."""

LAST_STEP = ("digits", "pixels", "adding")
"""The sequence tasks with one target, at the last step (the teacher RNN's are at every step)."""

NETWORK = {"mlp": "mlp", "resmlp": "dag", "rnn": "rnn"}
"""Each model's network, by its name in the table of schedules (``leapfrog_gpu.tools.schedules``)."""

FORWARD_SOLVERS = {model: tuple(SOLVERS[network]) for model, network in NETWORK.items() if network in SOLVERS}
"""``--forward-solver``: the names each model that takes one takes (``tools.schedules.SOLVERS``), the
default first."""


def dataset(config):
    """The dataset of ``config`` (``--data`` for ``--model``), in its dtype."""
    dtype = config["dtype"]
    if config["model"] == "rnn":
        if config["data"] == "digits":
            return datasets.digits_by_rows(dtype)
        if config["data"] == "pixels":
            return datasets.digits_by_pixels(dtype)
        if config["data"] == "adding":
            return datasets.adding(config["tau"], config["samples"], dtype=dtype)
        return datasets.teacher_rnn(config["inputs"], config["outputs"], config["tau"], config["samples"], dtype=dtype)
    if config["data"] == "digits":
        return datasets.digits(dtype)
    if config["data"] == "mnist":
        return datasets.mnist(config["data_dir"], dtype)
    return datasets.teacher([config["inputs"], *config["hidden"], config["outputs"]], config["samples"], dtype=dtype)


def sizes(config, dataset):
    """The widths n_1..n_L of the network: the data's inputs, ``--hidden``, the data's outputs."""
    return [dataset.inputs, *config["hidden"], dataset.outputs]


def network(config, dataset, backend, comm=None):
    """The network of ``config`` for ``dataset`` on ``backend``, data-parallel over ``comm``."""
    return _network(config, sizes(config, dataset), bool(dataset.classes), backend, comm)


def load(directory, backend="auto"):
    """The network that ``leapfrog-train`` checkpointed in ``directory`` at the last step it completed, as its
    ``--model`` was, on ``backend`` (a name or a backend object); close it when done (``with``). ``leapfrog_gpu.load``
    of its checkpoint.npz, or for an older checkpoint, the network built from the run's options. A file that is not
    such a checkpoint, or does not fit, raises ``checkpoint.CheckpointError`` (one line)."""
    arrays, state = checkpoint.read(directory)
    if "format" in state:
        return checkpoint.built(directory, arrays, state, backend)
    config = state.get("config")
    built_by = {"data", "activation", "cost", "dtype", "seed"}
    if "sizes" not in state or not isinstance(config, dict) or not built_by <= set(config):
        raise checkpoint.CheckpointError(f"{checkpoint.path_in(directory)} holds no leapfrog-train options to build "
                                         f"its network from: {checkpoint.REMEDY}")
    config = {**checkpoint.LATER, **config, "check_finite": False}
    net = _network(config, state["sizes"], config["data"] not in REGRESSION, backend, None)
    try:
        checkpoint.restore(net, arrays, directory)
    except BaseException:
        net.close()
        raise
    return net


def _network(config, widths, classes, backend, comm):
    """A sigmoid output under cross-entropy for classes, an identity output for regression; an RNN's output
    at the last step where its task has its one target (``LAST_STEP``), else at every step."""
    options = dict(activation=config["activation"], cost=config["cost"], dtype=config["dtype"], seed=config["seed"],
                   backend=backend, output_activation=None if classes else "identity",
                   check_finite=config["check_finite"], comm=comm)
    if config["model"] == "resmlp":
        return residual(widths, skip=config["skip"], **options)
    if config["model"] == "rnn":
        return RNN(widths, output="last" if config["data"] in LAST_STEP else "every", cell=config["cell"], **options)
    return MLP(widths, **options)


def name(config):
    """The model in the header's words."""
    if config["model"] == "resmlp":
        every = "hidden layer" if config["skip"] == 1 else f"{config['skip']} hidden layers"
        return f"residual MLP (a skip every {every})"
    if config["model"] == "rnn" and config["cell"] != "elman":
        return f"RNN of {config['cell'].upper()} cells"
    return config["model"].upper()


def forward_solver(config):
    """A new solver of the forward pass that ``--forward-solver`` names, or ``None`` (node by node, step by
    step; the MLP has no other), with ``--memory-limit``."""
    if config["model"] not in FORWARD_SOLVERS:
        return None
    return make_solver(NETWORK[config["model"]], config["forward_solver"], memory_limit(config))


def schedule(config, name=None, k=None, fused=None):
    """The schedule of ``config`` (``--schedule``, ``--k``, ``--fused``; or ``name``, ``k``, ``fused`` given), with
    ``--memory-limit``."""
    return make_schedule(NETWORK[config["model"]], name or config["schedule"], k or config["k"],
                         config["fused"] if fused is None else fused, memory_limit=memory_limit(config))


def memory_limit(config):
    """``--memory-limit`` in bytes, or None for the library's default (``core.checks.MEMORY_LIMIT``)."""
    return None if config.get("memory_limit") is None else max(1, round(config["memory_limit"] * 2**30))
