"""What ``--resume`` reads of a checkpoint, checked before the run takes it: its options as a fresh run's are
(``config``), its position, RNG and optimizer against them (``checked``), and once the data and the network are
there, its position against the epochs' steps and its architecture against the network (``check_position``,
``check_architecture``). A checkpoint edited into one that no run writes is refused as ``checkpoint.damaged``: one
line, exit status 2, the file left as it was."""

import argparse
import json
import math

from ...core import saving
from ...core.fitting import reaches
from ...core.parameters import generator, took_state
from ..cli import plural
from . import checkpoint
from .checkpoint import LATER
from .options import DEFAULTS, RESUMED, UsageError, build_parser, defaults, learning_rate, make_optimizer, refusal
from .refusals import APPLIES
from .values import dashed, written

TAKEN = RESUMED + tuple(LATER)
"""What ``--resume`` takes from a checkpoint's config unless given again."""


def config(saved):
    """The checkpoint's config ``saved`` with what ``--resume`` takes from it (``TAKEN``, as ``LATER`` has those it
    lacks) as a fresh run takes its options: each written as its option and parsed again (``"32"`` gives 32), then
    the combinations a run refuses and the optimizer's own checks; a ``UsageError`` that says what is wrong (of its
    ``ranks`` too: a number >= 1)."""
    kept, argv = {**LATER, **saved}, []
    for key in TAKEN:
        if DEFAULTS[key] is False and not isinstance(kept[key], bool):  # a flag
            raise UsageError(f"--{dashed(key)} is {kept[key]!r}, neither true nor false")
        if DEFAULTS[key] is False:
            argv += [f"--{dashed(key)}"] * kept[key]
        elif kept[key] is not None or DEFAULTS[key] is not None:  # None: the default, where a run computes one
            argv.append(f"--{dashed(key)}={written(kept[key])}")
    try:
        parsed = {**{key: kept[key] for key in TAKEN}, **vars(build_parser(exit_on_error=False).parse_args(argv))}
    except argparse.ArgumentError as error:
        raise UsageError(error) from None
    ranks = kept.get("ranks", 1)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise UsageError(f"ranks is {ranks!r}, not a number of processes >= 1")
    default = defaults(parsed["model"], parsed["data"])
    whole = {**default, **parsed}
    why = refusal(whole, {key: whole[key] for key in APPLIES if whole[key] != default[key]})  # set: it must apply
    if why:
        raise UsageError(why)
    return {**saved, **parsed, "lr": learning_rate(whole)}


def checked(state, directory):
    """The config of the checkpoint ``state`` (``checkpoint.load``'s) in ``directory`` as ``config`` gives it, once
    the rest of what a resumed run reads is checked: the counters, the RNG's state, and the optimizer whose state the
    file holds, which must be the one the config makes, its step count the run's (plain SGD, which keeps no state,
    counts none)."""
    try:
        options = config(state["config"])
    except UsageError as error:
        raise checkpoint.damaged(directory, f"its options: {error}") from None
    for key in ("epoch", "step_in_epoch", "step", "optimizer_step", "epochs_at_chance"):
        value = state.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise checkpoint.damaged(directory, f"its {key} is {value!r}, not an integer >= 0")
    start = state.get("start_loss")  # None: written without it
    if start is not None and (isinstance(start, bool) or not isinstance(start, (int, float)) or
                              not 0 <= start < math.inf):
        raise checkpoint.damaged(directory, f"its start_loss is {start!r}, not a finite number >= 0")
    if not took_state(generator(0), state["rng"]):
        raise checkpoint.damaged(directory, f"its rng is {state['rng']!r:.80}, not a state of NumPy's "
                                            f"{type(generator(0).bit_generator).__name__}")
    made = make_optimizer(options)
    wanted = None if made.plain else made
    if "file" in state:  # else written before checkpoints held their optimizer: its step count alone
        held = _held_optimizer(state["file"]["optimizer"], directory)
        if repr(held) != repr(wanted):
            raise checkpoint.damaged(directory, f"its optimizer is {_shown(held)}, and its options make "
                                                f"{_shown(wanted)}")
    steps = 0 if wanted is None else state["step"]
    if state.get("optimizer_step", 0) != steps:
        raise checkpoint.damaged(directory, f"its optimizer's step count is {state['optimizer_step']}, not {steps} "
                                            f"({'plain SGD counts none' if wanted is None else 'its steps'})")
    return options


def check_position(state, steps_per_epoch, directory):
    """Refuse a position of the checkpoint ``state`` in ``directory`` that no run reaches at ``steps_per_epoch`` steps
    an epoch (interrupted after the last step of an epoch, it counts them all)."""
    epoch, step_in_epoch, step = state["epoch"], state["step_in_epoch"], state["step"]
    if not reaches(epoch, step_in_epoch, step, steps_per_epoch):
        raise checkpoint.damaged(directory, f"its position (epoch {epoch}, step_in_epoch {step_in_epoch}, step "
                                            f"{step}) does not fit epochs of {plural(steps_per_epoch, 'step')}")


def check_architecture(net, state, directory):
    """Refuse a checkpoint ``state`` in ``directory`` whose network and architecture are not those of ``net``, which
    its options built (``check_finite`` aside: each run sets its own)."""
    if "file" not in state:  # written before checkpoints held their architecture
        return
    held, built = state["file"], json.loads(json.dumps(net.architecture()))
    held = {"network": held["network"], **(held["architecture"] if isinstance(held["architecture"], dict) else {})}
    built = {"network": type(net).__name__, **built}
    wrong = next((key for key in {**built, **held} if key != "check_finite" and held.get(key) != built.get(key)), None)
    if wrong is not None:
        raise checkpoint.damaged(directory, f"its architecture has {wrong} {held.get(wrong)!r}, and its options "
                                            f"build {built.get(wrong)!r}")


def _held_optimizer(held, directory):
    """The optimizer whose state a checkpoint holds, as ``core.saving`` reads its ``held`` kind and
    hyper-parameters (None: none held)."""
    if held is None:
        return None
    try:
        return saving.optimizer_of(held)
    except ValueError as error:
        raise checkpoint.damaged(directory, str(error)) from None


def _shown(optimizer):
    """An optimizer whose state a checkpoint holds, or None, in words."""
    return "plain SGD, which keeps no state" if optimizer is None else repr(optimizer)
