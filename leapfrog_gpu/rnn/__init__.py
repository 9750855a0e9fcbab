"""The recurrent network: ``RNN`` (``network``), its pass at one sequence length and batch size
(``plan``), its schedules (``schedules``: BPTT, the wavefront; ``scans``: the scans over time), its
float64 reference (``reference``) and its way to and from PyTorch (``torch_io``).
"""

from .network import RNN
from .scans import NaumovRNN, TimeScan
from .schedules import BPTT, Wavefront

__all__ = ["RNN", "BPTT", "Wavefront", "TimeScan", "NaumovRNN"]
