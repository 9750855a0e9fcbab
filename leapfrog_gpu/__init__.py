"""leapfrog_gpu: deep MLPs whose weight gradients leapfrog the backward chain on k streams.

>>> from leapfrog_gpu import MLP, Leapfrog
>>> net = MLP([64, 128, 128, 10], backend="numpy")
"""

from .backends import get_backend
from .naumov import NaumovJacobi, NaumovScan
from .network import MLP
from .schedules import Leapfrog, Sequential

__all__ = ["MLP", "Leapfrog", "Sequential", "get_backend"]
__all__ += ["NaumovJacobi", "NaumovScan"]
__version__ = "0.1.0"
