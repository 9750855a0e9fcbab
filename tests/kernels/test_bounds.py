"""The CPU harness's bounds checks on a real kernel: the outer product (7) for B = 1 with its row bound one
too far (``i <= n``) reads delta and writes nabla_w one row past their ends (in a step, in outer_bias, the
(6)(7) kernel). The launch stops with the index and the buffer's size, from ``CudaOps`` on plain arrays and
from a step on the CuPy stand-in, whose arrays are pool memory with no guard page after them (there such a
store used to corrupt the heap)."""

import contextlib

import numpy as np
import pytest

from helpers import batch
from leapfrog_gpu import MLP, Leapfrog
from leapfrog_gpu.backends import ops_cuda

import cuda_cpu

BOUND = "if (i < n && j < m) {"


@pytest.fixture
def outer_bound_off_by_one(monkeypatch):
    """kernels/nabla_w.cu with the outer product's row bound ``i <= n``, for the CudaOps made from now on."""
    if not cuda_cpu.available():
        pytest.fail(f"the CPU harness needs a C++ compiler ({cuda_cpu.CXX}) on the PATH")
    source = ops_cuda.kernel_source
    assert source("nabla_w.cu").count(BOUND) == 1
    mutated = source("nabla_w.cu").replace(BOUND, "if (i <= n && j < m) {")
    monkeypatch.setattr(ops_cuda, "kernel_source", lambda f: mutated if f == "nabla_w.cu" else source(f))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_a_row_past_the_end_stops_the_launch_with_the_index_and_the_size(outer_bound_off_by_one, dtype):
    rng = np.random.default_rng(3)
    n, m = 33, 31
    delta, a = rng.standard_normal((n, 1)).astype(dtype), rng.standard_normal((m, 1)).astype(dtype)
    out = np.full((n, m), np.nan, dtype)
    suffix = ops_cuda.SUFFIX[np.dtype(dtype)]
    with pytest.raises(cuda_cpu.KernelError, match=rf"^outer_{suffix}: out-of-range access by thread \(\d+, \d+, 0\) "
                                                   rf"of block \(\d+, \d+, 0\): index {n} of argument 1, a buffer of "
                                                   rf"{n} elements$"):
        ops_cuda.CudaOps(cuda_cpu).nabla_w(out, delta, a)


def test_a_step_on_the_standin_fails_with_the_index_and_the_size(outer_bound_off_by_one, standin):
    from leapfrog_gpu.backends.cuda import CupyBackend

    sizes = [7, 13, 5, 11, 3]  # no width a multiple of the outer product's block rows
    backend = CupyBackend()
    net = MLP(sizes, dtype="float64", backend=backend)
    net.sgd_step(*batch(sizes, 1), 0.5, Leapfrog(2))
    with pytest.raises(cuda_cpu.KernelError, match=r"^outer_bias_f64: out-of-range access by thread .*: "
                                                   r"index (\d+) of argument 2, a buffer of \1 elements$"):
        net.synchronize()
    for _ in sizes:  # the stand-in runs what is still queued: the other layers' outer products fail as well
        with contextlib.suppress(cuda_cpu.KernelError):
            backend.close()
    assert backend.closed
