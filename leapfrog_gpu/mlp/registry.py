"""The MLP's schedules by name: the one list that the commands (``leapfrog-bench --schedule``,
``profiling/naumov_crossover.py --schedule``) take their choices from."""

from ..core.schedules import Leapfrog, Sequential
from .naumov import NaumovJacobi, NaumovScan, NaumovSchedule

SCHEDULES = {
    "sequential": (Sequential, False),
    "leapfrog": (Leapfrog, True),
    "naumov-scan": (NaumovScan, True),
    "naumov-jacobi": (NaumovJacobi, True),
}
"""Schedules by name: (class, whether it takes k). ``sequential`` is the baseline of every measurement."""


def make_schedule(name, k=0, fused=False, one_pass=False, **options):
    """The schedule called ``name`` in ``SCHEDULES``, with ``k`` worker streams if it takes them and
    ``fused``, and ``one_pass`` (sequential and leapfrog only); ``options`` (``memory_limit``) go to Naumov's
    solvers only. ``naumov-jacobi`` starts from zero (exact, L-2 sweeps): a timing loop repeats one batch,
    where a warm start finds the answer in place."""
    cls, takes_k = SCHEDULES[name]
    if issubclass(cls, NaumovSchedule):
        if one_pass:
            raise ValueError(f"one_pass applies to sequential and leapfrog, not {name}")
        return cls(k=k, fused=fused, **options)
    return cls(k=k, fused=fused, one_pass=one_pass) if takes_k else cls(fused=fused, one_pass=one_pass)
