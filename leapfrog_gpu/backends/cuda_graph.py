"""A captured CUDA graph instantiated with node priorities (docs/design.md §4), through ``cuda-bindings``;
without it, CuPy's own graph.

CUDA copies each stream's priority into the kernel nodes captured on it, but uses those priorities only
when the graph is instantiated with ``cudaGraphInstantiateFlagUseNodePriority``; otherwise every node runs
at the priority of the stream the graph is launched on. CuPy 14 instantiates with flags 0 and has no API
for flags (``cupy/cuda/graph.pyx``), so the graph CuPy's ``end_capture`` returns is instantiated again
here with ``cudaGraphInstantiateWithFlags`` and launched with ``cudaGraphLaunch``: the worker branches
keep their low priority inside the graph, and a ``rank_update`` grid does not hold the next chain kernel
off the SMs.

Where ``cuda.bindings`` cannot be imported, ``instantiate`` keeps CuPy's executable graph and launches it
with ``Graph.launch``: the same nodes and edges, so the same results, but every node runs at the main
stream's priority. That is warned once per process.
"""

import importlib
import warnings

_warned = []  # the warning about node priorities, once given


def instantiate(graph, stream):
    """The graph of a capture (a ``cupy.cuda.Graph``), ready to ``launch()`` on ``stream``: a ``CudaGraph``
    with node priorities where ``cuda.bindings`` imports, else a ``CupyGraph`` (warned once)."""
    try:
        cudart = importlib.import_module("cuda.bindings.runtime")
    except ImportError as error:
        if not _warned:
            _warned.append(error)
            warnings.warn(f"graph mode without cuda-bindings ({error}): CuPy launches the graph, whose nodes "
                          "all run at the main stream's priority, the workers' included (node priorities are "
                          "lost); pip install cuda-bindings to keep them", RuntimeWarning, stacklevel=3)
        return CupyGraph(graph, stream)
    return CudaGraph(graph, stream, cudart)


class CupyGraph:
    """CuPy's executable graph (instantiated with flags 0); ``launch()`` enqueues it on ``stream``."""

    def __init__(self, graph, stream):
        self.graph, self.stream = graph, stream

    def launch(self):
        self.graph.launch(stream=self.stream)


class CudaGraph:
    """A step captured by ``CupyBackend.capture``: ``graph`` (a ``cupy.cuda.Graph``, which owns the
    ``cudaGraph_t``) instantiated with node priorities through ``cudart`` (``cuda.bindings.runtime``);
    ``launch()`` enqueues it on ``stream``."""

    def __init__(self, graph, stream, cudart):
        self._cudart = cudart
        flag = self._cudart.cudaGraphInstantiateFlags.cudaGraphInstantiateFlagUseNodePriority
        error, self._exec = self._cudart.cudaGraphInstantiateWithFlags(graph.graph, flag)
        self._check(error, "cudaGraphInstantiateWithFlags")
        self.graph, self.stream = graph, stream

    def launch(self):
        (error,) = self._cudart.cudaGraphLaunch(self._exec, self.stream.ptr)
        self._check(error, "cudaGraphLaunch")

    def __del__(self):
        if getattr(self, "_exec", None) is not None:
            self._cudart.cudaGraphExecDestroy(self._exec)

    def _check(self, error, call):
        if error != self._cudart.cudaError_t.cudaSuccess:
            raise RuntimeError(f"{call} failed: {error!r}")
