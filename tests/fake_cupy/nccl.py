"""``cupy.cuda.nccl`` on the stand-in: ``get_unique_id``, ``NcclCommunicator(ndev, commId, rank)`` and its
``allReduce(sendbuf, recvbuf, count, datatype, op, stream)`` on pointers (``array.data.ptr``), enqueued on
the stream whose ``ptr`` it is given. One process stands for every rank: the other ``ndev - 1`` hold the
very same buffer, so a sum multiplies it by ``ndev`` when the stream reaches it. It must be in place, on
the current stream, and not the legacy default one.
"""

import ctypes

import numpy as np

from . import queues
from .queues import CUDARuntimeError

available = True
NCCL_SUM, NCCL_FLOAT32, NCCL_FLOAT64 = 0, 7, 8
_TYPES = {NCCL_FLOAT32: ctypes.c_float, NCCL_FLOAT64: ctypes.c_double}
_ID = b"stand-in nccl id"


def get_unique_id():
    return _ID


class NcclCommunicator:
    """``cupy.cuda.nccl.NcclCommunicator`` of rank ``rank`` among ``ndev``, whose other ranks hold the same
    buffers as this one (see the module docstring)."""

    def __init__(self, ndev, commId, rank):  # noqa: N803 - CuPy's names
        if commId != _ID or not 0 <= rank < ndev:
            raise ValueError(f"NcclCommunicator wants an id from get_unique_id() and 0 <= rank < ndev; got "
                             f"{commId!r}, rank {rank} of {ndev}")
        self.ndev = ndev

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):  # noqa: N802 - CuPy's name
        current = queues.device.stack[-1]
        if sendbuf != recvbuf or op != NCCL_SUM or datatype not in _TYPES:
            raise ValueError("the stand-in's allReduce sums float32 or float64 in place")
        if stream != current.ptr or current._null:
            raise CUDARuntimeError("cudaErrorInvalidValue", f"allReduce on stream {stream:#x}: the stand-in wants "
                                   f"the current stream ({current.ptr:#x}), and not the legacy default one")
        view = np.ctypeslib.as_array(ctypes.cast(recvbuf, ctypes.POINTER(_TYPES[datatype])), (count,))
        ranks = self.ndev
        queues.device.trace.append(("launch", stream, "ncclAllReduce"))
        queues.enqueue(current, "ncclAllReduce", lambda: np.multiply(view, ranks, out=view))
