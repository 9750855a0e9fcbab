"""``leapfrog-train``'s options: the command line, every default, and the run's config from them
(and, on ``--resume``, from the checkpoint)."""

import argparse
import os

from ...parallel import comm as parallel
from ...backends import ops_numpy
from ...core.functions import ACTIVATIONS, COSTS, DTYPES
from ..cli import Parser, integer, number, pip_install, png_refusal
from .metrics import Divergence
from .profiling import parse_steps

PROG = "leapfrog-train"

DEFAULTS = {
    "data": "digits", "data_dir": None, "inputs": 64, "outputs": 10, "samples": 4096,
    "model": "mlp", "skip": 2, "hidden": [128] * 4, "activation": "tanh", "cost": None, "dtype": "float32",
    "epochs": 30, "batch_size": 32, "lr": None, "seed": 0, "schedule": "leapfrog", "k": 2, "fused": False,
    "graph": False, "backend": "auto", "blas_threads": 1, "check_finite": False, "allow_divergence": False,
    "quiet": False, "metrics": None, "checkpoint_dir": None, "resume": False, "profile_steps": None,
    "timeline": None, "bucket_mb": 0.0, "comm_timeout": parallel.DEFAULT_TIMEOUT,
}
"""Every option's default (``lr``: the data's, ``LR``). The digits default reaches about 97 % test
accuracy in 30 epochs."""

LR = {"digits": 0.1, "mnist": 0.1, "teacher": 0.01}
"""Each dataset's default learning rate. The teacher's quadratic cost sums over its outputs, so its
gradients are larger: with the default network its loss becomes NaN in the first epoch from about
``--lr 0.04``, and 0.01 leaves a margin of four."""

EXIT_STATUSES = [
    (0, "done"),
    (2, "a bad option, data file or checkpoint (one line on stderr)"),
    (3, "the loss (or, with --check-finite, a gradient) became NaN or Inf, or the run diverged; the last "
        "checkpoint is kept as it was"),
    (130, "stopped by Ctrl-C, after a checkpoint of the last completed step"),
    (1, "under mpiexec: an unexpected error on one rank (which ends every rank; so do the statuses above)"),
    (4, "under mpiexec: a rank waited --comm-timeout seconds in vain for the others"),
]
"""What the command's exit status means, as ``--help`` lists it."""

FIXED = ("data", "inputs", "outputs", "samples", "hidden", "activation", "cost", "dtype", "seed", "batch_size")
"""What a resumed run must keep: it defines the network, the data or the order of the batches."""

RESUMED = FIXED + ("data_dir", "epochs", "lr", "schedule", "k", "fused")
"""What ``--resume`` takes from the checkpoint unless given again; the rest belongs to this run."""

MODEL = ("model", "skip")
"""What defines the network besides ``FIXED``, and a resumed run keeps too; a checkpoint written before
``--model`` holds an MLP."""

PER_RANK = ("quiet", "metrics", "profile_steps", "timeline")
"""Options that may differ between ranks; every other option must be the same on all of them."""

TIMELINE_STEPS = [10, 15]
"""The window ``--timeline`` records when ``--profile-steps`` is not given: 5 steps after 10 of warm-up."""



class UsageError(ValueError):
    """A bad option or combination of options: exit status 2."""



def parse_hidden(text):
    """Hidden widths from ``"6x128"``, ``"128,64,32"`` or a mix such as ``"2x128,64"``."""
    widths = []
    for part in text.split(","):
        count, x, width = part.strip().rpartition("x")
        try:
            widths += [int(width)] * (int(count) if x else 1)
        except ValueError:
            widths = None
            break
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(
            f"must be widths >= 1 such as 6x128, 128,64,32 or 2x128,64; got {text!r}")
    return widths


def _profile_steps(text):
    try:
        steps = parse_steps(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return [steps.start, steps.stop]


def build_parser():
    """The command line; defaults are left out of the namespace so that ``--resume`` can tell what
    was given (``DEFAULTS`` holds them)."""
    p = Parser(prog=PROG, description="Train a deep MLP whose weight gradients leapfrog the backward chain.",
               exit_statuses=EXIT_STATUSES, argument_default=argparse.SUPPRESS)
    d = DEFAULTS
    group = p.add_argument_group("data")
    group.add_argument("--data", choices=("digits", "mnist", "teacher"),
                       help=f"digits: scikit-learn's 8x8 digits; mnist: local files (--data-dir); teacher: "
                            f"regression on a random deep network (default {d['data']})")
    group.add_argument("--data-dir", metavar="DIR",
                       help="mnist: a folder with the four IDX files (gzipped or not) or one .npz")
    group.add_argument("--inputs", type=integer(1), metavar="N", help=f"teacher: input width (default {d['inputs']})")
    group.add_argument("--outputs", type=integer(1), metavar="N",
                       help=f"teacher: output width (default {d['outputs']})")
    group.add_argument("--samples", type=integer(1), metavar="N",
                       help=f"teacher: training samples, plus a quarter as many test samples (default {d['samples']})")
    group = p.add_argument_group("model and schedule")
    group.add_argument("--model", choices=("mlp", "resmlp", "rnn"),
                       help="mlp: the chain of layers; resmlp: the same layers with a skip connection every "
                            "--skip hidden layers, a GraphNet; rnn: a recurrent network on --data digits (read row "
                            f"by row) or teacher (a teacher RNN), leapfrog_gpu.tools.train.rnn (default {d['model']})")
    group.add_argument("--skip", type=integer(1), metavar="N",
                       help=f"resmlp: hidden layers per skip connection (default {d['skip']})")
    group.add_argument("--tau", type=integer(1), metavar="T", help="--model rnn, teacher: steps of a sequence")
    group.add_argument("--hidden", type=parse_hidden, metavar="SPEC",
                       help="hidden widths: 6x128, 128,64,32 or 2x128,64 (default 4x128)")
    group.add_argument("--activation", choices=tuple(ACTIVATIONS), help=f"hidden layers (default {d['activation']})")
    group.add_argument("--cost", choices=tuple(COSTS),
                       help="default cross_entropy (with a sigmoid output) for classification, quadratic "
                            "(with an identity output) for teacher")
    group.add_argument("--dtype", choices=DTYPES, help=f"(default {d['dtype']})")
    group.add_argument("--epochs", type=integer(1), metavar="N", help=f"epochs in all (default {d['epochs']})")
    group.add_argument("--batch-size", type=integer(1), metavar="B",
                       help=f"at most the number of training samples (default {d['batch_size']})")
    group.add_argument("--lr", type=number(0), metavar="ETA",
                       help="learning rate: w -= ETA/B * nabla_w (default "
                            + ", ".join(f"{lr} for {name}" for name, lr in LR.items()) + ")")
    group.add_argument("--seed", type=integer(0), metavar="S",
                       help=f"initial parameters and the order of the batches (default {d['seed']})")
    group.add_argument("--schedule", choices=("sequential", "leapfrog"), help=f"(default {d['schedule']})")
    group.add_argument("--k", type=integer(1), metavar="K", help=f"leapfrog worker streams (default {d['k']})")
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
    group = p.add_argument_group("output and checkpoints")
    group.add_argument("--quiet", action="store_true", help="no progress bar or epoch lines, only the result")
    group.add_argument("--metrics", metavar="FILE",
                       help="write one JSON line per epoch to FILE (appended to on --resume)")
    group.add_argument("--checkpoint-dir", metavar="DIR", help="write DIR/checkpoint.npz after every epoch")
    group.add_argument("--resume", action="store_true",
                       help="continue from the checkpoint in --checkpoint-dir, with its options unless given")
    group.add_argument("--profile-steps", type=_profile_steps, metavar="A:B",
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
    config = dict(DEFAULTS)
    if saved is not None:
        for key in FIXED:
            if key in given and given[key] != saved[key]:
                raise UsageError(
                    f"--{key.replace('_', '-')} {_show(given[key])} differs from the checkpoint's "
                    f"{_show(saved[key])}; drop it to resume, or start a new --checkpoint-dir"
                )
        config.update({key: saved[key] for key in RESUMED})
        for key in MODEL:
            kept = saved.get(key, DEFAULTS[key])
            if key in given and given[key] != kept:
                raise UsageError(f"--{key} {given[key]} differs from the checkpoint's {kept}; drop it to resume, "
                                 "or start a new --checkpoint-dir")
            config[key] = kept
    config.update(given)
    if "skip" in given and config["model"] != "resmlp":
        raise UsageError("--skip applies to --model resmlp only")
    if config["model"] == "resmlp":
        for key in ("graph", "check_finite"):
            if config[key]:
                raise UsageError(f"--{key.replace('_', '-')} applies to --model mlp only")
    if config["lr"] is None:
        config["lr"] = LR[config["data"]]
    for key, kind in (("data_dir", "mnist"), ("inputs", "teacher"), ("outputs", "teacher"), ("samples", "teacher")):
        if key in given and config["data"] != kind:
            raise UsageError(f"--{key.replace('_', '-')} applies to --data {kind} only")
    if config["data"] == "mnist" and not config["data_dir"]:
        raise UsageError("--data mnist needs --data-dir DIR (the four MNIST IDX files or one .npz)")
    if config["data"] == "teacher" and config["cost"] == "cross_entropy":
        raise UsageError("--data teacher is a regression task: use --cost quadratic")
    if config["fused"] and config["check_finite"]:
        raise UsageError("--check-finite needs the update after the gradients: drop --fused")
    if config["timeline"] is not None:
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
    return config


def profile_window(config):
    """The steps ``[A, B)`` of the profiling window: ``--profile-steps``, or with ``--timeline`` alone,
    ``TIMELINE_STEPS``; ``None`` for no window."""
    if config["profile_steps"] is None and config["timeline"] is not None:
        return TIMELINE_STEPS
    return config["profile_steps"]


def _show(value):
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
