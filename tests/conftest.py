"""Shared fixtures: the backends a test body runs on, the GPU half skipped with a reason, and the
CuPy stand-in (``tests/fake_cupy.py``) under each order in which it interleaves its queues."""

import sys

import numpy as np
import pytest

import cuda_cpu
from leapfrog_gpu.backends import cuda_available

NO_GPU = "needs CuPy and a usable CUDA device (none found)"
gpu = pytest.mark.skipif(not cuda_available(), reason=NO_GPU)

BACKENDS = ["numpy", pytest.param("cupy", marks=[pytest.mark.gpu, gpu])]


@pytest.fixture(params=BACKENDS)
def backend_name(request):
    return request.param


STANDIN_ORDERS = ("main-first", "workers-first", "random")
"""The orders of the stand-in's queues every CuPy test runs under (the host backend's deferred ones)."""


def install_standin(monkeypatch, order, seed=0):
    """The CuPy stand-in as ``cupy`` (and ``cupy.cuda``, ``cupyx``) for this test, on a fresh device
    whose queues run in ``order``."""
    if not cuda_cpu.available():
        pytest.skip(f"the CuPy stand-in runs kernels on the CPU harness, which needs {cuda_cpu.CXX}")
    import fake_cupy

    fake_cupy.reset(order, seed)
    fake_cupy.RawModule.calls.clear()
    for name, module in fake_cupy.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake_cupy


@pytest.fixture(params=STANDIN_ORDERS)
def standin(request, monkeypatch):
    """The CuPy stand-in, under each of its orders."""
    return install_standin(monkeypatch, request.param, seed=len(request.node.name))


def to_numpy(array):
    """A host copy of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def batch(sizes, size, seed=0, dtype=np.float64):
    """A random input batch (n_1, B) and a target batch (n_L, B) in (0, 1)."""
    rng = np.random.default_rng(seed)
    x = rng.random((sizes[0], size)).astype(dtype)
    y = rng.uniform(0.05, 0.95, (sizes[-1], size)).astype(dtype)
    return x, y


def pytest_addoption(parser):
    parser.addoption("--chaos-full", action="store_true",
                     help="run the full chaos suite (over 500 steps) instead of the short CI one")


@pytest.fixture
def chaos_steps(request):
    """Steps per chaos configuration: 12 with --chaos-full (576 steps in all), else 4."""
    return 12 if request.config.getoption("--chaos-full") else 4
