"""``cuda.bindings.runtime`` (``cuda-bindings``) on the stand-in, as far as the project reaches it: graphs
instantiated with flags and launched. As in ``cuda-bindings``, a call returns a tuple whose first item
is the ``cudaError_t``, and handles are accepted as their integer values.

``cudaGraphInstantiateWithFlags(graph, flags)`` takes the handle of a ``cupy.cuda.Graph`` (``graph.graph``)
and returns ``(error, executable graph)``; with ``cudaGraphInstantiateFlagUseNodePriority`` its nodes run
at the priorities of the streams they were captured on, without it at that of the launch stream
(``capture``). ``cudaGraphLaunch(graph_exec, stream_ptr)`` enqueues it; ``cudaGraphExecDestroy`` forgets it.
"""

import enum

from . import queues
from .capture import Graph, GraphExec


class cudaError_t(enum.IntEnum):  # noqa: N801 - the binding's names
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorInvalidResourceHandle = 400


class cudaGraphInstantiateFlags(enum.IntEnum):  # noqa: N801
    cudaGraphInstantiateFlagAutoFreeOnLaunch = 1
    cudaGraphInstantiateFlagUpload = 2
    cudaGraphInstantiateFlagDeviceLaunch = 4
    cudaGraphInstantiateFlagUseNodePriority = 8


class cudaStreamCaptureMode(enum.IntEnum):  # noqa: N801
    cudaStreamCaptureModeGlobal = queues.GLOBAL
    cudaStreamCaptureModeThreadLocal = queues.THREAD_LOCAL
    cudaStreamCaptureModeRelaxed = queues.RELAXED


def cudaGraphInstantiateWithFlags(graph, flags):  # noqa: N802
    graph = queues.device.handles.get(int(graph))
    if not isinstance(graph, Graph):
        return cudaError_t.cudaErrorInvalidResourceHandle, None
    if int(flags) & ~sum(cudaGraphInstantiateFlags):
        return cudaError_t.cudaErrorInvalidValue, None
    use_priority = bool(int(flags) & cudaGraphInstantiateFlags.cudaGraphInstantiateFlagUseNodePriority)
    return cudaError_t.cudaSuccess, GraphExec(graph._nodes, use_priority)


def cudaGraphLaunch(graphExec, stream):  # noqa: N802, N803
    graph_exec = queues.device.handles.get(int(graphExec))
    target = next((s for s in queues.device.streams if s.ptr == int(stream)), None)
    if not isinstance(graph_exec, GraphExec) or target is None:
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    graph_exec.launch(target)
    return (cudaError_t.cudaSuccess,)


def cudaGraphExecDestroy(graphExec):  # noqa: N802, N803
    if not isinstance(queues.device.handles.pop(int(graphExec), None), GraphExec):
        return (cudaError_t.cudaErrorInvalidResourceHandle,)
    return (cudaError_t.cudaSuccess,)
