"""CuPy launchers for the raw CUDA kernels in ``kernels/``, with the same signatures as ``ops_numpy``.

Each launcher enqueues on CuPy's current stream (the backend enters the stream around it). Modules are
compiled once per (file, options) with ``cupy.RawModule``, and each kernel looked up once per (file,
name, dtype, options): ``RawModule.get_function`` makes a new ``RawKernel`` on every call.

The chain, (2) and (5), runs on cuBLAS and an elementwise kernel, or, with ``chain="kernels"``, on our own
kernels of kernels/chain.cu, one per layer. cuBLAS is reached through nvmath-python (``cublas.Blas``: one
handle, in eager steps and in a CUDA graph alike), or, without it, through ``cupy.matmul``, which CuPy
refuses during stream capture: a graph then runs the chain on our kernels, and says so once.
"""

import contextlib
import functools
import logging

import numpy as np

from . import cublas, launch
from .sources import kernel_source

SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}

ACTIVATION_CODES = {"sigmoid": 0, "tanh": 1, "relu": 2, "identity": 3}
"""The code of each activation sigma in kernels/elementwise.cu."""
COST_CODES = {"quadratic": 0, "cross_entropy": 1}
"""The code of each cost C in kernels/elementwise.cu."""
CHAINS = ("cublas", "kernels")
"""What runs the chain (2)(5): cuBLAS and an elementwise kernel, or our kernels of kernels/chain.cu."""
log = logging.getLogger("leapfrog_gpu")
_said = set()  # the graph fallbacks already logged: each is said once per process, as get_backend's are


class CudaOps:
    """The kernels of ``kernels/*.cu`` as functions of CuPy arrays."""

    SCRATCH = 0
    """The kernels fuse what the NumPy twins stream through scratch: none is needed."""

    def __init__(self, cupy, chain="cublas", blas=None, why=""):
        """``blas``: a ``cublas.Blas`` for ``chain="cublas"``, or None (then ``why`` says why not)."""
        if chain not in CHAINS:
            raise ValueError(f"chain must be one of {', '.join(map(repr, CHAINS))}; got {chain!r}")
        self._cupy = cupy
        self._modules = {}
        self._kernels = {}
        self.chain = chain
        self.blas, self._why = blas, why

    @contextlib.contextmanager
    def capturable_chain(self):
        """Within the block, the chain runs on what a CUDA graph can capture: cuBLAS through nvmath-python,
        or our kernels (said once, as a warning, when ``chain="cublas"`` has no nvmath-python)."""
        if self.chain == "kernels" or self.blas is not None:
            yield
            return
        if self._why not in _said:
            _said.add(self._why)
            log.warning("graph mode runs the chain (2)(5) on our kernels of kernels/chain.cu, not cuBLAS: %s",
                        self._why)
        chain, self.chain = self.chain, "kernels"
        try:
            yield
        finally:
            self.chain = chain

    def _matmul(self, out, w, x, transpose):
        """``out = w x`` (``w^T x`` when ``transpose``) on cuBLAS, through nvmath-python when it is here."""
        if self.blas is not None:
            self.blas.matmul(out, w, x, transpose)
        else:
            self._cupy.matmul(w.T if transpose else w, x, out=out)

    def bind_matmul(self, out, w, x, transpose=False, accumulate=False, worker=False):
        """``out = w x`` (``w^T x`` if ``transpose``; ``out += ...`` if ``accumulate``) as a call of no
        argument, bound now: one cuBLAS call through nvmath-python (``cublas.Blas.bind``) where ``out`` has a unit
        stride along its rows and ``w`` and ``x`` one along their rows or columns (``cublas.takes``), else
        ``cupy.matmul`` (into a buffer made now, then added, to accumulate). A product that a worker may make
        (``worker``) runs on a handle of the stream current at the call, each stream's own, under every schedule:
        the schedules then run it alike and agree to the bit. Without nvmath-python such a product's
        ``cupy.matmul`` shares CuPy's one handle among the streams, where cuBLAS promises the same bits only while
        one stream runs."""
        cupy, blas, a = self._cupy, self.blas, w.T if transpose else w
        if blas is not None and cublas.takes(out, w, x, transpose):
            if not worker:
                return blas.bind(out, w, x, transpose, accumulate)
            bound = {}  # stream ptr -> the call bound on its handle

            def on_current_stream():
                stream = cupy.cuda.get_current_stream()
                if stream.ptr not in bound:
                    bound[stream.ptr] = blas.bind(out, w, x, transpose, accumulate, stream)
                bound[stream.ptr]()

            return on_current_stream
        if not accumulate:
            return functools.partial(cupy.matmul, a, x, out=out)
        product = cupy.empty(out.shape, out.dtype)

        def call():
            cupy.matmul(a, x, out=product)
            cupy.add(out, product, out=out)

        return call

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

    def forward(self, z, a, sp, w, a_prev, b, activation):
        """(2)(3) of one layer: ``z = w a_prev + b``, ``a = sigma(z)``, ``sp = sigma'(z)``."""
        if self.chain == "cublas":
            self._matmul(z, w, a_prev, False)
            self.bias_activation(z, a, sp, b, activation)
            return
        (n, m), batch = w.shape, a_prev.shape[1]
        act = np.int32(ACTIVATION_CODES[activation])
        self._chain("forward", n, batch, w.dtype, (z, a, sp, w, a_prev, b, np.int32(n), np.int32(m)), (act,))

    def backward(self, delta, w_next, delta_next, sp):
        """(5) of one layer: ``delta = ((w^{l+1})^T delta^{l+1}) * sp``."""
        if self.chain == "cublas":
            self._matmul(delta, w_next, delta_next, True)
            self.delta_hidden(delta, sp)
            return
        (m, n), batch = w_next.shape, delta.shape[1]
        self._chain("backward", n, batch, delta.dtype, (delta, w_next, delta_next, sp, np.int32(n), np.int32(m)), ())

    def _chain(self, kind, n, batch, dtype, args, tail):
        """Launch ``kind``_gemv (B = 1) or ``kind``_gemm (with ``batch`` before ``tail``) of chain.cu."""
        grid, block, options = launch.chain_launch(kind, n, batch, np.dtype(dtype).itemsize)
        if batch == 1:
            self._kernel("chain.cu", f"{kind}_gemv", dtype, options)(grid, block, (*args, *tail))
        else:
            self._kernel("chain.cu", f"{kind}_gemm", dtype, options)(grid, block, (*args, np.int32(batch), *tail))

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

    def gradients(self, nabla_w, nabla_b, delta, a):
        """(6) and (7) in one kernel: ``nabla_b`` from the error the ``nabla_w`` kernel reads anyway."""
        (n, batch), m = delta.shape, a.shape[0]
        if batch == 1:
            grid, block, options = launch.outer_launch(n, m)
            kernel = self._kernel("nabla_w.cu", "outer_bias", delta.dtype, options)
            kernel(grid, block, (nabla_w, nabla_b, delta, a, np.int32(n), np.int32(m)))
        else:
            grid, block, options = launch.rank_update_launch(n, m, batch, delta.itemsize)
            kernel = self._kernel("nabla_w.cu", "rank_update_bias", delta.dtype, options)
            kernel(grid, block, (nabla_w, nabla_b, delta, a, np.int32(n), np.int32(m), np.int32(batch)))

    def fused_update(self, w, delta, a, controls, scratch):
        """``w -= controls[0] * (delta a^T)`` unless ``controls[1]``, in one pass over w; ``scratch`` is unused here."""
        del scratch
        self._nabla_w("_sgd", w, delta, a, (controls,))

    def _nabla_w(self, variant, out, delta, a, extra):
        (n, batch), m = delta.shape, a.shape[0]
        if batch == 1:
            grid, block, options = launch.outer_launch(n, m)
            kernel = self._kernel("nabla_w.cu", "outer" + variant, delta.dtype, options)
            kernel(grid, block, (out, delta, a, np.int32(n), np.int32(m), *extra))
        else:
            grid, block, options = launch.rank_update_launch(n, m, batch, delta.itemsize)
            kernel = self._kernel("nabla_w.cu", "rank_update" + variant, delta.dtype, options)
            kernel(grid, block, (out, delta, a, np.int32(n), np.int32(m), np.int32(batch), *extra))

    def nabla_b(self, nabla_b, delta):
        n, batch = delta.shape
        grid, block, options = launch.bias_launch(n)
        kernel = self._kernel("nabla_b.cu", "bias_sum", delta.dtype, options)
        kernel(grid, block, (nabla_b, delta, np.int32(n), np.int32(batch)))

    def sgd_update(self, param, nabla, controls, scratch):
        """``param -= controls[0] * nabla`` unless ``controls[1]``, in one pass; ``scratch`` is unused here."""
        del scratch
        self._elementwise("sgd_update", param.size, param.dtype, (param, nabla, controls, np.int64(param.size)))

    def update(self, w, nabla_w, b, nabla_b, controls, scratch):
        """``sgd_update`` of w and of b in one kernel; ``scratch`` is unused here."""
        del scratch
        args = (w, nabla_w, np.int64(w.size), b, nabla_b, np.int64(b.size), controls)
        self._elementwise("sgd_update_layer", w.size + b.size, w.dtype, args)

    def momentum_update(self, param, nabla, buf, controls, momentum, dampening, nesterov, weight_decay):
        """torch.optim.SGD's step in one pass (``ops_numpy.momentum_update``); ``buf`` None without momentum (the
        kernel then touches no buffer: ``param``, which it writes, stands in its place, so that a launch is not
        taken for a writer of ``nabla``)."""
        t = param.dtype.type
        args = (param, nabla, param if buf is None else buf, controls, np.int64(param.size), t(momentum),
                t(1 - dampening), np.int32(nesterov), t(weight_decay))  # 1 - d rounded once, as the twin's
        self._elementwise("momentum_update", param.size, param.dtype, args)

    def adam_update(self, param, nabla, m, v, controls, beta1, beta2, eps, weight_decay, decoupled):
        """torch.optim.Adam's (AdamW's) step in one pass (``ops_numpy.adam_update``)."""
        t = param.dtype.type
        args = (param, nabla, m, v, controls, np.int64(param.size), t(beta1), t(1 - beta1), t(beta2), t(1 - beta2),
                t(eps), t(weight_decay), np.int32(decoupled))  # 1 - beta rounded once, as torch.optim's and the twin's
        self._elementwise("adam_update", param.size, param.dtype, args)

    def _gates(self, name, state, t, args):
        """Launch ``name`` of kernels/gates.cu for step ``t`` of the (n, tau, B) sequence ``state``'s shape, on CuPy's
        current stream."""
        n, tau, batch = state.shape
        assert 0 <= t < tau, (t, tau)
        assert all(a.flags.c_contiguous for a in args), "the gated steps index whole, C-contiguous sequences"
        grid, block, options = launch.gates_launch(n, batch)
        kernel = self._kernel("gates.cu", name, state.dtype, options)
        ints = (np.int32(n), np.int32(t), np.int32(tau), np.int32(batch))
        kernel(grid, block, (*args, *ints))

    def gru_forward(self, z, gates, hn, h, uh, b_hn, t):
        """The GRU's step t (kernels/gates.cu, ``ops_numpy.gru_forward``): gates, hn and h^t from z = w x + b
        (3N, tau, B), uh = u^l h^{t-1} (3N, B) and b_hn (N,)."""
        self._gates("gru_forward", hn, t, (z, gates, hn, h, uh, b_hn))

    def gru_backward(self, delta, delta_u, delta_h, gates, hn, h, t):
        """The GRU's backward step t (``ops_numpy.gru_backward``): delta, delta_u and delta_h^{t-1} += u dh."""
        self._gates("gru_backward", hn, t, (delta, delta_u, delta_h, gates, hn, h))

    def lstm_forward(self, z, gates, c, h, t):
        """The LSTM's step t (``ops_numpy.lstm_forward``): gates, c^t and h^t from z = w x + b + u h (4N, tau, B)."""
        self._gates("lstm_forward", c, t, (z, gates, c, h))

    def lstm_backward(self, delta, dc, delta_h, gates, c, t):
        """The LSTM's backward step t (``ops_numpy.lstm_backward``): delta, and dc (N, B) carried to step t - 1."""
        self._gates("lstm_backward", c, t, (delta, dc, delta_h, gates, c))

    def check_finite(self, controls, x, code):
        """``controls[1] = code`` if ``x`` holds a NaN or an Inf and ``controls[1]`` is still 0 (a strided view
        is checked in a contiguous copy)."""
        if not x.flags.c_contiguous:
            x = x.copy()
        grid, block, options = launch.check_finite_launch(x.size)
        kernel = self._kernel("elementwise.cu", "check_finite", x.dtype, options)
        kernel(grid, block, (controls, x, np.int64(x.size), x.dtype.type(code)))

    def step_done(self, controls):
        """``controls[7] = controls[4]`` (t) unless ``controls[1]`` holds a refusal: one thread."""
        self._kernel("elementwise.cu", "step_done", controls.dtype, launch.elementwise_launch(1)[2])(
            (1, 1, 1), (1, 1, 1), (controls,))

    def sum_squares(self, x):
        """The sum of the squares of x's elements, as a float64 0-d array (``ops_numpy.sum_squares``), in float64 on
        the device: no read on the host."""
        cupy = self._cupy
        return cupy.sum(cupy.square(x, dtype=np.float64))

    def full_beside(self, param, k, fill):
        """An array shaped as ``param`` filled with ``fill`` (``ops_numpy.full_beside``: a GPU's loads need no
        stagger)."""
        return self._cupy.full_like(param, fill)

    @staticmethod
    def set_element(array, index, value):
        """``array[index] = value`` on the current stream (a fill kernel: no host copy, no allocation)."""
        array[index:index + 1].fill(value)
