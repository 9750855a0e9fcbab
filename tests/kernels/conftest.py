"""The devices the kernel tests run on: the CPU harness (``cuda_cpu``), the NumPy twins, and a GPU where one is
usable (skipped otherwise)."""

import numpy as np
import pytest

import cuda_cpu
from helpers import CpuDevice, gpu_device_or_skip
from leapfrog_gpu.backends import ops_numpy


class TwinOps:
    """ops_numpy with CudaOps's signatures: the updates get the scratch the twins stream through."""

    def __getattr__(self, name):
        return getattr(ops_numpy, name)

    @staticmethod
    def sgd_update(param, nabla, step, scratch):
        ops_numpy.sgd_update(param, nabla, step, np.empty(ops_numpy.SCRATCH, param.dtype))

    @staticmethod
    def fused_update(w, delta, a, step, scratch):
        ops_numpy.fused_update(w, delta, a, step, np.empty(max(ops_numpy.SCRATCH, w.shape[1]), w.dtype))

    @staticmethod
    def update(w, nabla_w, b, nabla_b, step, scratch):
        ops_numpy.update(w, nabla_w, b, nabla_b, step, np.empty(ops_numpy.SCRATCH, w.dtype))


class TwinDevice:
    """The NumPy twins, on host arrays."""

    name = "twin"
    ops = TwinOps()

    def to_device(self, array):
        return np.array(array)

    def to_host(self, array):
        return np.array(array)


@pytest.fixture(scope="module")
def cpu():
    if not cuda_cpu.available():
        pytest.fail(f"the CPU harness needs a C++ compiler ({cuda_cpu.CXX}) on the PATH")
    return CpuDevice()


@pytest.fixture(scope="module", params=["cpu", "twin", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "gpu":
        return gpu_device_or_skip()
    if request.param == "twin":
        return TwinDevice()
    return request.getfixturevalue("cpu")
