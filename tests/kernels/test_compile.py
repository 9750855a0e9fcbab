"""Every ``kernels/*.cu`` compiles with NVRTC, with the options CuPy's RawModule will use (the
launchers' and those CuPy adds itself), for sm_80 and sm_90: the kernels that stage through
kernels/pipeline.h with their asynchronous copies and with plain ones (``launch.PLAIN_COPY``) alike.

NVRTC needs no GPU: ``cuda-bindings`` and the NVRTC wheel come with the test extras. With ``-arch=sm_XX``
NVRTC runs ptxas, and ``-Xptxas=-v`` puts its report in the program log: a warning, a spill or a stack
frame (local memory) in any kernel fails the check.
"""

import functools
import re
import sys
from pathlib import Path

import pytest
from cuda.bindings import nvrtc

from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_dir, kernel_files, kernel_source

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))
import kernel_traffic as traffic  # noqa: E402
import sass  # noqa: E402

pytestmark = pytest.mark.slow

ARCHS = ("sm_80", "sm_90")  # A100 and H100/H200; every module for sm_90, the first of each file and copy path for sm_80


def _modules():
    """``launch.modules()`` with asynchronous copies and with plain ones, each (file, options) once."""
    found = {}
    for plain in (False, True):
        saved, launch.PLAIN_COPY = launch.PLAIN_COPY, plain
        try:
            found.update(dict.fromkeys(launch.modules()))
        finally:
            launch.PLAIN_COPY = saved
    return list(found)


MODULES = [(filename, (*options, *launch.CUPY_OPTIONS)) for filename, options in _modules()]
"""(file, NVRTC options) as RawModule compiles them for the launchers, both copy paths."""
IDS = [" ".join((filename, *options[1:])) for filename, options in _modules()]
FIRSTS = {(filename, "-DLEAPFROG_PLAIN_COPY" in options): (filename, options) for filename, options in reversed(MODULES)}
CASES = [pytest.param(*module, "sm_90", id=f"{name}-sm_90") for module, name in zip(MODULES, IDS)] + [
    pytest.param(*module, "sm_80", id=f"{name}-sm_80") for module, name in zip(MODULES, IDS) if module in FIRSTS.values()]


class CompileError(RuntimeError):
    """NVRTC rejected a source; the message holds NVRTC's log."""


def _check(result):
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {result!r}")


def nvrtc_compile(source, filename, options, arch):
    """Compile ``source`` to a cubin for ``arch`` with ``options``; returns NVRTC's log (with ptxas's)."""
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(result)
    try:
        flags = [flag.encode() for flag in (*options, f"-arch={arch}", "-Xptxas=-v")]
        (compiled,) = nvrtc.nvrtcCompileProgram(program, len(flags), flags)
        log = _text(program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        if compiled != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile {filename} ({' '.join(options)}, {arch}):\n{log}")
        return log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


@functools.lru_cache(maxsize=None)
def compiled(filename, options, arch):
    """``(log, ptx)`` of a module of ``kernels/`` (``sass.build``: compiled once for the tests and the kernel
    model that read it)."""
    built = sass.build(kernel_source(filename), filename, (*options, f"-arch={arch}"))
    return built["log"], built["ptx"]


def _text(program, get_size, get):
    result, size = get_size(program)
    _check(result)
    text = b" " * size
    (result,) = get(program, text)
    _check(result)
    return text.rstrip(b"\0 ").decode()


def ptxas_report(log):
    """``{kernel: {"stack frame", "spill stores", "spill loads", "registers"}}`` from ptxas -v's log."""
    report = {}
    sections = re.findall(r"Function properties for (\w+)\n(.*?)(?=\n\S*ptxas info\s*: Comp|\Z)", log, re.S)
    for name, body in sections:
        local = re.findall(r"(\d+) bytes (stack frame|spill stores|spill loads|lmem)", body)
        numbers = {key: int(value) for value, key in local}
        numbers["registers"] = int(re.search(r"Used (\d+) registers", body).group(1))
        report[name] = numbers
    return report


def kernel_names(source):
    """Names of the ``extern "C" __global__`` kernels, with the _f32/_f64 suffix of each macro use."""
    direct = re.findall(r'extern "C" __global__ void (\w+_f(?:32|64))\(', source)
    templated = re.findall(r'extern "C" __global__ void (\w+)_##SUFFIX\(', source)
    suffixes = re.findall(r"^LEAPFROG_\w+\(\w+, (f32|f64)\)", source, re.M)
    return {*direct, *(f"{name}_{suffix}" for name in templated for suffix in suffixes)}


def test_every_kernel_file_is_built_by_the_launchers():
    assert {path.name for path in kernel_files()} == {filename for filename, _ in launch.modules()}


def test_both_copy_paths_are_compiled():
    """Each module that stages through kernels/pipeline.h is built with and without LEAPFROG_PLAIN_COPY."""
    plain = [(filename, options) for filename, options in MODULES if "-DLEAPFROG_PLAIN_COPY" in options]
    assert {filename for filename, _ in plain} == {"chain.cu", "nabla_w.cu"}
    for _, options in plain:
        assert tuple(o for o in options if o != "-DLEAPFROG_PLAIN_COPY") in [o for _, o in MODULES]


@pytest.mark.parametrize("filename, options, arch", CASES)
def test_compiles_without_warning_spill_or_local_memory(filename, options, arch):
    source = kernel_source(filename)
    log, _ = compiled(filename, options, arch)
    assert "warning" not in log.lower(), log
    report = ptxas_report(log)
    names = kernel_names(source)
    assert names and {n[:-4] for n in names if n[-4:] == "_f32"} == {n[:-4] for n in names if n[-4:] == "_f64"}
    assert set(report) == names, log  # ptxas reported on every kernel, float32 and float64
    for name, numbers in report.items():
        local = {key: numbers.get(key, 0) for key in ("stack frame", "spill stores", "spill loads", "lmem")}
        assert not any(local.values()), f"{name} uses local memory for {arch}: {local}\n{log}"


@pytest.mark.parametrize("filename, options", MODULES, ids=IDS)
def test_float32_arithmetic_flushes_denormals_to_zero_as_under_cupy(filename, options):
    """CuPy compiles every RawModule with -ftz=true: each float32 instruction that rounds or compares
    carries .ftz in the PTX, a conversion to or from float32 (a sum over the batch runs in float64) too
    (kernels/README.md says what that changes against the NumPy twins)."""
    _, ptx = compiled(filename, options, "sm_90")
    f32 = re.findall(r"\b(?:(?:add|sub|mul|fma|div|rcp|sqrt|abs|neg|min|max|setp)(?:\.\w+)*\.f32|"
                     r"cvt(?:\.\w+)*\.(?:f32\.f64|f64\.f32))\b", ptx)
    assert f32 and all(".ftz." in op for op in f32), sorted({op for op in f32 if ".ftz." not in op})


def test_the_optimizer_updates_contract_no_multiply_add():
    """momentum_update and adam_update round each product and sum on their own: in their PTX every mul, add and
    sub carries .rn, which ptxas never contracts into a fused multiply-add (a plain one it may, by NVRTC's default
    --fmad=true), and none is an fma; so the GPU computes their NumPy twins' bits, as the CPU harness does. The
    SGD update keeps plain ones, contracted alike in the fused SGD kernels of nabla_w.cu."""
    options = next(options for filename, options in MODULES if filename == "elementwise.cu")
    _, ptx = compiled("elementwise.cu", options, "sm_90")
    bodies = dict(re.findall(r"\.entry (\w+)\((.*?)(?=\.entry |\Z)", ptx, re.S))
    for name in ("momentum_update", "adam_update", "sgd_update"):
        for suffix in ("f32", "f64"):
            ops = re.findall(r"\b(?:mul|add|sub|fma)(?:\.\w+)*\.f(?:32|64)\b", bodies[f"{name}_{suffix}"])
            unrounded = [op for op in ops if op.startswith("fma") or ".rn." not in op]
            assert ops and bool(unrounded) == (name == "sgd_update"), (name, suffix, sorted(set(ops)))


def test_syntax_error_puts_the_compiler_log_in_the_failure():
    source = kernel_source("nabla_w.cu")
    statement = "const int i0 = by * E, j0 = blockIdx.x * E, chunks = (batch + C - 1) / C;"
    broken = source.replace(statement, statement[:-1], 1)
    assert broken != source
    text = (kernel_dir() / "nabla_w.cu").read_text()  # lines as the file has them (vector.h is inlined above)
    line = text[: text.index(statement)].count("\n") + 1
    with pytest.raises(CompileError) as failure:
        nvrtc_compile(broken, "nabla_w.cu", launch.compile_options(launch.rank_options(None)), "sm_90")
    message = str(failure.value)
    assert re.search(rf"nabla_w\.cu\({line + 1}\): error", message), message  # the statement after it
    assert "expected a \";\"" in message, message


def test_local_memory_shows_in_the_report():
    """The check above can fail: an array indexed at run time lives in local memory (a stack frame).

    256 elements, each a different value: more than registers can hold, so every NVRTC version we met
    (13.0 and 13.5) keeps it on the stack (a 64-element volatile array fit in registers with 13.0)."""
    source = (
        'extern "C" __global__ void local_f32(float* x, int i) {\n'
        "    float t[256];\n"
        "    for (int j = 0; j < 256; ++j) t[j] = x[j] * j;\n"
        "    x[0] = t[i & 255];\n"
        "}\n"
    )
    report = ptxas_report(nvrtc_compile(source, "local.cu", launch.NVRTC_OPTIONS, "sm_90"))
    assert report["local_f32"]["stack frame"] > 0, report


def test_traffic_counts_every_kernel():
    names = {name[:-4] for path in kernel_files() for name in kernel_names(path.read_text())}
    assert names == set(traffic.KERNELS)


def test_warnings_show_in_the_log():
    """The warning check above can fail: NVRTC reports an unused variable in the log it returns."""
    source = 'extern "C" __global__ void unused_f32(float* x) {\n    int unused = 1;\n    x[0] = 1.0f;\n}\n'
    log = nvrtc_compile(source, "unused.cu", launch.NVRTC_OPTIONS, "sm_90")
    assert re.search(r"unused\.cu\(2\): warning", log), log
