"""The recurrent network: ``RNN`` (``network``), its pass at one sequence length and batch size
(``plan``, its time recursion bound once in ``recursion``), its schedules (``schedules``: BPTT, the
wavefront; ``scans``: the scans over time), the forward pass over time as a Newton solve (``newton``:
``TimeNewton``), its float64 reference (``reference``) and its way to and from PyTorch (``torch_io``).
"""

from .network import RNN
from .newton import TimeNewton
from .scans import NaumovRNN, TimeScan
from .schedules import BPTT, Wavefront

__all__ = ["RNN", "BPTT", "Wavefront", "TimeScan", "NaumovRNN", "TimeNewton"]
