"""CuPy launchers for the raw CUDA kernels in ``kernels/``, with the same signatures as ``ops_numpy``.

Each launcher enqueues on CuPy's current stream (the backend enters the stream around it). Modules are
compiled once per (file, options) with ``cupy.RawModule``, and each kernel looked up once per (file,
name, dtype, options): ``RawModule.get_function`` makes a new ``RawKernel`` on every call.
"""

import numpy as np

from . import launch
from .sources import kernel_source

SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}

ACTIVATION_CODES = {"sigmoid": 0, "tanh": 1, "relu": 2, "identity": 3}
"""The code of each activation sigma in kernels/elementwise.cu."""
COST_CODES = {"quadratic": 0, "cross_entropy": 1}
"""The code of each cost C in kernels/elementwise.cu."""


class CudaOps:
    """The kernels of ``kernels/*.cu`` as functions of CuPy arrays."""

    SCRATCH = 0
    """The kernels fuse what the NumPy twins stream through scratch: none is needed."""

    def __init__(self, cupy):
        self._cupy = cupy
        self._modules = {}
        self._kernels = {}

    def _kernel(self, filename, name, dtype, options=()):
        key = (filename, name, np.dtype(dtype), options)
        kernel = self._kernels.get(key)
        if kernel is None:
            module = self._modules.get((filename, options))
            if module is None:
                module = self._cupy.RawModule(code=kernel_source(filename), options=launch.compile_options(options))
                self._modules[filename, options] = module
            kernel = self._kernels[key] = module.get_function(f"{name}_{SUFFIX[np.dtype(dtype)]}")
        return kernel

    def _elementwise(self, name, size, dtype, args):
        grid, block, options = launch.elementwise_launch(size)
        self._kernel("elementwise.cu", name, dtype, options)(grid, block, args)

    def bias_activation(self, z, a, sp, b, activation):
        n, batch = z.shape
        act = np.int32(ACTIVATION_CODES[activation])
        self._elementwise("bias_activation", z.size, z.dtype, (z, a, sp, b, np.int32(n), np.int32(batch), act))

    def delta_output(self, delta, a, y, sp, cost):
        args = (delta, a, y, sp, np.int64(delta.size), np.int32(COST_CODES[cost]))
        self._elementwise("delta_output", delta.size, delta.dtype, args)

    def delta_hidden(self, delta, sp):
        self._elementwise("delta_hidden", delta.size, delta.dtype, (delta, sp, np.int64(delta.size)))

    def nabla_w(self, nabla_w, delta, a):
        self._nabla_w("", nabla_w, delta, a, ())

    def fused_update(self, w, delta, a, scale, scratch):
        """``w -= scale * (delta a^T)`` in one pass over w; ``scratch`` is unused here."""
        del scratch
        self._nabla_w("_sgd", w, delta, a, (w.dtype.type(scale),))

    def _nabla_w(self, variant, out, delta, a, extra):
        (n, batch), m = delta.shape, a.shape[0]
        if batch == 1:
            grid, block, options = launch.outer_launch(n, m)
            kernel = self._kernel("nabla_w.cu", "outer" + variant, delta.dtype, options)
            kernel(grid, block, (out, delta, a, np.int32(n), np.int32(m), *extra))
        else:
            grid, block, options = launch.rank_update_launch(n, m)
            kernel = self._kernel("nabla_w.cu", "rank_update" + variant, delta.dtype, options)
            kernel(grid, block, (out, delta, a, np.int32(n), np.int32(m), np.int32(batch), *extra))

    def nabla_b(self, nabla_b, delta):
        n, batch = delta.shape
        grid, block, options = launch.bias_launch(n)
        kernel = self._kernel("nabla_b.cu", "bias_sum", delta.dtype, options)
        kernel(grid, block, (nabla_b, delta, np.int32(n), np.int32(batch)))

    def flag_nonfinite(self, flag, x):
        """``flag[0] = 1`` when ``x`` holds a NaN or an Inf; ``flag`` (one element) is left as it is otherwise."""
        self._elementwise("flag_nonfinite", x.size, x.dtype, (flag, x, np.int64(x.size)))

    def sgd_update(self, param, nabla, scale, scratch):
        """``param -= scale * nabla`` in one pass; ``scratch`` is unused here."""
        del scratch
        args = (param, nabla, param.dtype.type(scale), np.int64(param.size))
        self._elementwise("sgd_update", param.size, param.dtype, args)
