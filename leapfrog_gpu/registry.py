"""The schedules by name: the one list that ``check_schedule`` and the commands (``leapfrog-bench
--schedule``, ``profiling/naumov_crossover.py --schedule``) take their choices from."""

import inspect

from .naumov import NaumovJacobi, NaumovScan, NaumovSchedule
from .schedules import Leapfrog, Schedule, Sequential

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


def check_schedule(schedule):
    """Return ``schedule`` if it is a schedule object, else raise a TypeError naming the choices."""
    if getattr(schedule, "model", "MLP") != "MLP":  # a schedule of the RNN (``rnn_schedules``)
        raise TypeError(f"{schedule!r} runs on an {schedule.model}, not an MLP; an MLP takes {_choices()}")
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a schedule object: {_choices()}; got {schedule!r}")
    return schedule


def _choices():
    """``Sequential(), Leapfrog(k), ... or NaumovJacobi(k)``: every schedule with the arguments it needs."""
    choices = [_signature(cls) for cls, _ in SCHEDULES.values()]
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


def _signature(cls):
    """``Leapfrog(k)``: the class with the arguments it needs."""
    needed = [p.name for p in list(inspect.signature(cls).parameters.values())
              if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    return f"{cls.__name__}({', '.join(needed)})"
