"""Raw kernels on the stand-in: ``RawModule(code=, options=).get_function(name)`` returns a ``RawKernel``
called as ``kernel(grid, block, args, shared_mem=0, stream=None)``, enqueued on the stream. Kernels are
the real ``kernels/*.cu`` files, run by the fiber harness of ``tests/harness/cuda_cpu``; their arguments must
match the kernel's C signature and arrays be C-contiguous (the harness). A launch reads the arrays its
kernel takes as ``const`` pointers and writes the others (``queues``). ``RawModule.calls`` counts modules
built and functions looked up.

As CuPy 14 (Cython-typed arguments, ``cupy/_core/raw.pyx``, ``cupy/cuda/function.pyx``): ``options``, and
``grid`` and ``block``, must be tuples (a list raises ``TypeError``); a NumPy array argument of more than
one element is refused. A launch is checked against the kernel's ptxas numbers for sm_90 (``ptxas``):
threads a block, registers, shared memory, as ``cuLaunchKernel`` checks them.
"""

import collections
import re

import numpy as np

import cuda_cpu

from . import ptxas, queues
from .arrays import ndarray, numpy_view


def _typed(value, kind, what):
    """Cython's check of an argument declared ``tuple`` or ``str``."""
    if not isinstance(value, kind):
        raise TypeError(f"Argument '{what}' has incorrect type (expected {kind.__name__}, got {type(value).__name__})")


class RawKernel:
    """One kernel of a ``RawModule``: ``kernel(grid, block, args, shared_mem=0, stream=None)``."""

    def __init__(self, function, name, resources, written):
        self._function, self.name, self._resources, self._written = function, name, resources, written

    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        _typed(grid, tuple, "grid")
        _typed(block, tuple, "block")
        if not 1 <= len(grid) <= 3 or not 1 <= len(block) <= 3:
            raise ValueError(f"grid and block must have 1 to 3 dimensions; got {grid}, {block}")
        grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
        ptxas.check(self.name, self._resources, grid, block, shared_mem)
        for arg in args:
            if isinstance(arg, np.ndarray) and arg.size != 1:
                raise TypeError(f"You are trying to pass a numpy.ndarray of shape {arg.shape} as a kernel "
                                "parameter. Only numpy.ndarrays of size one can be passed by value. If you meant "
                                "to pass a pointer to __global__ memory, you need to pass a cupy.ndarray instead.")
        stream = queues.device.stack[-1] if stream is None else stream
        function, values = self._function, tuple(numpy_view(arg) for arg in args)
        queues.device.trace.append(("launch", stream.ptr, self.name))
        arrays = [(i, arg) for i, arg in enumerate(args) if isinstance(arg, ndarray)]
        reads = [arg for i, arg in arrays if i not in self._written]
        writes = [arg for i, arg in arrays if i in self._written]
        queues.enqueue(stream, self.name, lambda: function(grid, block, values), reads, writes)


class RawModule:
    """``cupy.RawModule(code=..., options=...)`` compiled for the CPU harness (g++, cached on disk).

    ``RawModule.calls`` counts ``"module"`` (modules built) and ``"get_function"`` (lookups) since reset.
    """

    calls = collections.Counter()

    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=False):
        if code is None or path is not None or name_expressions:
            raise NotImplementedError("the CuPy stand-in builds RawModule(code=..., options=...) only")
        _typed(code, str, "code")
        _typed(options, tuple, "options")
        self.code, self.options = code, options
        self._module = cuda_cpu.RawModule(code, options)
        self._resources = ptxas.resources(code, options)
        RawModule.calls["module"] += 1

    def get_function(self, name):
        RawModule.calls["get_function"] += 1
        return RawKernel(self._module.get_function(name), name, self._resources[name], written(self.code, name))


def written(code, name):
    """The positions of the pointer parameters of kernel ``name`` in ``code`` that are not ``const``: what
    it writes. Kernels of both precisions come from one macro (``name_##SUFFIX``) or are written out."""
    base = re.sub(r"_f(32|64)$", "", name)
    found = re.search(rf"__global__\s+void\s+(?:{re.escape(name)}|{re.escape(base)}_##SUFFIX)\s*\(([^)]*)\)", code)
    if found is None:
        raise KeyError(f"no signature of kernel {name!r} in its module's source")
    params = [param.replace("\\", " ").strip() for param in found.group(1).split(",")]
    return {i for i, param in enumerate(params) if "*" in param and not param.startswith("const")}
