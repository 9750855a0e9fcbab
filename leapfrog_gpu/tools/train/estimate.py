"""The cost of a run, estimated before it starts from a short calibration on a copy of its network (the run itself
is unchanged): one step and one evaluation pass of the run's configuration, each timed after one untimed, and the
same under the leapfrog schedule (``Leapfrog(2)``, eagerly, without a forward solver), each scaled to the run's
steps and evaluations. A run estimated at more than ``SLOWER`` times the leapfrog schedule's, and at more than
``WORTH_ASKING``, asks before it starts (``--yes`` does not ask; off a terminal, or under mpiexec, it warns and
starts).
"""

import math
import sys
import time

from ...core.fitting import EVAL_BATCH
from . import models
from .options import PROG, UsageError, make_optimizer

SLOWER = 10
"""How many times the leapfrog schedule's estimate a run may take before the command asks."""
SILENCE = 3.0
"""Seconds of calibration after which the command says that it is timing the run's step (a forward solver's pass
can take many)."""
WORTH_ASKING = 60.0
"""Seconds below which a run starts without asking, whatever its ratio: a second's run is no one's question, and
the one step each estimate times can take ten times as long while other processes share the cores."""


def calibrate(config, dataset, backend, remaining):
    """``(seconds, leapfrog)``: the estimates of the ``remaining`` steps (and evaluations) of the run of ``config``
    on ``dataset`` and ``backend``, and under the leapfrog schedule (``seconds`` itself where that is the run's)."""
    run = models.schedule(config), models.forward_solver(config), config["graph"]
    seconds = _estimate(config, dataset, backend, remaining, *run)
    leapfrog = (models.schedule(config, "leapfrog", 2, False), None, False)
    same = repr(run[0]) == repr(leapfrog[0]) and run[1] is None and not run[2]
    return seconds, seconds if same else _estimate(config, dataset, backend, remaining, *leapfrog)


def ask(config, seconds, leapfrog, report, ranks):
    """Print the estimate; where it exceeds ``SLOWER`` times ``leapfrog`` and ``WORTH_ASKING``, ask before the run
    starts (a ``UsageError`` if the answer is not yes) or, off a terminal or under mpiexec, warn."""
    versus = "" if seconds is leapfrog else f" (the leapfrog schedule without a forward solver: {duration(leapfrog)})"
    report.line(f"estimate: {duration(seconds)} for the run{versus}")
    if seconds <= max(SLOWER * leapfrog, WORTH_ASKING) or config["yes"] or report.rank > 0:
        return
    what = (f"{PROG}: this run is estimated at {seconds / leapfrog:,.0f}x the leapfrog schedule's "
            f"({duration(seconds)} against {duration(leapfrog)})")
    if ranks > 1 or not sys.stdin.isatty():
        print(f"{what}; starting it (--yes starts it without this warning)", file=sys.stderr, flush=True)
        return
    try:
        answer = input(f"{what}. Start it? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise UsageError("not started: pass --yes to start it without asking, or choose a faster --schedule or "
                         "--forward-solver")


def duration(seconds):
    """``seconds`` as a person reads a duration: "under 0.1 s", "about 40 s", "about 9 min", "about 3.2 h", "about
    12 days", "more than a year" (never "about 0.1 s" for less, which a ratio of two durations beside it would
    contradict)."""
    if seconds < 0.1:
        return "under 0.1 s"
    if seconds < 60:
        return f"about {seconds:.2g} s" if seconds < 10 else f"about {seconds:.0f} s"
    if seconds < 3600:
        return f"about {seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"about {seconds / 3600:.1f} h"
    return f"about {seconds / 86400:.0f} days" if seconds < 365 * 86400 else "more than a year"


def _estimate(config, dataset, backend, remaining, schedule, solver, graph):
    """Seconds of ``remaining`` steps of ``schedule`` and of the evaluations of the epochs they reach, from one
    timed step and one timed forward pass on a new network of ``config``."""
    x, y = dataset.x_train, dataset.y_train
    batch, samples = config["batch_size"], x.shape[-1]
    evaluated = min(samples, max(batch, EVAL_BATCH))
    with models.network({**config, "check_finite": False}, dataset, backend) as net:  # the run checks its own
        optimizer = make_optimizer(config)

        def step():
            net.train_step(x[..., :batch], y[..., :batch], optimizer, schedule, graph=graph,
                           clip=config["clip_grad_norm"], solver=solver)
            net.synchronize()

        step_seconds = _timed(step)
        pass_seconds = _timed(lambda: net.feedforward(x[..., :evaluated], solver=solver))
    steps_per_epoch = math.ceil(samples / (batch * config["ranks"]))
    epochs = math.ceil(remaining / steps_per_epoch)
    evaluations = (samples + epochs * (samples + dataset.x_test.shape[-1])) / evaluated  # the start's loss too
    return remaining * step_seconds + evaluations * pass_seconds


def _timed(call):
    """Seconds of the second ``call()``: the first plans the pass, captures its graph or compiles the optimizer's
    update (about a second the first time a process takes a step of momentum or Adam, more on a new install),
    which the run pays once, not at every step."""
    call()
    start = time.perf_counter()
    call()
    return time.perf_counter() - start

