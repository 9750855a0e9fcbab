"""The multilayer perceptron: ``MLP`` (``network``), its pass at one batch size (``plan``), Naumov's
solvers of its backward pass (``naumov``), the tuner of a step's schedule and BLAS threads (``autotune``)
and its way to and from PyTorch (``torch_io``).
"""

from .naumov import NaumovJacobi, NaumovScan
from .network import MLP

__all__ = ["MLP", "NaumovJacobi", "NaumovScan"]
