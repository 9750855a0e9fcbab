"""``leapfrog-train``'s options: the command line, every default (each model's), and the run's config from
them (and, on ``--resume``, from the checkpoint)."""

import argparse
import os

from ...parallel import comm as parallel
from ...backends import ops_numpy
from ...core.functions import ACTIVATIONS, COSTS, DTYPES
from ...core.optimizers import SGD, Adam, AdamW
from ...rnn.cells import ACTIVATION, CELLS
from ..cli import Parser, integer, number, pip_install, png_refusal
from ..schedules import schedule_names
from .checkpoint import LATER
from .metrics import Divergence
from .models import DATA, FORWARD_SOLVERS, NETWORK, REGRESSION
from . import values

PROG = "leapfrog-train"

MODELS = tuple(DATA)
"""``--model``: mlp, resmlp, rnn (``models``)."""

DEFAULTS = {
    "data": "digits", "data_dir": None, "inputs": 64, "outputs": 10, "samples": 4096, "tau": 16,
    "model": "mlp", "skip": 2, "hidden": [128] * 4, "activation": "tanh", "cost": None, "dtype": "float32",
    "epochs": 30, "batch_size": 32, "lr": None, "seed": 0, "schedule": "leapfrog", "k": 2, "fused": False,
    "forward_solver": "sequential", "cell": "elman", "graph": False, "backend": "auto", "blas_threads": 1,
    "check_finite": False, "allow_divergence": False, "quiet": False, "metrics": None, "checkpoint_dir": None,
    "resume": False, "profile_steps": None, "timeline": None, "bucket_mb": 0.0,
    "comm_timeout": parallel.DEFAULT_TIMEOUT, "optimizer": "sgd", "momentum": None, "nesterov": False,
    "weight_decay": None, "betas": None, "eps": None, "clip_grad_norm": None, "yes": False,
}
"""Every option's default for ``--model mlp`` and ``resmlp`` (``lr``: the data's, ``LR``). The digits default
reaches about 97 % test accuracy in 30 epochs."""

RNN_DEFAULTS = {"hidden": [64], "epochs": 20, "batch_size": 16, "inputs": 4, "outputs": 2, "samples": 2048}
"""What ``--model rnn`` takes otherwise: about 96 % test accuracy on the digits read row by row."""

RNN_DATA_DEFAULTS = {"adding": {"optimizer": "adam", "hidden": [32], "epochs": 10, "batch_size": 32,
                                "samples": 4096}}
"""What ``--model rnn`` takes on some datasets instead; on adding, Adam's lr is ``ADDING_LR``: a GRU falls from
chance (MSE 1/6) below 0.01 in 2 epochs at tau = 100, where SGD stays at chance (docs/rnn.md)."""
ADDING_LR = 0.01

LR = {"digits": 0.1, "pixels": 0.02, "mnist": 0.1, "teacher": 0.01, "adding": 0.02}
"""Each dataset's default learning rate. The teacher's quadratic cost sums over its outputs, so its
gradients are larger: with the default network its loss becomes NaN in the first epoch from about
``--lr 0.04``, and 0.01 leaves a margin of four."""

RNN_TEACHER_LR = 0.08
"""``--model rnn --data teacher`` learns at ``RNN_TEACHER_LR / tau`` by default (0.005 at tau = 16). Its cost
sums over the tau time steps, so a step's gradient grows with tau: for the default network the loss
becomes NaN (or stalls) from lr·tau of about 0.16 at any tau from 8 to 64, and 0.08 leaves a margin of two."""

EXIT_STATUSES = [
    (0, "done"),
    (2, "a bad option, data file or checkpoint (one line on stderr)"),
    (3, "the loss (or, with --check-finite, a gradient) became NaN or Inf, or the run diverged; a checkpoint "
        "already written is kept as it was"),
    (130, "stopped by Ctrl-C, after a checkpoint of the last completed step (more Ctrl-Cs within 2 s are the "
          "same one; a later one stops at once)"),
    (141, "stdout closed (| head): stopped at the line it could not write, without a traceback"),
    (1, "under mpiexec: an unexpected error on one rank (which ends every rank; so do the statuses above)"),
    (4, "under mpiexec: a rank waited --comm-timeout seconds in vain for the others"),
]
"""What the command's exit status means, as ``--help`` lists it."""

OPTIMIZER = ("optimizer", "momentum", "nesterov", "weight_decay", "betas", "eps")
"""The options that make the optimizer but its learning rate (``make_optimizer``)."""

FIXED = ("data", "inputs", "outputs", "samples", "hidden", "activation", "cost", "dtype", "seed", "batch_size")
"""What a resumed run must keep: it defines the network, the data or the order of the batches (and, as
``checkpoint.LATER`` has them, the optimizer, whose state the checkpoint holds)."""

OPTIMIZER_LR = 0.001
"""The learning rate of ``--optimizer adam`` and ``adamw`` when ``--lr`` is not given: torch.optim's."""

OPTIMIZER_ONLY = {"momentum": ("sgd", "momentum"), "nesterov": ("sgd", "momentum"), "betas": ("adam", "adamw"),
                  "eps": ("adam", "adamw")}
"""Options that apply to some ``--optimizer``s only."""

RESUMED = FIXED + ("data_dir", "epochs", "lr", "schedule", "k", "fused")
"""What ``--resume`` takes from the checkpoint unless given again; the rest belongs to this run."""

PER_RANK = ("quiet", "metrics", "profile_steps", "timeline")
"""Options that may differ between ranks; every other option must be the same on all of them."""

ONLY = {"data_dir": (("mnist",), None), "inputs": (("teacher",), None), "outputs": (("teacher",), None),
        "samples": (("teacher", "adding"), None), "skip": (None, ("resmlp",)), "tau": (("teacher", "adding"), ("rnn",)),
        "forward_solver": (None, tuple(FORWARD_SOLVERS)), "cell": (None, ("rnn",))}
"""Options that apply to one ``--data`` or to some ``--model``s only (None: any): the others refuse them."""

TIMELINE_STEPS = [10, 15]
"""The window ``--timeline`` records when ``--profile-steps`` is not given: 5 steps after 10 of warm-up."""


class UsageError(ValueError):
    """A bad option or combination of options: exit status 2."""


def make_optimizer(config):
    """The optimizer of ``config`` (``core.optimizers``): ``--optimizer`` with ``--lr``, ``--momentum`` (0.9 for
    ``momentum``), ``--nesterov``, ``--weight-decay``, ``--betas`` and ``--eps``, torch.optim's defaults for what
    is not given; a ``UsageError`` of one line for a bad combination."""
    kind, given = config["optimizer"], {key: config[key] for key in ("weight_decay", "betas", "eps")
                                        if config[key] is not None}
    try:
        if kind in ("sgd", "momentum"):
            momentum = config["momentum"] if config["momentum"] is not None else 0.9 if kind == "momentum" else 0
            return SGD(config["lr"], momentum=momentum, nesterov=config["nesterov"], **given)
        return (Adam if kind == "adam" else AdamW)(config["lr"], **given)
    except ValueError as error:
        raise UsageError(f"--optimizer {kind}: {error}") from None


def hidden_given(given, base):
    """``given`` with ``--layers`` and ``--width`` turned into ``hidden``: N layers of W, the one not given taken
    from ``base`` (the default's or the checkpoint's widths); a ``UsageError`` beside ``--hidden``."""
    if "layers" not in given and "width" not in given:
        return given
    given = dict(given)
    layers, width = given.pop("layers", None), given.pop("width", None)
    if "hidden" in given:
        raise UsageError("--hidden and --layers/--width say the same thing: give one of them")
    if width is None and len(set(base)) > 1:
        raise UsageError(f"--layers {layers} needs --width W: the widths {_show(base)} differ")
    given["hidden"] = [base[0] if width is None else width] * (len(base) if layers is None else layers)
    return given


def model_named(argv):
    """The ``--model`` that ``argv`` names (``--model M`` or ``--model=M``), or the default: whose options
    ``--help`` shows. The parser itself reads it again, and refuses a model that is not one."""
    for arg, following in zip(argv, [*argv[1:], None]):
        name, equals, value = str(arg).partition("=")
        if name == "--model" and (value if equals else following) in MODELS:
            return value if equals else following
    return DEFAULTS["model"]


def defaults(model, data=None):
    """Every option's default for ``model`` (on ``data``, when its defaults differ: ``RNN_DATA_DEFAULTS``)."""
    return {**DEFAULTS, **({**RNN_DEFAULTS, **RNN_DATA_DEFAULTS.get(data, {})} if model == "rnn" else {})}


def default_lr(config):
    """The learning rate a run takes when ``--lr`` is not given: its dataset's (``LR``, ``RNN_TEACHER_LR``); Adam's
    and AdamW's, ``OPTIMIZER_LR``."""
    if config["optimizer"] in ("adam", "adamw"):
        return ADDING_LR if config["model"] == "rnn" and config["data"] == "adding" else OPTIMIZER_LR
    if config["model"] == "rnn" and config["data"] == "teacher":
        return RNN_TEACHER_LR / config["tau"]
    return LR[config["data"]]


DESCRIPTIONS = {
    "mlp": "Train a deep MLP whose weight gradients leapfrog the backward chain.",
    "resmlp": "Train a residual MLP (a DagNet: the MLP's layers with a skip connection every --skip hidden "
              "layers) whose weight gradients leapfrog its backward pass.",
    "rnn": "Train a recurrent network (RNN) by backpropagation through time, its weight gradients leapfrogging "
           "the chain over layers and time steps.",
}

DATA_HELP = {
    "digits": "scikit-learn's 8x8 digits", "mnist": "local files (--data-dir)",
    "teacher": "regression on a random deep network",
}

RNN_DATA_HELP = {
    "digits": "the 8x8 digits read row by row (8 steps of 8 pixels, the class at the last step)",
    "pixels": "the 8x8 digits read pixel by pixel (64 steps of one pixel, the class at the last step)",
    "teacher": "regression on a random teacher RNN, a target at every step (--tau)",
    "adding": "the adding problem: the sum of the two marked values of a sequence, at its last step (--tau)",
}


def build_parser(model=DEFAULTS["model"]):
    """The command line, its help written for ``model``: that model's defaults, datasets and schedules,
    and only the options that apply to it (every option is parsed for any model; ``configure`` refuses
    those that do not apply). Defaults are left out of the namespace so that ``--resume`` can tell what
    was given (``defaults`` holds them)."""
    others = " and ".join(f"--model {m} --help" for m in MODELS if m != model)
    p = Parser(prog=PROG, description=f"{DESCRIPTIONS[model]} ({others}: the options of the other models)",
               exit_statuses=EXIT_STATUSES, argument_default=argparse.SUPPRESS)
    d, rnn = defaults(model), model == "rnn"

    def shown(help, *models):
        """``help`` where ``model`` takes the option, else hidden."""
        return help if model in models else argparse.SUPPRESS

    group = p.add_argument_group("data")
    words = RNN_DATA_HELP if rnn else DATA_HELP
    group.add_argument("--data", choices=tuple(dict.fromkeys(sum(DATA.values(), ()))),
                       metavar="{" + ",".join(DATA[model]) + "}",
                       help="; ".join(f"{name}: {words[name]}" for name in DATA[model]) + f" (default {d['data']})")
    group.add_argument("--data-dir", metavar="DIR", help=shown(
        "mnist: a folder with the four IDX files (gzipped or not) or one .npz", "mlp", "resmlp"))
    group.add_argument("--inputs", type=integer(1), metavar="N", help=f"teacher: input width (default {d['inputs']})")
    group.add_argument("--outputs", type=integer(1), metavar="N",
                       help=f"teacher: output width (default {d['outputs']})")
    group.add_argument("--samples", type=integer(1), metavar="N",
                       help=f"teacher: training {'sequences' if rnn else 'samples'}, plus a quarter as many test "
                            f"ones (default {d['samples']})")
    group.add_argument("--tau", type=integer(1), metavar="T",
                       help=shown(f"teacher, adding: time steps of a sequence (default {d['tau']})", "rnn"))
    group = p.add_argument_group("model and schedule")
    group.add_argument("--model", choices=MODELS,
                       help="mlp: the chain of layers; resmlp: the same layers with a skip connection every --skip "
                            "hidden layers, a DagNet; rnn: a recurrent network on sequences "
                            f"(default {d['model']}; --model M --help: the options of M)")
    group.add_argument("--skip", type=integer(1), metavar="N",
                       help=shown(f"hidden layers per skip connection (default {d['skip']})", "resmlp"))
    group.add_argument("--hidden", type=values.hidden, metavar="SPEC",
                       help=f"{'recurrent' if rnn else 'hidden'} widths: 128,64,32, 6x128 (6 layers of 128) or "
                            f"2x128,64 (default {_show(d['hidden'])})")
    group.add_argument("--layers", type=integer(1), metavar="N",
                       help=f"N {'recurrent' if rnn else 'hidden'} layers of --width W, instead of --hidden")
    group.add_argument("--width", type=integer(1), metavar="W", help="the width of each of the --layers")
    group.add_argument("--cell", choices=CELLS, help=shown(
        f"the recurrent layers' cell: Elman's, or PyTorch's GRU or LSTM (default {d['cell']})", "rnn"))
    group.add_argument("--activation", choices=tuple(ACTIVATIONS),
                       help=f"{'recurrent' if rnn else 'hidden'} layers (default {d['activation']})")
    group.add_argument("--cost", choices=tuple(COSTS),
                       help="default cross_entropy (with a sigmoid output) for classification, quadratic "
                            "(with an identity output) for teacher" + (" and adding; summed over the time steps"
                                                                         if rnn else ""))
    group.add_argument("--dtype", choices=DTYPES, help=f"(default {d['dtype']})")
    group.add_argument("--epochs", type=integer(1), metavar="N", help=f"epochs in all (default {d['epochs']})")
    group.add_argument("--batch-size", type=integer(1), metavar="B",
                       help=f"at most the number of training samples (default {d['batch_size']})")
    rates = [f"{LR[name]} for {name}" if not (rnn and name == "teacher") else f"{RNN_TEACHER_LR}/tau for teacher"
             for name in DATA[model]]
    group.add_argument("--lr", type=number(0), metavar="ETA",
                       help=f"learning rate: w -= ETA/B * nabla_w (default {', '.join(rates)})")
    group.add_argument("--optimizer", choices=("sgd", "momentum", "adam", "adamw"),
                       help="torch.optim's rules, fused into the workers' update with --fused: sgd (w -= lr * g, "
                            "g the gradient of the batch-mean cost), momentum (SGD with --momentum), adam, adamw "
                            f"(default {d['optimizer']}; --lr defaults to {OPTIMIZER_LR} for adam and adamw)"
                            + ("; --data adding: " + " ".join(f"--{key.replace('_', '-')} {_show(value)}" for key, value in
                                                 RNN_DATA_DEFAULTS["adding"].items()) + f" --lr {ADDING_LR}"
                               if rnn else ""))
    group.add_argument("--momentum", type=number(0), metavar="MU",
                       help="sgd and momentum: the momentum (default 0 for sgd, 0.9 for momentum)")
    group.add_argument("--nesterov", action="store_true", help="sgd and momentum: Nesterov's momentum")
    group.add_argument("--weight-decay", type=number(0), metavar="WD",
                       help="L2 weight decay added to the gradient (adamw: decoupled, w *= 1 - lr WD) "
                            "(default 0, 0.01 for adamw)")
    group.add_argument("--betas", type=values.betas, metavar="B1,B2", help="adam and adamw (default 0.9,0.999)")
    group.add_argument("--eps", type=number(0, strict=True), metavar="EPS", help="adam and adamw (default 1e-8)")
    group.add_argument("--clip-grad-norm", type=number(0, strict=True), metavar="N",
                       help="scale the gradients so that their global norm is at most N before each update "
                            "(torch.nn.utils.clip_grad_norm_); needs the update after the join: not with --fused")
    group.add_argument("--seed", type=integer(0), metavar="S",
                       help=f"initial parameters and the order of the batches (default {d['seed']})")
    names = schedule_names(NETWORK[model])
    group.add_argument("--schedule", metavar="{" + ",".join(names) + "}",
                       help=f"the backward pass: {names[0]} on one stream, or a schedule with --k worker streams "
                            f"(default {d['schedule']})")
    group.add_argument("--k", type=integer(1), metavar="K", help=f"worker streams of the schedule (default {d['k']})")
    solvers = FORWARD_SOLVERS.get(model, ())
    group.add_argument("--forward-solver", metavar="{" + ",".join(solvers) + "}", help=shown(
        ("the forward pass: step by step, or solved over time by Newton's method (quasi-newton: the Jacobians' "
         "diagonals only; leapfrog_gpu.rnn.newton); with --schedule timescan the step is parallel in time"
         if rnn else "the forward pass: node by node, or solved as a system by Jacobi sweeps or Newton's method "
                     "(leapfrog_gpu.dag.forward)") + f" (default {d['forward_solver']})", *FORWARD_SOLVERS))
    group.add_argument("--fused", action="store_true",
                       help="fuse the SGD update into the weight-gradient kernel: fewer bytes, the same formula per "
                            "element (bitwise the unfused result on the GPU; with numpy, at batch size 1 or for layers "
                            f"of at most {ops_numpy.SCRATCH} weights)")
    group.add_argument("--graph", action="store_true",
                       help="run each step as a graph, captured once per batch size (CUDA graphs on the GPU)")
    group.add_argument("--check-finite", action="store_true",
                       help="check every gradient for NaN/Inf before each update and stop (exit 3) without it")
    group.add_argument("--allow-divergence", action="store_true",
                       help=f"go on when the training loss grows past {Divergence.GROWTH:g}x its start, or stays "
                            f"at or above chance level (what a constant output scores) for {Divergence.PATIENCE} "
                            "epochs in a row; without it, such a run stops with exit status 3")
    group.add_argument("--backend", choices=("auto", "numpy", "cupy"),
                       help="auto: cupy when a CUDA device is usable, else numpy (default auto)")
    group.add_argument("--blas-threads", type=integer(1), metavar="N",
                       help="numpy backend: BLAS threads per host stream, for its matrix products (default 1: the "
                            "streams are threads already)")
    group.add_argument("--yes", action="store_true", help="start a run estimated at more than 10x the leapfrog "
                       "schedule's without asking (docs/training.md)")
    group = p.add_argument_group("output and checkpoints")
    group.add_argument("--quiet", action="store_true", help="no progress bar or epoch lines, only the result")
    group.add_argument("--metrics", metavar="FILE",
                       help="write one JSON line per epoch to FILE (appended to on --resume; docs/training.md)")
    group.add_argument("--checkpoint-dir", metavar="DIR", help="write DIR/checkpoint.npz after every epoch")
    group.add_argument("--resume", action="store_true",
                       help="continue from the checkpoint in --checkpoint-dir, with its options unless given")
    group.add_argument("--profile-steps", type=values.profile_steps, metavar="A:B",
                       help="steps A..B-1: CUDA profiler start/stop (cupy), NVTX ranges, and the --timeline window")
    group.add_argument("--timeline", metavar="FILE.png",
                       help="stamp every launch of the --profile-steps window (default 10:15): busy time per stream, "
                            "worker overlap, a Gantt chart, and FILE.json (needs matplotlib; rank 0 under mpiexec)")
    group = p.add_argument_group("data parallel (under mpiexec -n P; --batch-size is per rank)")
    group.add_argument("--bucket-mb", type=number(0, what="a number of MB"), metavar="MB",
                       help="sum the gradients of consecutive layers together up to MB (default 0: each layer alone)")
    group.add_argument("--comm-timeout", type=number(0, strict=True, what="a number of seconds"), metavar="S",
                       help=f"stop every rank when one waits S seconds for the others (default {d['comm_timeout']:g})")
    return p


def configure(given, saved=None):
    """The run's config from the options ``given`` and, on ``--resume``, the checkpoint's ``saved``."""
    kept = None if saved is None else {**LATER, **saved}
    config = defaults(*(given.get(key, (kept or DEFAULTS)[key]) for key in ("model", "data")))
    given = hidden_given(given, (kept or config)["hidden"])
    if kept is not None:
        for key in FIXED + OPTIMIZER + ("model", "skip", "tau", "cell"):
            if key in given and given[key] != kept[key]:
                raise UsageError(
                    f"--{key.replace('_', '-')} {_show(given[key])} differs from the checkpoint's "
                    f"{_show(kept[key])}; drop it to resume, or start a new --checkpoint-dir"
                )
        config.update({key: kept[key] for key in RESUMED + tuple(LATER)})
    config.update(given)
    model = config["model"]
    if config["data"] not in DATA[model]:
        raise UsageError(f"--model {model} trains on --data {' or '.join(DATA[model])}; got {config['data']}")
    for key, (data, only) in ONLY.items():
        if key in given and (data is not None and config["data"] not in data or model not in (only or MODELS)):
            where = " ".join(f"--{what} {name}" for what, name in
                             (("model", only and " or ".join(only)), ("data", data and " or ".join(data))) if name)
            raise UsageError(f"--{key.replace('_', '-')} applies to {where} only")
    solvers = FORWARD_SOLVERS.get(model, ())
    if solvers and config["forward_solver"] not in solvers:
        raise UsageError(f"--forward-solver {config['forward_solver']} is not a forward solver of --model {model}; "
                         f"choose from {', '.join(solvers)}")
    if model == "rnn" and config["graph"] and config["forward_solver"] != solvers[0]:
        raise UsageError(f"--graph captures the step-by-step forward pass, and --forward-solver "
                         f"{config['forward_solver']} stops on a residual read on the host: drop one of them")
    names = schedule_names(NETWORK[model])
    if config["schedule"] not in names:
        raise UsageError(f"--schedule {config['schedule']} is not a schedule of --model {model}; choose from "
                         f"{', '.join(names)}")
    for key, kinds in OPTIMIZER_ONLY.items():
        if key in given and config["optimizer"] not in kinds:
            raise UsageError(f"--{key.replace('_', '-')} applies to --optimizer {' or '.join(kinds)} only")
    if config["lr"] is None:
        config["lr"] = default_lr(config)
    make_optimizer(config)
    if config["fused"] and config["clip_grad_norm"] is not None:
        raise UsageError("--clip-grad-norm needs every gradient before any update: drop --fused")
    if config["data"] == "mnist" and not config["data_dir"]:
        raise UsageError("--data mnist needs --data-dir DIR (the four MNIST IDX files or one .npz)")
    if config["data"] in REGRESSION and config["cost"] == "cross_entropy":
        raise UsageError(f"--data {config['data']} is a regression task: use --cost quadratic")
    if config["data"] == "adding" and config["tau"] < 2:
        raise UsageError(f"--data adding marks a step in each half of a sequence: it needs --tau 2 or more; got "
                         f"{config['tau']}")
    if config["cell"] != "elman" and config["activation"] != ACTIVATION:
        raise UsageError(f"--cell {config['cell']} has its own activation, {ACTIVATION}: drop --activation "
                         f"{config['activation']}")
    if config["fused"] and config["check_finite"]:
        raise UsageError("--check-finite needs the update after the gradients: drop --fused")
    if config["timeline"] is not None:
        _check_timeline(config)
    return config


def _check_timeline(config):
    refusal = png_refusal("--timeline", config["timeline"], " (its intervals go beside it, in .json)")
    if refusal:
        raise UsageError(refusal)
    folder = os.path.dirname(os.path.abspath(config["timeline"]))
    if not os.path.isdir(folder):
        raise UsageError(f"--timeline {config['timeline']}: the folder {folder} does not exist")
    if config["graph"]:
        raise UsageError("--timeline stamps every launch of eager steps, and a graph step is one launch: "
                         "drop --graph or --timeline")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--timeline needs matplotlib: {pip_install('plot')}") from None


def profile_window(config):
    """The steps ``[A, B)`` of the profiling window: ``--profile-steps``, or with ``--timeline`` alone,
    ``TIMELINE_STEPS``; ``None`` for no window."""
    if config["profile_steps"] is None and config["timeline"] is not None:
        return TIMELINE_STEPS
    return config["profile_steps"]


def _show(value):
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
