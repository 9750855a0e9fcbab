"""A CuPy 14.2.0 (CUDA runtime 12.9) that imports but finds no usable GPU: its runtime answers
``INSUFFICIENT_DRIVER``, as on a machine whose NVIDIA driver (here for CUDA 12.2) is too old. The
``cupy_without_gpu`` fixture puts it in ``sys.modules``; a test's own process can too."""

import importlib.machinery
import types

INSUFFICIENT_DRIVER = "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
CUDA_ANSWER = f"CuPy 14.2.0 finds no usable GPU: {INSUFFICIENT_DRIVER} (NVIDIA driver: 12.2; CuPy's CUDA runtime: 12.9)"
"""What every message says about this CuPy."""


def module():
    """The ``cupy`` module."""
    def device_count():
        raise RuntimeError(INSUFFICIENT_DRIVER)  # what CuPy's CUDARuntimeError says

    cupy = types.ModuleType("cupy")
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cupy.__version__ = "14.2.0"
    cupy.is_available = lambda: False
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=device_count, driverGetVersion=lambda: 12020, runtimeGetVersion=lambda: 12090))
    return cupy
