"""The CuPy stand-in (tests/harness/fake_cupy) as strict as CuPy 14 and CUDA where the review found it lenient:
tuples for grid, block and ``RawModule`` options; launches checked against the kernels' ptxas numbers for
sm_90; 128-byte NCCL ids; the three capture modes and what each refuses; node priorities, used only by a
graph instantiated with ``cudaGraphInstantiateFlagUseNodePriority``. (Two ranks on one device, refused
as NCCL refuses them, run under mpiexec: tests/tools/test_commands_parallel.py.)"""

import threading

import numpy as np
import pytest

from fake_cupy.ptxas import check
from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source


def delta_hidden(cp):
    module = cp.RawModule(code=kernel_source("elementwise.cu"), options=launch.compile_options(()))
    return module.get_function("delta_hidden_f64")


def test_grid_block_and_options_must_be_tuples(standin):
    kernel, a = delta_hidden(standin), standin.zeros(4)
    for grid, block in (([1, 1, 1], (32, 1, 1)), ((1, 1, 1), [32, 1, 1]), (1, (32,))):
        with pytest.raises(TypeError, match="incorrect type \\(expected tuple, got"):
            kernel(grid, block, (a, a, np.int64(4)))
    with pytest.raises(TypeError, match="Argument 'options' has incorrect type \\(expected tuple, got list\\)"):
        standin.RawModule(code=kernel_source("elementwise.cu"), options=list(launch.compile_options(())))
    kernel((1,), (32,), (a, a, np.int64(4)))  # CuPy pads a tuple to three dimensions


def test_launches_are_checked_against_the_kernels_ptxas_numbers(standin):
    """Threads a block, block and grid edges, registers of an SM, shared memory without opting in: as
    cuLaunchKernel refuses them. The numbers are ptxas's for sm_90."""
    kernel, a = delta_hidden(standin), standin.zeros(4)
    args = (a, a, np.int64(4))
    registers = kernel._resources["registers"]
    assert 0 < registers <= 64 and kernel._resources["shared"] == 0  # what ptxas reported for this kernel
    kernel((1,), (1024,), args)
    for grid, block in (((1,), (1025,)), ((1,), (32, 32, 2)), ((1,), (1, 1, 65)), ((1, 65536), (32,))):
        with pytest.raises(standin.CUDADriverError, match="CUDA_ERROR_INVALID_VALUE"):
            kernel(grid, block, args)
    kernel((1,), (32,), args, shared_mem=48 * 1024)
    with pytest.raises(standin.CUDADriverError, match="dynamic shared memory > 49152 without opting in"):
        kernel((1,), (32,), args, shared_mem=48 * 1024 + 1)
    check("k", {"registers": 64, "shared": 0}, (1, 1, 1), (1024, 1, 1), 0)  # 65,536 registers: fits
    with pytest.raises(standin.CUDADriverError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        check("k", {"registers": 65, "shared": 0}, (1, 1, 1), (1024, 1, 1), 0)  # 72 a thread once rounded
    with pytest.raises(standin.CUDADriverError, match="static and 1 of dynamic"):
        check("k", {"registers": 32, "shared": 48 * 1024}, (1, 1, 1), (32, 1, 1), 1)


def test_nccl_ids_are_128_bytes_and_a_communicator_refuses_others(standin):
    nccl = standin.cuda.nccl
    unique_id = nccl.get_unique_id()
    assert isinstance(unique_id, bytes) and len(unique_id) == 128 and nccl.get_unique_id() != unique_id
    nccl.NcclCommunicator(2, unique_id, 1)
    with pytest.raises(TypeError, match="expected bytes, got tuple"):
        nccl.NcclCommunicator(2, tuple(unique_id), 0)  # what CuPy 13 returned
    with pytest.raises(ValueError, match="commId length 16 != 128"):
        nccl.NcclCommunicator(2, unique_id[:16], 0)


MODES = ("streamCaptureModeGlobal", "streamCaptureModeThreadLocal", "streamCaptureModeRelaxed")
REFUSED = {  # mode: (refused from the capturing thread, refused from another thread)
    "streamCaptureModeGlobal": (True, True),
    "streamCaptureModeThreadLocal": (True, False),
    "streamCaptureModeRelaxed": (False, False),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unsafe", ["event.synchronize", "event.query", "cudaMalloc", "cudaHostAlloc"])
def test_each_capture_mode_refuses_what_cuda_refuses(standin, mode, unsafe):
    """A potentially unsafe call (a host wait or query, an allocation the pool cannot serve, pinned memory)
    during a capture, from the capturing thread and from another: refused (and the capture invalidated)
    in global mode from both, in thread-local mode from the capturing thread only, in relaxed mode never."""
    calls = {"event.synchronize": lambda: standin.cuda.Event().synchronize(),
             "event.query": lambda: standin.cuda.Event().done,
             "cudaMalloc": lambda: standin.empty(1000),  # on the null stream, which is not capturing
             "cudaHostAlloc": lambda: standin.cuda.alloc_pinned_memory(64)}
    for thread, refused in zip(("capturing", "other"), REFUSED[mode]):
        stream = standin.cuda.Stream(non_blocking=True)
        stream.begin_capture(mode=getattr(standin.cuda.runtime, mode))
        outcome = []

        def call():
            try:
                calls[unsafe]()
                outcome.append(None)
            except standin.CUDARuntimeError as error:
                outcome.append(error)

        if thread == "capturing":
            call()
        else:
            other = threading.Thread(target=call)
            other.start()
            other.join()
        (error,) = outcome
        assert (error is not None) == refused, (thread, error)
        if refused:
            assert error.status == "cudaErrorStreamCaptureUnsupported" and unsafe in str(error)
            with pytest.raises(standin.CUDARuntimeError, match="cudaErrorStreamCaptureInvalidated"):
                stream.end_capture()
        else:
            stream.end_capture()


def test_a_graph_uses_its_nodes_priorities_only_when_instantiated_with_the_flag(standin):
    """Nodes keep the priorities of the streams they were captured on; CuPy's Graph (flags 0) runs them at
    the launch stream's, an executable graph made with cudaGraphInstantiateFlagUseNodePriority at theirs."""
    runtime = standin.modules()["cuda.bindings.runtime"]
    least, greatest = standin.PRIORITY_RANGE
    high, low = (standin.cuda.Stream(non_blocking=True, priority=p) for p in (greatest, least))
    a = standin.zeros(4)
    standin.cuda.Device().synchronize()
    high.begin_capture()
    with high:
        a.fill(1.0)
    low.wait_event(high.record())
    with low:
        a.fill(2.0)
    high.wait_event(low.record())
    graph = high.end_capture()
    flag = runtime.cudaGraphInstantiateFlags.cudaGraphInstantiateFlagUseNodePriority
    error, with_priorities = runtime.cudaGraphInstantiateWithFlags(graph.graph, flag)
    assert error == runtime.cudaError_t.cudaSuccess
    ran = []
    for launch_graph in (lambda: graph.launch(stream=high), lambda: runtime.cudaGraphLaunch(with_priorities, high.ptr)):
        start = len(standin.node_runs())
        launch_graph()
        high.synchronize()
        ran.append([(stream, priority) for _, stream, priority in standin.node_runs()[start:]])
    assert ran == [[(high.ptr, greatest), (low.ptr, greatest)], [(high.ptr, greatest), (low.ptr, least)]]
    assert runtime.cudaGraphInstantiateWithFlags(graph.graph, 16)[0] == runtime.cudaError_t.cudaErrorInvalidValue
    assert runtime.cudaGraphExecDestroy(with_priorities) == (runtime.cudaError_t.cudaSuccess,)
