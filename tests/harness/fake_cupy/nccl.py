"""``cupy.cuda.nccl`` on the stand-in: ``get_unique_id``, ``NcclCommunicator(ndev, commId, rank)`` and its
``allReduce(sendbuf, recvbuf, count, datatype, op, stream)`` on pointers (``array.data.ptr``), enqueued on
the stream whose ``ptr`` it is given. It must be in place, on the current stream, and not the legacy
default one. As CuPy 14 (``cupy_backends/cuda/libs/nccl.pyx``): the id is 128 bytes (``bytes``, not the
tuple of CuPy 13), ``commId`` must be ``bytes`` of that length, failures raise ``NcclError``.

Two modes (``use_processes``):

- one process stands for every rank (the default): the other ``ndev - 1`` hold the very same buffer, so
  a sum multiplies it by ``ndev`` when the stream reaches it;
- one process per rank, under ``mpiexec``: building a communicator is collective over
  ``MPI.COMM_WORLD`` (a duplicate of it), and two ranks on one device of one host are refused as NCCL
  refuses them (``ncclInvalidUsage``; NCCL's warning, "Duplicate GPU detected", is put in the message);
  a sum is an MPI all-reduce on that duplicate when the stream reaches it.
"""

import ctypes
import os
import socket

import numpy as np

from . import queues
from .queues import CUDARuntimeError

available = True
NCCL_SUM, NCCL_FLOAT32, NCCL_FLOAT64 = 0, 7, 8
NCCL_UNIQUE_ID_BYTES = 128
_TYPES = {NCCL_FLOAT32: ctypes.c_float, NCCL_FLOAT64: ctypes.c_double}
_processes = False


class NcclError(RuntimeError):
    """``cupy.cuda.nccl.NcclError``: ``status`` is NCCL's result code."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def use_processes(on=True):
    """One process per rank (``on``), or one process standing for every rank."""
    global _processes
    _processes = bool(on)


def get_unique_id():
    return os.urandom(NCCL_UNIQUE_ID_BYTES)


class NcclCommunicator:
    """``cupy.cuda.nccl.NcclCommunicator`` of rank ``rank`` among ``ndev`` (see the module docstring)."""

    def __init__(self, ndev, commId, rank):  # noqa: N803 - CuPy's names
        if not isinstance(commId, bytes):
            raise TypeError(f"Argument 'commId' has incorrect type (expected bytes, got {type(commId).__name__})")
        if len(commId) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"commId length {len(commId)} != {NCCL_UNIQUE_ID_BYTES}.")
        if not 0 <= rank < ndev:
            raise NcclError(4, "NCCL_ERROR_INVALID_ARGUMENT: invalid argument (run with NCCL_DEBUG=WARN for details)")
        self.ndev, self._mpi = ndev, None
        if _processes:
            self._mpi = _join(ndev, commId, rank)

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):  # noqa: N802 - CuPy's name
        current = queues.device.stack[-1]
        if sendbuf != recvbuf or op != NCCL_SUM or datatype not in _TYPES:
            raise ValueError("the stand-in's allReduce sums float32 or float64 in place")
        if stream != current.ptr or current._null:
            raise CUDARuntimeError("cudaErrorInvalidValue", f"allReduce on stream {stream:#x}: the stand-in wants "
                                   f"the current stream ({current.ptr:#x}), and not the legacy default one")
        view = np.ctypeslib.as_array(ctypes.cast(recvbuf, ctypes.POINTER(_TYPES[datatype])), (count,))
        queues.device.trace.append(("launch", stream, "ncclAllReduce"))
        if self._mpi is None:
            ranks = self.ndev
            queues.enqueue_touching(current, "ncclAllReduce", lambda: np.multiply(view, ranks, out=view), (),
                                    writes=[view])
        else:
            comm, (in_place, total) = self._mpi
            queues.enqueue_touching(current, "ncclAllReduce", lambda: comm.Allreduce(in_place, view, op=total), (),
                                    writes=[view])


def _join(ndev, commId, rank):  # noqa: N803
    """Every rank's (id, rank, host, device) over MPI; NCCL's refusals; the duplicate communicator."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    peers = comm.allgather((commId, rank, socket.gethostname(), queues.device.current))
    ranks = sorted(peer[1] for peer in peers)
    if comm.Get_size() != ndev or len({peer[0] for peer in peers}) != 1 or ranks != list(range(ndev)):
        comm.Free()
        raise NcclError(5, "NCCL_ERROR_INVALID_USAGE: invalid usage (the stand-in wants one rank per MPI process, "
                        "every rank with rank 0's id)")
    seen = {}
    for _, peer, host, device in sorted(peers, key=lambda p: p[1]):
        if (host, device) in seen:
            comm.Free()
            raise NcclError(5, "NCCL_ERROR_INVALID_USAGE: invalid usage (run with NCCL_DEBUG=WARN for details); "
                            f"NCCL WARN Duplicate GPU detected : rank {peer} and rank {seen[host, device]} both on "
                            f"CUDA device {device}")
        seen[host, device] = peer
    return comm, (MPI.IN_PLACE, MPI.SUM)
