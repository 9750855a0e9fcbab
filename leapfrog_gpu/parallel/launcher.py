"""What an MPI launcher tells a process before MPI starts: how many processes it started and this one's rank,
read from the environment alone (no NumPy, no mpi4py), so that a command interrupted while it starts can ask."""

import os

LAUNCHERS = (("PMI_SIZE", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
             ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"))
"""Environment variables in which MPI launchers (MPICH and Intel MPI, Open MPI, MVAPICH) give the
number of processes and the rank; without them the program runs alone and mpi4py is not imported."""


def launcher_rank():
    """This process's rank as its launcher gives it (0 without one), known before MPI starts."""
    return _launcher(1)


def launcher_size():
    """The number of processes its launcher started (1 without one), known before MPI starts."""
    return _launcher(0)


def _launcher(which):
    for variables in LAUNCHERS:
        value = os.environ.get(variables[which], "")
        if value.isdigit():
            return int(value)
    return 1 - which  # alone: one process, rank 0
