"""Every network's schedules by name: the one table from (model, name) to a schedule that the commands
take their choices from (``leapfrog-train --schedule``).

``mlp``  sequential, leapfrog, naumov-scan, naumov-jacobi (``MLP``)
``rnn``  bptt, leapfrog, wavefront, timescan, naumov-rnn (``RNN``)
``dag``  sequential, leapfrog, level-sets, dag-jacobi, dag-doubling (``GraphNet``)

The first name of each is its network's chain with every gradient on the main stream, the baseline of a
measurement; a name that takes worker streams gets ``k`` of them, and every schedule takes ``fused``.
"""

from ..core.schedules import Leapfrog, Sequential
from ..dag.schedules import DagDoubling, DagJacobi, LevelSets
from ..mlp.naumov import NaumovJacobi, NaumovScan
from ..rnn.scans import NaumovRNN, TimeScan
from ..rnn.schedules import BPTT, Wavefront

SCHEDULES = {
    "mlp": {"sequential": lambda k, fused: Sequential(fused), "leapfrog": Leapfrog,
            "naumov-scan": lambda k, fused: NaumovScan(k=k, fused=fused),
            "naumov-jacobi": lambda k, fused: NaumovJacobi(k=k, fused=fused)},
    "rnn": {"bptt": lambda k, fused: BPTT(fused), "leapfrog": Leapfrog,
            "wavefront": lambda k, fused: Wavefront(k=k, fused=fused),
            "timescan": lambda k, fused: TimeScan(k=k, fused=fused),
            "naumov-rnn": lambda k, fused: NaumovRNN(k=k, fused=fused)},
    "dag": {"sequential": lambda k, fused: Sequential(fused), "leapfrog": Leapfrog,
            "level-sets": lambda k, fused: LevelSets(k=k, fused=fused),
            "dag-jacobi": lambda k, fused: DagJacobi(k=k, fused=fused),
            "dag-doubling": lambda k, fused: DagDoubling(k=k, fused=fused)},
}
"""By model, then by name: ``make(k, fused)``, the schedule."""


def schedule_names(model):
    """The names of ``model``'s schedules ("mlp", "rnn" or "dag"), its baseline first."""
    return list(SCHEDULES[model])


def make_schedule(model, name, k=2, fused=False):
    """``model``'s schedule called ``name``, with ``k`` worker streams where it takes them; a ValueError of
    one line that names the valid ones for a name it lacks."""
    made = SCHEDULES[model].get(name)
    if made is None:
        raise ValueError(f"{name!r} is not a schedule of {model}; choose from {', '.join(SCHEDULES[model])}")
    return made(k, fused)
