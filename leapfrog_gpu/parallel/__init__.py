"""Data parallelism: the program's communicator and its watchdog (``comm``), and what a network does with
it, joining it and summing its gradients across ranks (``reducer``).

>>> from leapfrog_gpu.parallel import world
>>> world().size
1
"""

from .comm import Communicator, world

__all__ = ["Communicator", "world"]
