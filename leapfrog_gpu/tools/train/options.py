"""``leapfrog-train``'s options: the command line, every default (each model's), and the run's config from
them (and, on ``--resume``, from the checkpoint)."""

import argparse

from ...parallel import comm as parallel
from ...backends import ops_numpy
from ...core.functions import ACTIVATIONS, COSTS, DTYPES
from ...core.optimizers import SGD, Adam, AdamW
from ...rnn.cells import CELLS
from .. import CLOSED_PIPE_STATUS
from ..cli import UNWRITTEN, Parser, blas_threads, integer, integer_or_auto, number, path, reals
from ..schedules import schedule_names
from .checkpoint import LATER
from .metrics import Divergence
from .refusals import APPLIES, applies, refusal
from .models import DATA, FORWARD_SOLVERS, NETWORK
from . import values
from .values import dashed, written

PROG = "leapfrog-train"

MODELS = tuple(DATA)

DEFAULTS = {
    "data": "digits", "data_dir": None, "inputs": 64, "outputs": 10, "samples": 4096, "tau": 16,
    "model": "mlp", "skip": 2, "hidden": [128] * 4, "activation": "tanh", "cost": None, "dtype": "float32",
    "epochs": 30, "batch_size": 32, "lr": None, "seed": 0, "schedule": "leapfrog", "k": 2, "fused": False,
    "forward_solver": "sequential", "cell": "elman", "graph": False, "backend": "auto", "blas_threads": 1,
    "check_finite": False, "allow_divergence": False, "quiet": False, "metrics": None, "checkpoint_dir": None,
    "resume": False, "profile_steps": None, "timeline": None, "bucket_mb": 0.0, "memory_limit": None,
    "comm_timeout": parallel.DEFAULT_TIMEOUT, "optimizer": "sgd", "momentum": None, "nesterov": False,
    "weight_decay": None, "betas": None, "eps": None, "clip_grad_norm": None, "yes": False,
}
"""Every option's default for ``--model mlp`` and ``resmlp`` (``lr``: ``default_lr``). The digits default reaches
about 97 % test accuracy in 30 epochs."""

RNN_DEFAULTS = {"hidden": [64], "epochs": 20, "batch_size": 16, "inputs": 4, "outputs": 2, "samples": 2048}
"""What ``--model rnn`` takes otherwise: about 96 % test accuracy on the digits read row by row."""

RNN_DATA_DEFAULTS = {"adding": {"optimizer": "adam", "hidden": [32], "epochs": 10, "batch_size": 32, "samples": 4096}}
"""What ``--model rnn`` takes on some datasets instead; on adding, Adam's lr is ``ADDING_LR``: a GRU falls from
chance (MSE 1/6) below 0.01 in 2 epochs at tau = 100, where SGD stays at chance (docs/rnn.md)."""
ADDING_LR = 0.01

LR = {"digits": 0.1, "pixels": 0.02, "mnist": 0.1, "teacher": 0.01, "adding": 0.02}
"""Each dataset's default learning rate under SGD. The teacher's quadratic cost sums over its outputs, so its
gradients are larger: with the default network its loss becomes NaN in the first epoch from about
``--lr 0.04``, and 0.01 leaves a margin of four."""

MOMENTUM = 0.9
"""``--optimizer momentum``'s momentum mu. SGD with momentum steps by the sum of the gradients, each weighed mu^age,
which comes to 1 / (1 - mu) times a steady gradient: at the dataset's SGD rate that step is ten times SGD's, and the
digits' default runs (MLP and RNN) learned nothing. Without ``--lr`` its rate is SGD's times 1 - mu, the same step on
a steady gradient (``default_lr``), but on the adding problem, where SGD's own step stays at chance and the larger
one learns (test MSE 0.010-0.023 over seeds 0-3 at 0.02; 0.15 at 0.002)."""

RNN_TEACHER_LR = 0.08
"""``--model rnn --data teacher`` learns at ``RNN_TEACHER_LR / tau`` by default (0.005 at tau = 16). Its cost
sums over the tau time steps, so a step's gradient grows with tau: for the default network the loss
becomes NaN (or stalls) from lr·tau of about 0.16 at any tau from 8 to 64, and 0.08 leaves a margin of two."""

EXIT_STATUSES = [
    (0, "done"),
    (2, "a bad option, data file or checkpoint, sizes too large for memory, or a step refused as set up (one line)"),
    (3, "the loss (or, with --check-finite, a gradient) became NaN or Inf, or the run diverged; a checkpoint "
        "already written is kept as it was"),
    (UNWRITTEN, "a checkpoint, a --metrics line, the --timeline chart or stdout could not be written (a full disk): "
                "one line; the last checkpoint kept"),
    (130, "stopped by Ctrl-C, after a checkpoint of the last completed step (more Ctrl-Cs within 2 s are the "
          "same one; a later one stops at once)"),
    CLOSED_PIPE_STATUS,
    (1, "under mpiexec: an unexpected error on one rank (which ends every rank; so do the statuses above)"),
    (4, "under mpiexec: a rank waited --comm-timeout seconds in vain for the others"),
]
"""What the command's exit status means, as ``--help`` lists it."""

OPTIMIZER = ("optimizer", "momentum", "nesterov", "weight_decay", "betas", "eps")
"""The options that make the optimizer but its learning rate (``make_optimizer``)."""

FIXED = ("data", "inputs", "outputs", "samples", "hidden", "activation", "cost", "dtype", "seed", "batch_size")
"""What a resumed run must keep: it defines the network, the data or the order of the batches (and, as
``checkpoint.LATER`` has them, the optimizer, whose state the checkpoint holds)."""

RESUMED = FIXED + ("data_dir", "epochs", "lr", "schedule", "k", "fused", "graph", "check_finite", "allow_divergence")
"""What ``--resume`` takes from the checkpoint unless given again; the rest belongs to this run."""

PER_RANK = ("quiet", "metrics", "profile_steps", "timeline")
"""Options that may differ between ranks; every other option must be the same on all of them."""

TIMELINE_STEPS = [10, 15]
"""The window ``--timeline`` records when ``--profile-steps`` is not given: 5 steps after 10 of warm-up."""

DESCRIPTIONS = {"mlp": "Train a deep MLP whose weight gradients leapfrog the backward chain.",
                "resmlp": "Train a residual MLP (a DagNet: the MLP's layers with a skip connection every --skip "
                          "hidden layers) whose weight gradients leapfrog its backward pass.",
                "rnn": "Train a recurrent network (RNN) by backpropagation through time, its weight gradients "
                       "leapfrogging the chain over layers and time steps."}

DATA_HELP = {"digits": "scikit-learn's 8x8 digits", "mnist": "local files (--data-dir)",
             "teacher": "regression on a random deep network"}

RNN_DATA_HELP = {"digits": "the 8x8 digits read row by row (8 steps of 8 pixels, the class at the last step)",
                 "pixels": "the 8x8 digits read pixel by pixel (64 steps of one pixel, the class at the last step)",
                 "teacher": "regression on a random teacher RNN, a target at every step (--tau)",
                 "adding": "the adding problem: the sum of the two marked values of a sequence, at its last "
                           "step (--tau)"}


class UsageError(ValueError):
    """A bad option or combination of options: exit status 2."""


def make_optimizer(config):
    """The optimizer of ``config``: ``--optimizer`` with its options, its own defaults for what is not given; a
    ``UsageError`` of one line for a bad combination (``core.optimizers`` refuses a bad value)."""
    kind, given = config["optimizer"], {key: config[key] for key in ("lr", "weight_decay", "betas", "eps")
                                        if config[key] is not None}
    if kind in ("sgd", "momentum") and config["nesterov"] and not momentum(config):
        raise UsageError("--nesterov needs a momentum > 0: give --momentum MU, or --optimizer momentum")
    try:
        if kind in ("sgd", "momentum"):
            return SGD(momentum=momentum(config), nesterov=config["nesterov"], **given)
        return (Adam if kind == "adam" else AdamW)(**given)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--optimizer {kind}: {error}") from None


def momentum(config):
    """SGD's momentum: ``--momentum``, else ``MOMENTUM`` for ``--optimizer momentum`` and 0 for ``sgd``."""
    if config["momentum"] is not None:
        return config["momentum"]
    return MOMENTUM if config["optimizer"] == "momentum" else 0


def default_lr(config):
    """The learning rate of a run without ``--lr``: its dataset's under SGD (``LR``, ``RNN_TEACHER_LR``), times
    1 - mu under a momentum mu in (0, 1) but on the adding problem (``MOMENTUM``; a ``UsageError`` for mu >= 1,
    there is no such rate); Adam's and AdamW's own (None) but on the adding problem (``ADDING_LR``)."""
    rnn = config["model"] == "rnn"
    if config["optimizer"] in ("adam", "adamw"):
        return ADDING_LR if rnn and config["data"] == "adding" else None
    lr = RNN_TEACHER_LR / config["tau"] if rnn and config["data"] == "teacher" else LR[config["data"]]
    mu = momentum(config)
    if mu >= 1 and config["data"] != "adding":
        raise UsageError(f"--momentum {written(mu)} leaves no default rate (the SGD rate times 1 - MU, which is not "
                         f"above 0): give --lr ETA")
    if not 0 < mu < 1 or config["data"] == "adding":
        return lr
    return float(f"{lr * (1 - mu):.12g}")  # 0.01, not 0.009999999999999998


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
        raise UsageError(f"--layers {layers} needs --width W: the widths {written(base)} differ")
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


def build_parser(model=DEFAULTS["model"], exit_on_error=True):
    """The command line, its help written for ``model``: its defaults, datasets, schedules and the options that
    apply to it (``APPLIES``; every option is parsed for any model). Defaults are left out of the namespace so that
    ``--resume`` can tell what was given (``defaults`` holds them). ``exit_on_error=False``: a bad argument raises
    ``argparse.ArgumentError`` (``cli.Parser``)."""
    others = " and ".join(f"--model {m} --help" for m in MODELS if m != model)
    p = Parser(prog=PROG, description=f"{DESCRIPTIONS[model]} ({others}: the options of the other models)",
               exit_statuses=EXIT_STATUSES, argument_default=argparse.SUPPRESS, exit_on_error=exit_on_error)
    d, rnn, layers = defaults(model), model == "rnn", "recurrent" if model == "rnn" else "hidden"

    def add(flag, help, **options):
        """``--flag`` in ``group``, its ``help`` shown where it applies to ``model``."""
        where = APPLIES.get(flag[2:].replace("-", "_"), {})
        shown = model in where.get("model", MODELS) and set(where.get("data", DATA[model])) & set(DATA[model])
        group.add_argument(flag, help=help if shown else argparse.SUPPRESS, **options)

    group = p.add_argument_group("data")
    words = RNN_DATA_HELP if rnn else DATA_HELP
    add("--data", "; ".join(f"{name}: {words[name]}" for name in DATA[model]) + f" (default {d['data']})",
        choices=tuple(dict.fromkeys(sum(DATA.values(), ()))), metavar="{" + ",".join(DATA[model]) + "}")
    add("--data-dir", "mnist: a folder with the four IDX files (gzipped or not) or one .npz", type=path, metavar="DIR")
    add("--inputs", f"teacher: input width (default {d['inputs']})", type=integer(1), metavar="N")
    add("--outputs", f"teacher: output width (default {d['outputs']})", type=integer(1), metavar="N")
    add("--samples", f"teacher, adding: training sequences, plus a quarter as many test ones (default {d['samples']}; "
                     f"adding: {RNN_DATA_DEFAULTS['adding']['samples']})" if rnn else "teacher: training samples, plus "
                     f"a quarter as many test ones (default {d['samples']})", type=integer(1), metavar="N")
    add("--tau", f"teacher, adding: time steps of a sequence (default {d['tau']})", type=integer(1), metavar="T")
    group = p.add_argument_group("model and schedule")
    add("--model", "mlp: the chain of layers; resmlp: the same layers with a skip connection every --skip hidden "
                   f"layers, a DagNet; rnn: a recurrent network on sequences (default {d['model']}; --model M --help: "
                   "the options of M)", choices=MODELS)
    add("--skip", "hidden layers per block: each block adds its input to its output where the widths agree, but the "
                  f"first, which reads the data, and one ending at the output (default {d['skip']})", type=integer(1),
        metavar="N")
    add("--hidden", f"{layers} widths: 128,64,32, 6x128 (6 layers of 128) or 2x128,64 (default {written(d['hidden'])})",
        type=values.hidden, metavar="SPEC")
    add("--layers", f"N {layers} layers of --width W, instead of --hidden", type=integer(1), metavar="N")
    add("--width", "the width of each of the --layers", type=integer(1), metavar="W")
    add("--cell", f"the recurrent layers' cell: Elman's, or PyTorch's GRU or LSTM (default {d['cell']})", choices=CELLS)
    add("--activation", f"{layers} layers (default {d['activation']})", choices=ACTIVATIONS)
    add("--cost", "default cross_entropy (with a sigmoid output) for classification, quadratic (with an identity "
                  "output) for teacher" + (" and adding; summed over the time steps" if rnn else ""), choices=COSTS)
    add("--dtype", f"(default {d['dtype']})", choices=DTYPES)
    add("--epochs", f"epochs in all (default {d['epochs']})", type=integer(1, capped=False), metavar="N")
    add("--batch-size", f"at most the number of training samples (default {d['batch_size']})", type=integer(1),
        metavar="B")
    rates = [f"{RNN_TEACHER_LR}/tau for teacher" if rnn and name == "teacher" else f"{LR[name]} for {name}"
             for name in DATA[model]]
    add("--lr", f"learning rate: w -= ETA/B * nabla_w (default {', '.join(rates)}; with a momentum MU, that times "
                "1 - MU, the same step on a steady gradient" + (", but on adding)" if rnn else ")"),
        type=number(0), metavar="ETA")
    adding = " ".join(f"--{dashed(key)} {written(value)}" for key, value in RNN_DATA_DEFAULTS["adding"].items())
    add("--optimizer", "torch.optim's rules, fused into the workers' update with --fused: sgd (w -= lr * g, g the "
                       "gradient of the batch-mean cost), momentum (SGD with --momentum), adam, adamw (default "
                       f"{d['optimizer']}; --lr defaults to {Adam().lr:g} for adam and adamw)"
                       + (f"; --data adding: {adding} --lr {ADDING_LR}" if rnn else ""),
        choices=("sgd", "momentum", "adam", "adamw"))
    add("--momentum", f"sgd and momentum: the momentum (default 0 for sgd, {MOMENTUM} for momentum)", type=float,
        metavar="MU")
    add("--nesterov", "sgd and momentum: Nesterov's momentum", action="store_true")
    add("--weight-decay", "L2 weight decay added to the gradient (adamw: decoupled, w *= 1 - lr WD) (default "
                          f"{Adam().weight_decay:g}, {AdamW().weight_decay:g} for adamw)", type=float, metavar="WD")
    add("--betas", f"adam and adamw (default {written(list(Adam().betas))})", type=reals(0, "beta"), metavar="B1,B2")
    add("--eps", f"adam and adamw (default {Adam().eps:g})", type=float, metavar="EPS")
    add("--clip-grad-norm", "scale the gradients so that their global norm is at most N before each update "
                            "(torch.nn.utils.clip_grad_norm_); needs the update after the join: not with --fused",
        type=number(0, strict=True), metavar="N")
    add("--no-clip-grad-norm", "clip nothing (the default): undo a resumed checkpoint's --clip-grad-norm",
        dest="clip_grad_norm", action="store_const", const=None)
    add("--seed", f"initial parameters and the order of the batches (default {d['seed']})",
        type=integer(0, capped=False), metavar="S")
    names = schedule_names(NETWORK[model])
    add("--schedule", f"the backward pass: {names[0]} on one stream, or a schedule with --k worker streams (default "
                      f"{d['schedule']})", metavar="{" + ",".join(names) + "}")
    add("--k", "worker streams of the schedule, or auto: leapfrog's fastest k, or none, timed on the first step at "
               f"each batch size (default {d['k']})", type=integer_or_auto(1), metavar="K")
    add("--forward-solver", ("the forward pass: step by step, or solved over time by Newton's method (quasi-newton: "
                             "the Jacobians' diagonals only; leapfrog_gpu.rnn.newton); with --schedule timescan the "
                             "step is parallel in time" if rnn else "the forward pass: node by node, or solved as a "
                             "system by Jacobi sweeps or Newton's method (leapfrog_gpu.dag.forward)")
        + f" (default {d['forward_solver']})", metavar="{" + ",".join(FORWARD_SOLVERS.get(model, ())) + "}")
    add("--fused", "fuse the SGD update into the weight-gradient kernel: fewer bytes, the same formula per element, "
                   "bitwise the unfused result (with numpy, a layer of more than "
                   f"{ops_numpy.SCRATCH} weights forms its gradient whole at batch sizes > 1; --no-fused: not, as a "
                   "resumed run's checkpoint may be)",
        action=argparse.BooleanOptionalAction)
    add("--graph", "run each step as a graph, captured once per batch size (CUDA graphs on the GPU)",
        action=argparse.BooleanOptionalAction)
    add("--check-finite", "check every gradient for NaN/Inf before each update and stop (exit 3) without it",
        action=argparse.BooleanOptionalAction)
    add("--allow-divergence", f"go on when the training loss grows past {Divergence.GROWTH:g}x its start, or stays "
                              "at or above chance level (what a constant output scores) for "
                              f"{Divergence.PATIENCE} epochs in a row; without it, such a run stops with exit status "
                              "3", action=argparse.BooleanOptionalAction)
    add("--backend", "auto: cupy when a CUDA device is usable, else numpy (default auto)",
        choices=("auto", "numpy", "cupy"))
    add("--memory-limit", "GiB that the buffers of a schedule or a forward solver beyond the network's own may take "
                          "(Naumov's, scans over time, Newton's) before it refuses (default 1)",
        type=number(0, strict=True, what="a number of GiB", most=2**30), metavar="GIB")
    add("--blas-threads", "numpy backend: BLAS threads for the matrix products, shared among the streams "
                          "of a leapfrog backward pass (default 1)", type=blas_threads, metavar="N")
    add("--yes", "start a run estimated at more than 10x the leapfrog schedule's (and a minute) without asking "
                 "(docs/training.md)", action="store_true")
    group = p.add_argument_group("output and checkpoints")
    add("--quiet", "no progress bar or epoch lines, only the result", action="store_true")
    add("--metrics", "write one JSON line per epoch to FILE (appended to on --resume; docs/training.md)",
        type=path, metavar="FILE")
    add("--checkpoint-dir", "write DIR/checkpoint.npz after every epoch", type=path, metavar="DIR")
    add("--resume", "continue from the checkpoint in --checkpoint-dir, with its options unless given (--no-graph, "
                    "--no-fused, ...: not as it was); --metrics, --timeline, --quiet, --backend and the other options "
                    "of output and machine are this run's: give them again", action="store_true")
    add("--profile-steps", "steps A..B-1: CUDA profiler start/stop (cupy), NVTX ranges, and the --timeline window",
        type=values.profile_steps, metavar="A:B")
    first, stop = TIMELINE_STEPS
    add("--timeline", f"stamp every launch of the --profile-steps window (default {first}:{stop}): busy time per "
                      "stream, worker overlap, a Gantt chart, and FILE.json (needs matplotlib; rank 0 under mpiexec)",
        type=path, metavar="FILE.png")
    group = p.add_argument_group("data parallel (under mpiexec -n P; --batch-size is per rank)")
    add("--bucket-mb", "sum the gradients of consecutive layers together up to MB (default 0: each layer alone)",
        type=number(0, what="a number of MB"), metavar="MB")
    add("--comm-timeout", f"stop every rank when one waits S seconds for the others (default {d['comm_timeout']:g})",
        type=number(1, what="a number of seconds"), metavar="S")  # less: a false alarm at any pause
    return p


def configure(given, saved=None):
    """The run's config from the options ``given`` and, on ``--resume``, the checkpoint's ``saved``; a
    ``UsageError`` of one line for what a run refuses."""
    kept = None if saved is None else {**LATER, **saved}
    config = defaults(*(given.get(key, (kept or DEFAULTS)[key]) for key in ("model", "data")))
    typed, given = given, hidden_given(given, (kept or config)["hidden"])
    if kept is not None:
        held = _in_effect(kept)
        for key in FIXED + OPTIMIZER + ("model", "skip", "tau", "cell"):
            if key in given and applies(key, kept) and given[key] != held[key]:
                said = _as_given(key, given[key]) if key in typed else (  # --layers/--width: the widths they make
                    f"{' '.join(_as_given(k, typed[k]) for k in ('layers', 'width') if k in typed)} "
                    f"(--hidden {written(given[key])})")
                raise UsageError(f"{said} differs from the checkpoint's "
                                 f"{written(held[key]) if not isinstance(held[key], bool) else 'run, without it'}; "
                                 "drop it to resume, or start a new --checkpoint-dir")
        config.update({key: kept[key] for key in RESUMED + tuple(LATER)})
    config.update(given)
    if kept is not None and "k" not in given and config["k"] == "auto" and config["schedule"] != "leapfrog":
        config["k"] = DEFAULTS["k"]  # the checkpoint's --k auto, of its leapfrog: none of the schedule given now
    why = refusal(config, given, kept)
    if why:
        raise UsageError(why)
    config["lr"] = learning_rate(config)
    return config


def learning_rate(config):
    """``config``'s ``--lr``, else ``default_lr``, as its optimizer takes it (``make_optimizer``)."""
    return make_optimizer({**config, "lr": default_lr(config) if config["lr"] is None else config["lr"]}).lr


def _in_effect(config):
    """``config`` with the options of its optimizer as the optimizer has them, a default (None) as its value."""
    hyper = make_optimizer(config).hyper()
    return {**config, **{key: list(value) if isinstance(value, tuple) else value for key, value in hyper.items()
                         if key in OPTIMIZER}}


def profile_window(config):
    """The steps ``[A, B)`` of the profiling window: ``--profile-steps``, or with ``--timeline`` alone,
    ``TIMELINE_STEPS``; ``None`` for no window."""
    if config["profile_steps"] is None and config["timeline"] is not None:
        return TIMELINE_STEPS
    return config["profile_steps"]


def _as_given(key, value):
    """The option ``key`` as a command line gives ``value``: ``--momentum 0.9``, or a flag alone (``--nesterov``)."""
    return f"--{dashed(key)}" if value is True else f"--{dashed(key)} {written(value)}"
