"""Data parallelism: the program's communicator and its watchdog (``comm``), what a launcher says before MPI
starts (``launcher``), and what a network does with it, joining it and summing its gradients across ranks
(``reducer``).

>>> from leapfrog_gpu.parallel import world
>>> world().size
1
"""

__all__ = ["Communicator", "world"]


def __getattr__(name):
    """``Communicator`` and ``world``, from ``comm`` on first use: ``launcher`` is read before NumPy loads (a
    command interrupted while it starts)."""
    if name in __all__:
        from . import comm

        return getattr(comm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
