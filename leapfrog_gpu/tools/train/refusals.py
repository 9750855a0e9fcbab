"""What ``leapfrog-train`` refuses of its options together: those that apply to some models, data or optimizers only
(``APPLIES``), and each combination a run cannot take, in one line that says what to drop or give instead (on
``--resume``, knowing which options the checkpoint's run had); and outputs that would write over each other or the
data (``outputs_refusal``)."""

import json
import os
from pathlib import Path

from ... import datasets
from ...core import files
from ...rnn.cells import ACTIVATION
from ...rnn.scans import NaumovRNN
from .. import timeline
from ..cli import one_file_each
from ..schedules import schedule_names, takes_k
from .checkpoint import path_in
from .models import DATA, FORWARD_SOLVERS, NETWORK, REGRESSION
from .values import dashed, written

APPLIES = {"data_dir": {"data": ("mnist",)}, "inputs": {"data": ("teacher",)}, "outputs": {"data": ("teacher",)},
           "samples": {"data": ("teacher", "adding")}, "skip": {"model": ("resmlp",)},
           "tau": {"model": ("rnn",), "data": ("teacher", "adding")}, "cell": {"model": ("rnn",)},
           "forward_solver": {"model": tuple(FORWARD_SOLVERS)}, "momentum": {"optimizer": ("sgd", "momentum")},
           "nesterov": {"optimizer": ("sgd", "momentum")}, "betas": {"optimizer": ("adam", "adamw")},
           "eps": {"optimizer": ("adam", "adamw")}}
"""Options that apply to some values of ``--model``, ``--data`` or ``--optimizer`` only: the others refuse them,
and ``--help`` shows them for the models they apply to."""


def refusal(config, given, kept=None):
    """Why a run refuses the options of ``config`` (``given``: its command line's; ``kept``: on ``--resume``, the
    checkpoint's) together, in one line, or None."""
    why = next((why for wrong, why in _refused(config, given, kept) if wrong), None)
    if why is None and config["timeline"] is not None:
        why = timeline.refusal(config["timeline"])
    return why


def applies(key, config):
    """Whether the option ``key`` applies to ``config``'s model, data and optimizer (``APPLIES``)."""
    return all(config[option] in among for option, among in APPLIES.get(key, {}).items())


def off(flag, given, kept):
    """How to turn the option ``flag`` off: drop it, or where the checkpoint's run (``kept``) had it, give ``--no-``."""
    option = f"--{dashed(flag)}"
    if (kept or {}).get(flag) in (None, False):
        return f"drop {option}"
    had = option if kept[flag] is True else f"{option} {written(kept[flag])}"  # a flag, or a value (a clip's)
    if flag in given:
        return f"replace {option} by --no-{option[2:]} (the checkpoint's run is {had})"
    return f"add --no-{option[2:]} (the checkpoint's run is {had})"


def _refused(c, given, kept):
    """``(wrong, why)``: each combination of the options of the config ``c`` that a run refuses, with its line, in
    the order they are checked."""
    model, data, solver, solvers = c["model"], c["data"], c["forward_solver"], FORWARD_SOLVERS.get(c["model"], ())
    names = schedule_names(NETWORK[model])
    return [
        (data not in DATA[model], f"--model {model} trains on --data {' or '.join(DATA[model])}; got {data}"),
        *((key in given and not applies(key, c),
           f"--{dashed(key)} applies to {' '.join(f'--{o} ' + ' or '.join(among) for o, among in where.items())} only")
          for key, where in APPLIES.items()),
        (solvers and solver not in solvers, f"--forward-solver {solver} is not a forward solver of --model {model}; "
                                            f"choose from {', '.join(solvers)}"),
        (c["graph"] and solver != "sequential",
         f"--graph captures the {'step-by-step' if model == 'rnn' else 'node-by-node'} forward pass, and "
         f"--forward-solver {solver} stops on a residual read on the host: {off('graph', given, kept)}, or give "
         "--forward-solver sequential"),
        (c["schedule"] not in names, f"--schedule {c['schedule']} is not a schedule of --model {model}; choose from "
                                     f"{', '.join(names)}"),
        (c["k"] == "auto" and c["schedule"] != "leapfrog", "--k auto applies to --schedule leapfrog only"),
        ("k" in given and c["schedule"] in names and not takes_k(NETWORK[model], c["schedule"]),
         f"--k applies to the schedules with worker streams; --schedule {c['schedule']} runs its gradients on the "
         "main stream: drop --k"),
        (c["fused"] and c["clip_grad_norm"] is not None,
         f"--clip-grad-norm {written(c['clip_grad_norm'])} needs every gradient before any update: "
         f"{off('fused', given, kept)}, or {off('clip_grad_norm', given, kept)}"),
        (data == "mnist" and not c["data_dir"], "--data mnist needs --data-dir DIR (the four MNIST IDX files or one "
                                                ".npz)"),
        (data in REGRESSION and c["cost"] == "cross_entropy", f"--data {data} is a regression task: use --cost "
                                                              "quadratic"),
        (data == "adding" and c["tau"] < 2, "--data adding marks a step in each half of a sequence: it needs --tau 2 "
                                            f"or more; got {c['tau']}"),
        (c["cell"] != "elman" and c["activation"] != ACTIVATION, f"--cell {c['cell']} has its own activation, "
                                                                 f"{ACTIVATION}: drop --activation {c['activation']}"),
        (c["cell"] != "elman" and c["schedule"] == NaumovRNN.name,
         f"--schedule {NaumovRNN.name} builds the Elman cell's layer operators and has none for --cell {c['cell']}: "
         f"choose --schedule from {', '.join(name for name in names if name != NaumovRNN.name)}"),
        (c["fused"] and c["check_finite"], f"--check-finite needs the update after the gradients: "
                                           f"{off('fused', given, kept)}, or {off('check_finite', given, kept)}"),
        (c["graph"] and c["timeline"] is not None, "--timeline stamps every launch of eager steps, and a graph step "
                                                   f"is one launch: {off('graph', given, kept)}, or drop --timeline"),
    ]


def outputs_refusal(config):
    """Why a run refuses its outputs, in one line, or None: two that name one file (``cli.one_file_each``):
    ``--metrics``, the ``--timeline`` chart and its .json, the checkpoint in ``--checkpoint-dir``; one that would
    write over the MNIST data, or into its folder a file that ``datasets.mnist`` would read as data from then on; a
    ``--metrics`` file that holds something else (``_no_metrics``)."""
    timeline, directory = config["timeline"], config["checkpoint_dir"]
    outputs = [("--metrics", config["metrics"]), ("--timeline", timeline),
               ("--timeline's .json", timeline and Path(timeline).with_suffix(".json")),
               ("--checkpoint-dir's checkpoint", directory and path_in(directory))]
    why = one_file_each(outputs) or (_over_the_data(outputs, config["data_dir"]) if config["data"] == "mnist" else None)
    why = why or _no_metrics(config["metrics"])
    folder = directory and os.path.realpath(directory)
    for option, path in outputs[:3]:  # a file where the run makes the checkpoint's folder, or a folder above it
        if folder and path and (folder + os.sep).startswith(os.path.realpath(path) + os.sep):
            why = why or f"{option} {path} is --checkpoint-dir's folder or one above it: give each its own"
    return why


def _no_metrics(path):
    """Why ``--metrics`` may not write to ``path``, or None: a file there already whose first line is no epoch's
    record, a JSON object with its "epoch" (a checkpoint, a timeline's .json, say), which a fresh run would empty and
    a resumed one append to; or one that cannot be read to tell. The file the run's output goes to (``--metrics
    /dev/stdout >> log``) is neither emptied nor cut: its lines go among the others."""
    if not path or not os.path.isfile(path) or not os.path.getsize(path) or files.standard_stream(path):
        return None
    try:
        with open(path, "rb") as file:
            first = json.loads(file.readline(1 << 20))
    except OSError as error:
        return f"--metrics {path}: cannot read it to tell that it holds metrics lines ({error.strerror})"
    except ValueError:
        first = None
    if isinstance(first, dict) and "epoch" in first:
        return None
    return f"--metrics {path} holds something other than metrics lines, which the run would write over or append " \
           "to: give another file"


def _over_the_data(outputs, data):
    """Why one of ``outputs``, ``[(option, path)]``, would write over the MNIST file ``data`` or into its folder a file
    that the next run would read as MNIST, or None."""
    real_data = os.path.realpath(data)
    for option, path in outputs:
        real = path and os.path.realpath(path)
        read = real and os.path.dirname(real) == real_data and datasets.mnist_reads(os.path.basename(real))
        if real == real_data or read and os.path.exists(real):
            return f"{option} names --data-dir's MNIST file, {path}: give it a name of its own"
        if read:
            return (f"{option} would put {os.path.basename(real)} into --data-dir {data}, which MNIST would then read "
                    f"as data: give it another folder")
    return None
