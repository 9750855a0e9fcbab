"""Choosing k for ``Leapfrog("auto")`` from a short calibration, for any network whose plan can ``run`` a
schedule's backward pass (every network's).

The candidates always include ``Sequential()``, and the choice leaves the best sequential configuration
(the smallest median) only for one that is faster beyond the calibration's noise: its p80 (slow end)
below the sequential one's p20 (fast end). Medians rank, because occasional spikes (BLAS threads that
lose a core to other work for a moment) move a p80 of a short calibration far more than the typical
time the benchmark then reports. So the choice is never slower than the best sequential configuration
but for noise: where the hand-off to workers cannot pay, ``Leapfrog("auto")`` runs the chain alone.

A plan calls ``choose`` the first time it runs ``Leapfrog("auto")``, on its own buffers (holding a forward
pass) and under its backend's BLAS setting; it times the backward pass, the only part of a step the
schedule changes. ``blas_limit`` switches the BLAS threads of a calibration that sweeps them.
"""

import contextlib

import threadpoolctl

from ..backends import host_blas, timing
from .checks import shown
from .schedules import Leapfrog, Sequential

KS = (1, 2, 4)
"""Worker-stream counts tried by default."""
REPEATS, WARMUP = 15, 1
"""A calibration is short: its times only need to rank the candidates."""


def candidates(ks=KS, fused=False):
    """``Sequential()`` and ``Leapfrog(k)`` for each k in ``ks`` (a list of distinct counts), all with ``fused``."""
    if not isinstance(ks, (list, tuple)):
        raise TypeError(f"ks must be a list of worker stream counts, such as {list(KS)}; got {shown(ks)}")
    if not ks or len(set(ks)) < len(ks):
        raise ValueError(f"ks must list distinct worker stream counts, at least one, such as {list(KS)}; got "
                         f"{shown(ks)}")
    return [Sequential(fused)] + [Leapfrog(k, fused) for k in ks]


def measure(plan, schedules, repeats=REPEATS, warmup=WARMUP, blas_threads=(None,), step=None):
    """``[(schedule, threads, ms)]``: the backward pass of each schedule at each BLAS setting, timed on
    ``plan`` (``plan.run(schedule)``), the configurations in turn (``timing.measure_in_blocks``). With
    ``step``, a function of a schedule that runs a whole SGD step under it, that step is timed instead.

    ``plan`` must hold a forward pass; the backward pass reads it and rewrites the same deltas and
    gradients every time, so the calibration changes nothing a later pass sees.
    """
    def timed(s):
        if step is None:
            return lambda: plan.run(s)
        return lambda: step(s)

    runs = [(s, t) for t in blas_threads for s in schedules]
    keys = [t for _, t in runs]
    with timing.unstamped(plan.backend):  # a timeline recording the step that calibrates records that step only
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


def pick(table):
    """The row ``(schedule, threads, ms)`` of ``table`` to run (see the module docstring)."""
    def median(row):
        return row[2]["median"]

    sequential = min((row for row in table if isinstance(row[0], Sequential)), key=median)
    others = [row for row in table if not isinstance(row[0], Sequential)]
    best = min(others, key=median) if others else sequential
    return best if best[2]["p80"] < sequential[2]["p20"] else sequential


def blas_limit(threads):
    """A context in which BLAS uses ``threads`` threads, process-wide (``None``: as it is): every BLAS library loaded
    by then, the products' among them (loaded first), found anew by each call (a controller knows only the libraries
    loaded when it is made: one kept from an earlier call missed SciPy's OpenBLAS, loaded since)."""
    if threads is None:
        return contextlib.nullcontext()
    host_blas.load()
    return threadpoolctl.ThreadpoolController().limit(limits=threads, user_api="blas")
