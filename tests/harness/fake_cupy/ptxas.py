"""What the stand-in's launches are checked against: each kernel's registers and static shared memory
as ptxas reports them for sm_90 (NVRTC with ``-Xptxas=-v``, no GPU needed; ``cuda-bindings`` and the
NVRTC wheel come with the test extras), and the launch limits of an sm_90 device.

``resources(code, options)`` compiles with the options CuPy 14's ``RawModule`` passes to NVRTC (the
module's own, then ``-ftz=true`` and ``--device-as-default-execution-space``, ``cupy/cuda/compiler.py``)
and caches the report beside the CPU harness's libraries (``cuda_cpu.CACHE``). ``check(...)`` refuses
a launch as ``cuLaunchKernel`` does: more than 1024 threads a block or a block or grid edge past its
limit (``CUDA_ERROR_INVALID_VALUE``), more registers than one SM holds for the block, 65,536 of them
allocated per warp in units of 256 (``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``), or more than 48 KB of static
and dynamic shared memory, the most a kernel may use without opting in
(``cudaFuncAttributeMaxDynamicSharedMemorySize``; ``CUDA_ERROR_INVALID_VALUE``).
"""

import hashlib
import json
import math
import os
import re

import cuda_cpu

CUPY_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")
ARCH = "sm_90"
MAX_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256
SHARED_WITHOUT_OPT_IN = 48 * 1024


class CUDADriverError(RuntimeError):
    """What CuPy raises for a failed driver call (``cuLaunchKernel``); ``status`` names the error."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


def resources(code, options):
    """``{kernel: {"registers": r, "shared": static shared bytes}}`` of ``code`` built for sm_90."""
    flags = (*options, *CUPY_OPTIONS, f"-arch={ARCH}", "-Xptxas=-v")
    key = hashlib.sha256(json.dumps([code, flags]).encode()).hexdigest()[:32]
    path = cuda_cpu.CACHE / f"ptxas-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    report = _report(_compile(code, flags))
    cuda_cpu.CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}-{id(report)}.tmp")  # the cache is shared by processes
    partial.write_text(json.dumps(report))
    partial.replace(path)
    return report


def check(name, numbers, grid, block, shared_mem):
    """Refuse the launch of kernel ``name`` (its ``resources``) as ``cuLaunchKernel`` would."""
    threads = math.prod(block)
    if threads > MAX_THREADS or any(n > top for n, top in zip(block, MAX_BLOCK)) or \
            any(n > top for n, top in zip(grid, MAX_GRID)) or min(*grid, *block) < 1:
        raise CUDADriverError("CUDA_ERROR_INVALID_VALUE", f"invalid argument (launching {name} with grid {grid}, "
                              f"block {block}: at most {MAX_THREADS} threads a block, edges {MAX_BLOCK}, grid "
                              f"{MAX_GRID})")
    per_warp = math.ceil(numbers["registers"] * 32 / REGISTER_UNIT) * REGISTER_UNIT
    if per_warp * math.ceil(threads / 32) > REGISTERS_PER_SM:
        raise CUDADriverError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                              f"too many resources requested for launch ({name}: {numbers['registers']} registers "
                              f"x {threads} threads > {REGISTERS_PER_SM} registers of an SM)")
    if numbers["shared"] + shared_mem > SHARED_WITHOUT_OPT_IN:
        raise CUDADriverError("CUDA_ERROR_INVALID_VALUE",
                              f"invalid argument ({name}: {numbers['shared']} bytes of static and {shared_mem} of "
                              f"dynamic shared memory > {SHARED_WITHOUT_OPT_IN} without opting in)")


def _compile(code, flags):
    from cuda.bindings import nvrtc

    result, program = nvrtc.nvrtcCreateProgram(code.encode(), b"module.cu", 0, [], [])
    _ok(nvrtc, result)
    try:
        encoded = [flag.encode() for flag in flags]
        (compiled,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        result, size = nvrtc.nvrtcGetProgramLogSize(program)
        _ok(nvrtc, result)
        log = b" " * size
        _ok(nvrtc, nvrtc.nvrtcGetProgramLog(program, log)[0])
        log = log.rstrip(b"\0 ").decode()
        if compiled != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC could not compile the module ({' '.join(flags)}):\n{log}")
        return log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _ok(nvrtc, result):
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {result!r}")


def _report(log):
    report = {}
    for name, body in re.findall(r"Function properties for (\w+)\n(.*?)(?=\nptxas info\s*: Compiling|\Z)", log, re.S):
        used = re.search(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?", body)
        report[name] = {"registers": int(used.group(1)), "shared": int(used.group(2) or 0)}
    return report
