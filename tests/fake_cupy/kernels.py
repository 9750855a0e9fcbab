"""Raw kernels on the stand-in: ``RawModule(code=, options=).get_function(name)`` returns a ``RawKernel``
called as ``kernel(grid, block, args, shared_mem=0, stream=None)``, enqueued on the stream. Kernels are
the real ``kernels/*.cu`` files, run by the fiber harness of ``tests/cuda_cpu``; their arguments must
match the kernel's C signature and arrays be C-contiguous (the harness). A NumPy array argument of more
than one element is refused, as CuPy does. ``RawModule.calls`` counts modules built and functions looked
up.
"""

import collections

import numpy as np

import cuda_cpu

from . import queues
from .arrays import ndarray, numpy_view


class RawKernel:
    """One kernel of a ``RawModule``: ``kernel(grid, block, args, shared_mem=0, stream=None)``."""

    def __init__(self, function, name):
        self._function, self.name = function, name

    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        for arg in args:
            if isinstance(arg, np.ndarray) and arg.size != 1:
                raise TypeError(f"You are trying to pass a numpy.ndarray of shape {arg.shape} as a kernel "
                                "parameter. Only numpy.ndarrays of size one can be passed by value. If you meant "
                                "to pass a pointer to __global__ memory, you need to pass a cupy.ndarray instead.")
        stream = queues.device.stack[-1] if stream is None else stream
        function, values = self._function, tuple(numpy_view(arg) for arg in args)
        grid, block = tuple(grid), tuple(block)
        queues.device.trace.append(("launch", stream.ptr, self.name))
        queues.enqueue(stream, self.name, lambda: function(grid, block, values),
                       [arg for arg in args if isinstance(arg, ndarray)])


class RawModule:
    """``cupy.RawModule(code=..., options=...)`` compiled for the CPU harness (g++, cached on disk).

    ``RawModule.calls`` counts ``"module"`` (modules built) and ``"get_function"`` (lookups) since reset.
    """

    calls = collections.Counter()

    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=False):
        if code is None or path is not None or name_expressions:
            raise NotImplementedError("the CuPy stand-in builds RawModule(code=..., options=...) only")
        self.code, self.options = code, tuple(options)
        self._module = cuda_cpu.RawModule(code, self.options)
        RawModule.calls["module"] += 1

    def get_function(self, name):
        RawModule.calls["get_function"] += 1
        return RawKernel(self._module.get_function(name), name)
