"""profiling/sass.py: what it reads from a kernel's compiled sm_90 code (registers against ptxas's own report;
loads by width; the hot loop; the cycles of the L1/shared-memory data path).

NVRTC and cuobjdump come with the test extras, so this runs without a GPU."""

import re
import sys
from pathlib import Path

import pytest
from cuda.bindings import nvrtc

from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "profiling"))
import sass  # noqa: E402


def _ptxas_registers(source, filename, options):
    """Registers per kernel from ptxas's own report (-Xptxas=-v), read apart from cuobjdump."""
    flags = [flag.encode() for flag in (*options, "-arch=sm_90", "-Xptxas=-v")]
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(flags), flags)
        assert status == nvrtc.nvrtcResult.NVRTC_SUCCESS
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    log = log.decode()
    return {name: int(registers) for name, registers in
            re.findall(r"Function properties for (\w+)\n.*?Used (\d+) registers", log, re.S)}


@pytest.mark.parametrize("filename, defines", [
    ("chain.cu", launch.chain_launch("forward", 1024, 32, 4)[2]),
    ("nabla_w.cu", launch.rank_update_launch(1024, 1024, 32, 4)[2]),
    ("elementwise.cu", launch.elementwise_launch(1)[2]),
])
def test_registers_are_those_ptxas_reports(filename, defines):
    options = (*launch.compile_options(defines), *launch.CUPY_OPTIONS)
    expected = _ptxas_registers(kernel_source(filename), filename, options)
    got = {name: f["registers"] for name, f in sass.compiled(filename, tuple(defines)).items()}
    assert expected and got == expected


def test_sass_counts_tell_128_bit_loads_from_32_bit_ones():
    source = ('extern "C" __global__ void wide_f32(float4* out, const float4* x, const float* y) {\n'
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    float4 v = x[i];\n"
              "    float s = y[i];\n"
              "    out[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);\n"
              "}\n")
    counts = sass.inspect(source, "wide.cu", launch.NVRTC_OPTIONS)["wide_f32"]["sass"]
    assert sass.count(counts, r"LDG\.E\.128(\.CONSTANT)?") == 1, counts
    assert sass.count(counts, r"LDG\.E(\.CONSTANT)?") == 1, counts
    assert sass.count(counts, r"STG\.E\.128") == 1, counts


LOOPS = r"""
extern "C" __global__ void loops_f32(float* out, const float* x, const float* y, int n, int m) {
    __shared__ float tile[256];
    tile[threadIdx.x] = y[threadIdx.x];
    __syncthreads();
    float acc = 0.0f, scale = x[0];
#pragma unroll 1
    for (int k = 0; k < n; ++k) {            // the hot loop: 2 FMAs and 2 shared loads each time round
        acc += tile[(k + threadIdx.x) % 256] * scale;
        acc += tile[(k * 3 + threadIdx.x) % 256] * acc;
    }
    float sum = 0.0f;
#pragma unroll 1
    for (int k = 0; k < m; ++k) {            // no FMA here: a global load and an add each time round
        sum += x[k];
    }
    out[threadIdx.x] = acc + sum;
}
"""


def test_the_hot_loop_is_the_loop_that_holds_the_fmas():
    """Its instructions only: not the staging before it, nor the other loop's global loads."""
    function = sass.inspect(LOOPS, "loops.cu", launch.NVRTC_OPTIONS)["loops_f32"]
    hot, everything = function["hot"], function["sass"]
    assert sass.count(hot, sass.FMA) == sass.count(everything, sass.FMA) == 2, hot
    assert sass.count(hot, r"LDS(\..*)?") == sass.count(everything, r"LDS(\..*)?") == 2, hot
    assert sass.count(hot, r"STS(\..*)?") == 0 and sass.count(everything, r"STS(\..*)?") == 1, hot
    assert sass.count(hot, r"LDG(\..*)?") == 0 and sass.count(everything, r"LDG(\..*)?") >= 3, hot


def test_the_data_path_counts_the_widest_of_each_access_and_the_shuffles():
    """128 bytes a cycle: a 16-byte access of 32 lanes is 4 cycles, an 8-byte one 2, a 4-byte one 1; where an
    access comes in two widths (the aligned path and the element-by-element one) only the widest counts."""
    counts = {"LDS": 8, "LDS.128": 2, "LDGSTS.E.BYPASS.128.ZFILL": 2, "LDGSTS.E": 8, "LDG.E.64": 3,
              "LDG.E.128.CONSTANT": 1, "SHFL.BFLY": 5, "FFMA": 64, "STS.64": 1}
    assert sass.data_path_cycles(counts) == 2 * 4 + 2 * 4 + 1 * 4 + 5 + 1 * 2


def test_instructions_that_never_run_are_not_counted():
    """``@!PT``: ptxas pads some copies with loads predicated on false."""
    source = ('extern "C" __global__ void copies_f32(float* out, const float* x) {\n'
              "    __shared__ __align__(16) float s[512];\n"
              "    const unsigned to = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x * 4]);\n"
              '    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"(to), "l"(x + threadIdx.x * 4));\n'
              '    asm volatile("cp.async.wait_all;\\n" ::: "memory");\n'
              "    __syncthreads();\n"
              "    out[threadIdx.x] = s[(threadIdx.x * 5) % 512];\n"
              "}\n")
    counts = sass.inspect(source, "copies.cu", launch.NVRTC_OPTIONS)["copies_f32"]["sass"]
    assert sass.count(counts, r"LDGSTS.*") == 1 and sass.count(counts, r"LDS(\..*)?") == 1, counts


def test_what_inspect_read_is_kept_on_disk_by_source_and_options(tmp_path, monkeypatch):
    """A second ``inspect`` of the same source and options reads the kept files, neither the compiler nor
    ``cuobjdump``; another source, or other options, compiles again; a build kept by the compile test (``build``
    of the same source and options) is read by ``cuobjdump`` without a compile."""
    monkeypatch.setattr(sass, "CACHE", tmp_path)
    source = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
    first = sass.inspect(source, "twice.cu", launch.NVRTC_OPTIONS)
    assert len(list(tmp_path.glob("*.json"))) == 2 and len(list(tmp_path.glob("*.cubin"))) == 1
    assert first["twice"]["registers"] > 0

    def again(*args):
        raise AssertionError("again")

    compile_, read = sass._compile, sass._read
    monkeypatch.setattr(sass, "_compile", again)
    monkeypatch.setattr(sass, "_read", again)
    assert sass.inspect(source, "twice.cu", launch.NVRTC_OPTIONS) == first
    with pytest.raises(AssertionError, match="again"):
        sass.inspect(source.replace("2.0f", "3.0f"), "twice.cu", launch.NVRTC_OPTIONS)
    with pytest.raises(AssertionError, match="again"):
        sass.inspect(source, "twice.cu", (*launch.NVRTC_OPTIONS, "-DUNUSED=1"))
    monkeypatch.setattr(sass, "_compile", compile_)
    built = sass.build(source.replace("2.0f", "3.0f"), "twice.cu", (*launch.NVRTC_OPTIONS, "-arch=sm_90"))
    assert "Used" in built["log"] and ".entry twice" in built["ptx"]
    monkeypatch.setattr(sass, "_compile", again)
    monkeypatch.setattr(sass, "_read", read)
    assert sass.inspect(source.replace("2.0f", "3.0f"), "twice.cu", launch.NVRTC_OPTIONS)["twice"]["sass"]
    assert len(list(tmp_path.glob("*.json"))) == 4 and not list(tmp_path.glob("*.tmp"))
