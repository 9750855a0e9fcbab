"""A captured CUDA graph instantiated with node priorities (docs/design.md §4), through ``cuda-bindings``.

CUDA copies each stream's priority into the kernel nodes captured on it, but uses those priorities only
when the graph is instantiated with ``cudaGraphInstantiateFlagUseNodePriority``; otherwise every node runs
at the priority of the stream the graph is launched on. CuPy 14 instantiates with flags 0 and has no API
for flags (``cupy/cuda/graph.pyx``), so the graph CuPy's ``end_capture`` returns is instantiated again
here with ``cudaGraphInstantiateWithFlags`` and launched with ``cudaGraphLaunch``: the worker branches
keep their low priority inside the graph, and a ``rank_update`` grid does not hold the next chain kernel
off the SMs.
"""

import importlib


def runtime():
    """``cuda.bindings.runtime``, or an error that says what to install."""
    try:
        return importlib.import_module("cuda.bindings.runtime")
    except ImportError:
        raise RuntimeError("graph mode on the GPU needs cuda-bindings, to instantiate graphs with node priorities "
                           "(CuPy has no API for it): pip install 'leapfrog_gpu[cuda12]' ([cuda13] for CUDA 13), "
                           "or pip install cuda-bindings") from None


class CudaGraph:
    """A step captured by ``CupyBackend.capture``: ``graph`` (a ``cupy.cuda.Graph``, which owns the
    ``cudaGraph_t``) instantiated with node priorities; ``launch()`` enqueues it on ``stream``."""

    def __init__(self, graph, stream):
        self._cudart = runtime()
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
