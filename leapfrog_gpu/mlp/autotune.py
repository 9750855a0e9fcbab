"""Tuning the MLP's SGD step on the CPU: the schedule (``Leapfrog(k)`` or ``Sequential()``) and the BLAS
threads (which a hand-off shares among its streams), from a short calibration of whole steps.

The choice of k alone, which ``Leapfrog("auto")`` makes on a plan, is the shared ``core.calibrate``; its
names are used here as ``autotune.choose``, ``autotune.pick``, ``autotune.blas_limit``. ``tune`` also
sweeps BLAS threads (on the NumPy backend, where they are a process-wide setting), which change the
forward pass and the update too, so it times whole steps, switching the limit between blocks of timed
calls so that every (schedule, threads) pair is calibrated in alternation with the others.
"""

import dataclasses

import numpy as np

from ..backends import host_blas
from ..core.calibrate import KS, REPEATS, WARMUP, blas_limit, candidates, choose, chosen, measure, pick
from ..core.checks import check_count, shown

__all__ = ["KS", "REPEATS", "WARMUP", "Tuning", "blas_limit", "blas_settings", "candidates", "choose", "chosen",
           "measure", "pick", "tune"]


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


def tune(net, batch, ks=KS, blas_threads=None, seed=0, repeats=REPEATS, warmup=WARMUP, fused=False):
    """Calibrate the SGD step of the network ``net`` at ``batch`` random samples; return a ``Tuning``.

    The step, not the backward pass alone: BLAS threads also change the forward pass and the update.
    The calibration steps a network of ``net``'s architecture on its backend, with eta = 0, so that ``net``
    keeps its parameters and its optimizer state (an Adam state, say: the plain SGD step would mix them).
    On the NumPy backend every candidate runs at each BLAS setting in ``blas_threads`` (default: one
    thread and all cores, ``host_blas.all_threads()``); use the result as ``get_backend("numpy",
    blas_threads=t.blas_threads)`` and ``t.schedule``. On CuPy there is no BLAS setting and ``blas_threads`` must
    stay ``None``.
    """
    batch = check_count("batch", batch)
    repeats, warmup = check_count("repeats", repeats), check_count("warmup", warmup, 0)
    settings, schedules = blas_settings(net.backend.name, blas_threads), candidates(ks, fused)
    rng = np.random.default_rng(seed)
    x, y = rng.random((net.sizes[0], batch)), rng.random((net.sizes[-1], batch))
    with type(net).from_architecture(net.architecture(), net.backend) as probe:
        table = measure(probe.plan(batch), schedules, repeats, warmup, settings,
                        step=lambda s: probe.sgd_step(x, y, 0.0, s))
    schedule, threads, _ = pick(table)
    return Tuning(schedule, threads, table)


def blas_settings(backend, blas_threads=None):
    """The BLAS thread counts a calibration tries on ``backend`` ("numpy" or "cupy"): ``[None]`` on
    a GPU, else ``blas_threads`` or, by default, one thread and all cores (``host_blas.all_threads()``)."""
    if backend == "cupy":
        if blas_threads is not None:
            raise ValueError(f"blas_threads applies to the numpy backend only; got {shown(blas_threads)}")
        return [None]
    if blas_threads is None:
        return sorted({1, host_blas.all_threads()})
    if not isinstance(blas_threads, (list, tuple)):
        raise TypeError(f"blas_threads must be None or a list of thread counts, each an integer >= 1; got "
                        f"{shown(blas_threads)}")
    counts = [host_blas.check_threads(check_count("blas_threads", threads), f"blas_threads {threads}")
              for threads in blas_threads]
    if not counts or len(set(counts)) < len(counts):
        raise ValueError(f"blas_threads must list distinct thread counts, at least one, such as [1, 2]; got "
                         f"{shown(blas_threads)}")
    return counts
