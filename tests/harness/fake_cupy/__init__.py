"""A CuPy stand-in on the CPU, at least as strict as CuPy 14 about streams, so that the CuPy backend's
own code (``backends/cuda.py``, ``backends/ops_cuda.py``, the ``cupy`` branches of the library) runs
in CI and a missing wait fails there. This package is what ``import cupy`` gives (``modules()``).

Nothing runs when it is enqueued. Every stream, the legacy default (null) stream included, is a queue;
the queues run when the host blocks on them, interleaved in an adversarial order that respects only
events and CUDA's blocking rules. ``reset(order, seed)`` starts a fresh device with one of ``ORDERS``.
Kernels are the real ``kernels/*.cu`` files, run by the fiber harness of ``tests/harness/cuda_cpu``
(``RawModule``); the rest is NumPy, run when reached.

Modelled as CuPy 14.2's source does it (``cupy/cuda/stream.pyx``, ``cupy/_core/core.pyx``,
``cupy/cuda/memory.pyx``, ``cupy/cuda/graph.pyx``, ``cupy_backends/cuda/libs/cublas.pyx``), one concern
a module, each saying what it models:

- ``queues``: the device's queues, the orders they run in, the host's waits;
- ``streams``: ``Stream``, ``Event``, ``Device``, ``get_elapsed_time``, and ``reset``;
- ``memory``: the per-stream memory pool (freed memory poisoned in stream order) and pinned memory;
- ``arrays``: ``ndarray``, creation, ufuncs, reductions, ``matmul``, host transfers;
- ``kernels``: ``RawModule`` and ``RawKernel``, launches checked against ``ptxas``'s numbers for sm_90;
- ``capture``: stream capture in its three modes, ``Graph``, node priorities;
- ``bindings``: ``cuda.bindings.runtime`` (``cuda-bindings``): graphs instantiated with flags;
- ``nccl``: ``cupy.cuda.nccl``, one process standing for every rank, or one process per rank;
- ``nvmath``: nvmath-python's cuBLAS bindings (``nvmath.bindings.cublas``), installed beside CuPy by
  ``helpers.install_standin`` (``tests/harness/helpers.py``) (and ``tests/harness/standin/nvmath``), its calls run on their handle's stream;
- here: the rest of what the project reaches: ``cuda.runtime`` (device count, properties, capture modes),
  ``cuda.nvtx`` (``_UnavailableModule`` is what CuPy built without NVTX puts there), ``cuda.profiler``
  and ``cupyx.profiler.profile`` (no-ops); ``modules()`` says what ``sys.modules`` must hold.

Stricter than CuPy, on purpose:

- An allocation on a capturing stream raises ``CaptureAllocationError``. CuPy allows it (relaxed
  capture mode; the pool may call cudaMalloc), but the graph keeps writing memory that returns to the
  pool when the array dies: a graph must use preallocated buffers only.
- A capturing stream that waits on an event recorded outside the capture is refused: that
  dependency would not be part of the graph.
- Kernel arguments must match the kernel's C signature and arrays be C-contiguous (the harness).

Not modelled: several devices' own queues and memory (device ids only), the per-thread default stream,
host threads (the current stream is one global; only the capture modes know threads), ``launch_host_func``,
memory hooks and async (``cudaMallocAsync``) pools, CUB's temporary allocations inside reductions, advanced indexing, Jitify and name expressions, external
event record/wait nodes, and flush-to-zero (the harness computes float32 with denormals, as NumPy).
Performance is not modelled: ``get_elapsed_time`` measures host time.
"""

import contextlib
import sys
import types

from . import bindings, nccl, queues
from .arrays import (UFUNCS, all, any, arange, argmax, array, asarray, ascontiguousarray, asnumpy,  # noqa: A004
                     concatenate, copyto, dot, empty, empty_like, eye, full, full_like, matmul, max, min, moveaxis,
                     ndarray, ones, ones_like, sum, zeros, zeros_like)
from .capture import Graph, node_runs
from .kernels import RawKernel, RawModule
from .memory import CaptureAllocationError, PinnedMemoryPointer, alloc_pinned_memory
from .ptxas import CUDADriverError
from .queues import ORDERS, CUDARuntimeError, UseAfterFreeError, pending, trace, waits
from .streams import PRIORITY_RANGE, Device, Event, Stream, get_current_stream, get_elapsed_time, reset

globals().update(UFUNCS)  # cupy.add, cupy.exp, ...

DEVICE_NAME = "CPU stand-in (cuda_cpu harness)"
__version__ = "14.2.0"  # cupy-cuda13x, as on the lent GPU machines


class _UnavailableModule:
    """What CuPy puts in ``cupy.cuda.nvtx`` when it was built without NVTX: no functions at all."""

    available = False

    def __init__(self, name):
        self.__name__ = name


nvtx = types.SimpleNamespace(available=True, RangePush=lambda message, id_color=-1: None,
                             RangePop=lambda: None, Mark=lambda message, id_color=-1: None)
H200_PROPERTIES = {"multiProcessorCount": 132, "clockRate": 1980000, "memoryClockRate": 3125000,
                   "memoryBusWidth": 6144, "l2CacheSize": 50 * 2**20, "sharedMemPerMultiprocessor": 228 * 1024,
                   "maxThreadsPerMultiProcessor": 2048}  # what the model reads of an H200 (4.8 TB/s peak)
runtime = types.SimpleNamespace(
    CUDARuntimeError=CUDARuntimeError, is_hip=False, getDevice=lambda: Device().id,
    getDeviceCount=lambda: queues.device.count, getDeviceProperties=lambda device: {"name": DEVICE_NAME.encode(), **H200_PROPERTIES},
    deviceSynchronize=lambda: Device().synchronize(), streamCaptureModeGlobal=queues.GLOBAL,
    streamCaptureModeThreadLocal=queues.THREAD_LOCAL, streamCaptureModeRelaxed=queues.RELAXED,
    runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000,
)
driver = types.SimpleNamespace(CUDADriverError=CUDADriverError)
profiler = types.SimpleNamespace(start=lambda: None, stop=lambda: None)
cuda = types.SimpleNamespace(
    Stream=Stream, Event=Event, Device=Device, Graph=Graph, get_current_stream=get_current_stream,
    get_elapsed_time=get_elapsed_time, alloc_pinned_memory=alloc_pinned_memory,
    PinnedMemoryPointer=PinnedMemoryPointer, runtime=runtime, driver=driver, nvtx=nvtx, profiler=profiler, nccl=nccl,
    is_available=lambda: True,
)


@contextlib.contextmanager
def _profile():
    yield


cupyx = types.SimpleNamespace(profiler=types.SimpleNamespace(profile=_profile))
"""``cupyx`` as far as the project uses it: ``cupyx.profiler.profile()``."""


def is_available():
    return True


def modules():
    """What ``sys.modules`` must hold for ``import cupy``, ``from cupy.cuda import ...``,
    ``import cupyx.profiler`` and ``importlib.import_module("cuda.bindings.runtime")`` to reach the
    stand-in."""
    return {"cupy": sys.modules[__name__], "cupy.cuda": cuda, "cupy.cuda.nccl": nccl, "cupyx": cupyx,
            "cupyx.profiler": cupyx.profiler, "cuda.bindings.runtime": bindings}


reset()
