"""Choosing k, and on the CPU the BLAS threads per stream, from a short calibration.

The candidates always include ``Sequential()``, and the choice leaves the best sequential configuration
(the smallest median) only for one that is faster beyond the calibration's noise: its p80 (slow end)
below the sequential one's p20 (fast end). Medians rank, because occasional spikes (BLAS threads that
lose a core to other work for a moment) move a p80 of a short calibration far more than the typical
time the benchmark then reports. So the choice is never slower than the best sequential configuration
but for noise.

For ``Leapfrog("auto")`` the plan of a batch size (``plan.Plan``) calls ``choose`` the first time it
runs it, on its own buffers and under its backend's BLAS setting; it times the backward pass, the only
part of a step the schedule changes. ``tune`` also sweeps BLAS threads (on the NumPy backend, where they are
a process-wide setting), which change the forward pass and the update too, so it times whole steps,
switching the limit between blocks of timed calls so that every (schedule, threads) pair is calibrated
in alternation with the others.
"""

import contextlib
import dataclasses
import functools
import os

import numpy as np
import threadpoolctl

from ..backends import host_blas, timing
from ..core.schedules import Leapfrog, Sequential

KS = (1, 2, 4)
"""Worker-stream counts tried by default."""
REPEATS, WARMUP = 15, 1
"""A calibration is short: its times only need to rank the candidates."""


@dataclasses.dataclass
class Tuning:
    """The outcome of a calibration.

    ``schedule`` is ``Sequential()`` or ``Leapfrog(k)``; ``blas_threads`` the BLAS threads it ran with
    (``None``: left as they were); ``table`` lists ``(schedule, blas_threads, step_ms)`` for every
    candidate, ``step_ms`` a ``timing.summary`` of the SGD step.
    """

    schedule: object
    blas_threads: object
    table: list

    @property
    def step_ms(self):
        return next(ms for s, t, ms in self.table if s is self.schedule and t == self.blas_threads)


def candidates(ks=KS, fused=False):
    """``Sequential()`` and ``Leapfrog(k)`` for each k in ``ks``, all with ``fused``."""
    return [Sequential(fused)] + [Leapfrog(k, fused) for k in ks]


def measure(plan, schedules, repeats=REPEATS, warmup=WARMUP, blas_threads=(None,), step=None):
    """``[(schedule, threads, ms)]``: the backward pass of each schedule at each BLAS setting, timed on
    ``plan``, the configurations in turn (``timing.measure_in_blocks``). With ``step``, a function of a
    schedule that runs a whole SGD step under it, that step is timed instead.

    ``plan`` must hold a forward pass; the backward pass reads it and rewrites the same deltas and
    gradients every time, so the calibration changes nothing a later pass sees.
    """
    def timed(s):
        if step is None:
            return lambda: plan.run(s)
        return lambda: step(s)

    runs = [(s, t) for t in blas_threads for s in schedules]
    keys = [t for _, t in runs]
    times = timing.measure_in_blocks(plan.backend, [timed(s) for s, _ in runs], keys, repeats, warmup,
                                     [lambda t=t: blas_limit(t) for t in keys])
    return [(s, t, timing.summary(ms)) for (s, t), ms in zip(runs, times)]


def choose(plan, ks=KS, fused=False):
    """The fastest of ``candidates(ks, fused)`` (see ``pick``) on ``plan`` under the current BLAS
    setting, kept in ``plan.chosen`` for the plan's life. The calibration times the unfused backward
    pass (a fused one would update the weights), which does the same work on the same streams."""
    key = (tuple(ks), fused)
    if key not in plan.chosen:
        plan.chosen[key] = pick(measure(plan, candidates(ks, fused)))[0]
    return plan.chosen[key]


def chosen(plan, fused=False):
    """The schedule ``choose`` picked for ``plan`` with the default candidates, or None if it has not."""
    return plan.chosen.get((tuple(KS), fused))


def tune(net, batch, ks=KS, blas_threads=None, seed=0, repeats=REPEATS, warmup=WARMUP, fused=False):
    """Calibrate the SGD step of the network ``net`` at ``batch`` random samples; return a ``Tuning``.

    The step, not the backward pass alone: BLAS threads also change the forward pass and the update.
    The calibration steps with eta = 0, so ``net`` keeps its parameters. On the NumPy backend every
    candidate runs at each BLAS setting in ``blas_threads`` (default: one thread and all cores); use
    the result as ``get_backend("numpy", blas_threads=t.blas_threads)`` and ``t.schedule``. On CuPy
    there is no BLAS setting and ``blas_threads`` must stay ``None``.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1; got {batch!r}")
    settings = blas_settings(net.backend.name, blas_threads)
    rng = np.random.default_rng(seed)
    x, y = rng.random((net.sizes[0], batch)), rng.random((net.sizes[-1], batch))
    table = measure(net.plan(batch), candidates(ks, fused), repeats, warmup, settings,
                    step=lambda s: net.sgd_step(x, y, 0.0, s))
    schedule, threads, _ = pick(table)
    return Tuning(schedule, threads, table)


def pick(table):
    """The row ``(schedule, threads, ms)`` of ``table`` to run (see the module docstring)."""
    def median(row):
        return row[2]["median"]

    sequential = min((row for row in table if isinstance(row[0], Sequential)), key=median)
    others = [row for row in table if not isinstance(row[0], Sequential)]
    best = min(others, key=median) if others else sequential
    return best if best[2]["p80"] < sequential[2]["p20"] else sequential


def blas_limit(threads):
    """A context in which BLAS uses ``threads`` threads, process-wide (``None``: as it is)."""
    if threads is None:
        return contextlib.nullcontext()
    return _controller().limit(limits=threads, user_api="blas")


@functools.cache
def _controller():
    """The BLAS libraries to limit, the products' among them (loaded first: the controller knows only
    those loaded when it is made)."""
    host_blas.load()
    return threadpoolctl.ThreadpoolController()


def blas_settings(backend, blas_threads=None):
    """The BLAS thread counts a calibration tries on ``backend`` ("numpy" or "cupy"): ``[None]`` on
    a GPU, else ``blas_threads`` or, by default, one thread and all cores."""
    if backend == "cupy":
        if blas_threads is not None:
            raise ValueError(f"blas_threads applies to the numpy backend only; got {blas_threads!r}")
        return [None]
    if blas_threads is None:
        return sorted({1, os.cpu_count() or 1})
    return list(blas_threads)
