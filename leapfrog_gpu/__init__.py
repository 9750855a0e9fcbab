"""leapfrog_gpu: deep MLPs whose weight gradients leapfrog the backward chain on k streams.

This top level is the library: the network and its buffers (``network``), the schedules of a pass
(``schedules``, ``naumov``), the names of activations and costs (``functions``), the plain NumPy
reference (``reference``) and the calibration behind ``Leapfrog("auto")`` (``autotune``). It imports
``backends`` (where arrays live and how streams run) and never ``tools`` (the commands built on it):
imports point downwards only, tools -> library -> backends.

>>> from leapfrog_gpu import MLP, Leapfrog
>>> net = MLP([64, 128, 128, 10], backend="numpy")
>>> net.sgd_step([0.5] * 64, [0.0] * 10, eta=0.1, schedule=Leapfrog(k=2))
>>> net.close()
"""

from .backends import get_backend
from .naumov import NaumovJacobi, NaumovScan
from .network import MLP
from .schedules import Leapfrog, Sequential

__all__ = ["MLP", "Leapfrog", "NaumovJacobi", "NaumovScan", "Sequential", "get_backend"]
__version__ = "0.1.0"
