"""Summing a gradient buffer across processes on the communication stream: MPI for host arrays, NCCL
for device arrays (docs/design.md §5).

An engine is a callable ``engine(array)`` that replaces the contiguous 1-D ``array`` by its sum over
every rank, in place. The library calls it inside ``backend.launch(backend.comm_stream(), ...)``: on
the host that runs it on the communication stream's own thread, the only thread that calls MPI while
a step runs; on the GPU the backend has entered the communication stream, and the NCCL call is
enqueued there and returns at once.
"""

import importlib

import numpy as np


class MpiSum:
    """``MPI_Allreduce(MPI_IN_PLACE, array, MPI_SUM)`` of a NumPy array over ``comm`` (an mpi4py
    communicator that no other thread uses while a step runs)."""

    def __init__(self, comm):
        from mpi4py import MPI

        self._comm, self._in_place, self._sum = comm, MPI.IN_PLACE, MPI.SUM

    def __call__(self, array):
        self._comm.Allreduce(self._in_place, array, op=self._sum)


class NcclSum:
    """``ncclAllReduce`` (sum, in place) of a CuPy array on the current CUDA stream.

    Args:
        cupy: the CuPy module of the backend.
        ranks, rank: the number of ranks (one GPU each) and this one's.
        unique_id: ``nccl_unique_id()`` of rank 0, handed to every rank (over MPI) before this is built.
    """

    def __init__(self, cupy, ranks, rank, unique_id):
        nccl = nccl_module()
        self._cupy, self._nccl = cupy, nccl
        self._comm = nccl.NcclCommunicator(ranks, unique_id, rank)  # returns once every rank has joined
        self._types = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64}

    def __call__(self, array):
        stream = self._cupy.cuda.get_current_stream()
        self._comm.allReduce(array.data.ptr, array.data.ptr, array.size, self._types[array.dtype],
                             self._nccl.NCCL_SUM, stream.ptr)


def nccl_module():
    """CuPy's NCCL wrapper, ``cupy.cuda.nccl`` (not imported by ``import cupy``)."""
    nccl = importlib.import_module("cupy.cuda.nccl")
    if not getattr(nccl, "available", False):
        raise RuntimeError("CuPy finds no NCCL library: install NCCL (pip install nvidia-nccl-cu12, or "
                           "nvidia-nccl-cu13) to sum gradients across GPUs")
    return nccl


def nccl_unique_id():
    """A fresh NCCL unique id (rank 0 makes it; every rank builds its ``NcclSum`` from the same one)."""
    return nccl_module().get_unique_id()


def use_local_device(local_rank):
    """Make GPU ``local_rank`` (modulo the GPUs of this machine) current: one process per GPU. Call it
    before the CuPy backend is created, whose streams belong to the device current then."""
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(local_rank % count).use()
