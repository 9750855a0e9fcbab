"""Shared fixtures: the backends a test body runs on, the GPU half skipped with one reason that says
why, the CuPy stand-in (``tests/fake_cupy``) under each order in which it interleaves its queues,
and a last line that counts the skipped tests by reason."""

import collections
import sys

import numpy as np
import pytest

import cuda_cpu
import no_gpu_cupy
from leapfrog_gpu.backends import cuda_status

NO_GPU = f"no usable GPU: {cuda_status().why}"
"""The reason of every test skipped for want of a GPU (what CuPy and CUDA answered, or that CuPy is
not installed), so that the summary counts them under one line."""
gpu = pytest.mark.skipif(not cuda_status().usable, reason=NO_GPU)

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


@pytest.fixture
def cupy_without_gpu(monkeypatch):
    """``import cupy`` gives ``no_gpu_cupy``'s CuPy, which imports but finds no usable GPU."""
    from leapfrog_gpu import backends

    cupy = no_gpu_cupy.module()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(backends, "_said", set())
    return cupy


def pytest_terminal_summary(terminalreporter):
    """``skipped by reason: 1032 no usable GPU: ...; 2 the PyTorch anchor needs torch ...``, most first."""
    reasons = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.write_line(
            "skipped by reason: " + "; ".join(f"{count} {reason}" for reason, count in reasons.most_common()))


def pytest_addoption(parser):
    parser.addoption("--chaos-full", action="store_true",
                     help="run the full chaos suite (over 500 steps) instead of the short CI one")


@pytest.fixture
def chaos_steps(request):
    """Steps per chaos configuration: 12 with --chaos-full (576 steps in all), else 4."""
    return 12 if request.config.getoption("--chaos-full") else 4
