"""profiling/kernel_model.py: what it reads from the compiled sm_90 code, and the table it writes.

NVRTC and cuobjdump come with the test extras, so this runs without a GPU."""

import json
import math
import re
import sys
from pathlib import Path

import pytest
from cuda.bindings import nvrtc

from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source
from leapfrog_gpu.tools.bench import traffic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "profiling"))
import kernel_model  # noqa: E402

FIELDS = {"kernel", "N", "B", "bound", "predicted_us", "predicted_fraction"}


@pytest.fixture(scope="module")
def rows():
    return kernel_model.records()


def test_kernels_readme_is_current(rows):
    """kernels/README.md is the model's output, not typed by hand. Registers and instruction counts come
    from the compiler, so the model's table is compared only under the NVRTC that wrote it; the floors
    above it always are."""
    readme = (ROOT / "kernels" / "README.md").read_text()
    fix = "run: python profiling/kernel_model.py --readme > kernels/README.md"
    assert readme.startswith(traffic.readme()), fix
    written = re.search(r"Compiled with NVRTC (\d+\.\d+)\.", readme)
    assert written, fix
    if written.group(1) != kernel_model.nvrtc_version():
        pytest.skip(f"kernels/README.md was made with NVRTC {written.group(1)}, this is "
                    f"{kernel_model.nvrtc_version()}: {fix}")
    assert readme == kernel_model.readme(rows), fix


def test_every_kernel_at_every_shape_it_runs_at(rows):
    expected = {(kernel, n, b) for n, b in kernel_model.SHAPES for kernel in traffic.KERNELS
                if not (kernel in traffic.B_ONE and b != 1) and not (kernel in traffic.B_MANY and b == 1)}
    assert {(r["kernel"], r["N"], r["B"]) for r in rows} == expected
    assert {(1024, 1), (1024, 32), (4096, 1)} <= set(kernel_model.SHAPES)


def test_json_records_name_the_bound_and_the_fraction(tmp_path, capsys):
    path = tmp_path / "model.json"
    assert kernel_model.main(["--json", str(path)]) == 0
    written = json.loads(path.read_text())
    assert written["kernels"] and all(FIELDS <= set(r) for r in written["kernels"])
    for r in written["kernels"]:
        times = {"memory": r["memory_us"], "latency": r["latency_us"], "FMA": r["fma_us"],
                 "shared memory": r["shared_us"]}
        assert r["predicted_us"] == max(times.values()) and times[r["bound"]] == r["predicted_us"], r
        assert 0 < r["predicted_fraction"] <= 1, r
        assert r["memory_us"] == pytest.approx(traffic.kernel_bytes(r["kernel"], r["N"], r["N"], r["B"], 4)
                                               / 4.3e12 * 1e6), r
    assert {s["B"] for s in written["steps"]} == {1, 32}
    assert all(s["leapfrog_us"] <= s["sequential_us"] and s["bytes_floor_us"] > 0 for s in written["steps"])
    assert "| forward_gemm | 1024 | 32 |" in capsys.readouterr().out


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
    ("nabla_w.cu", launch.rank_update_launch(1024, 1024)[2]),
    ("elementwise.cu", launch.elementwise_launch(1)[2]),
])
def test_registers_are_those_ptxas_reports(filename, defines):
    options = (*launch.compile_options(defines), *launch.CUPY_OPTIONS)
    expected = _ptxas_registers(kernel_source(filename), filename, options)
    got = {name: f["registers"] for name, f in kernel_model.compiled(filename, tuple(defines)).items()}
    assert expected and got == expected


def test_sass_counts_tell_128_bit_loads_from_32_bit_ones():
    source = ('extern "C" __global__ void wide_f32(float4* out, const float4* x, const float* y) {\n'
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    float4 v = x[i];\n"
              "    float s = y[i];\n"
              "    out[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);\n"
              "}\n")
    sass = kernel_model.inspect(source, "wide.cu", launch.NVRTC_OPTIONS)["wide_f32"]["sass"]
    assert kernel_model._count(sass, r"LDG\.E\.128(\.CONSTANT)?") == 1, sass
    assert kernel_model._count(sass, r"LDG\.E(\.CONSTANT)?") == 1, sass
    assert kernel_model._count(sass, r"STG\.E\.128") == 1, sass


def test_occupancy_follows_the_sm_90_limits():
    """The CUDA occupancy rules, worked by hand: 32 registers x 1024 threads = 32768 of 65536 registers;
    64 registers x 256 threads = 16384 (4 blocks); 48 KB of shared memory and 1 KB reserved: 4 blocks."""
    assert kernel_model.occupancy(32, 0, 1024) == (2, "registers")
    assert kernel_model.occupancy(64, 0, 256) == (4, "registers")
    assert kernel_model.occupancy(16, 48 * 1024, 128) == (4, "shared")
    assert kernel_model.occupancy(16, 0, 32) == (32, "blocks")
    assert kernel_model.occupancy(16, 0, 256) == (8, "threads")


def test_the_staged_gemm_makes_one_trip_to_memory_per_stage(rows):
    """The GEMM of kernels/chain.cu at N = 1024, B = 32 stages its whole slab of w (1024 columns) in one
    round trip to HBM, then reads a_prev in rounds of GEMM_UNROLL vectors a thread from L2, then b: its
    latency stays under its bytes at the bandwidth; the tiled GEMM it replaced made 64 trips in a row."""
    (gemm,) = [r for r in rows if (r["kernel"], r["N"], r["B"]) == ("forward_gemm", 1024, 32)]
    assert gemm["rounds_hbm"] == 1 and gemm["rounds_l2"] == 1024 // (32 * launch.GEMM_UNROLL) + 1
    assert gemm["latency_us"] == pytest.approx(0.6 + gemm["rounds_l2"] * 0.15)
    assert gemm["bound"] == "memory" and gemm["ldg_128"] > 0


def test_every_kernel_of_a_graph_step_reaches_seventy_percent_of_its_bound(rows):
    """The kernels' design target, by the model: at N = 1024, B = 1 and 32, each at 70 % of its bound or more."""
    low = [(r["kernel"], r["B"], round(r["predicted_fraction"], 2)) for r in rows
           if r["N"] == 1024 and r["predicted_fraction"] < 0.7]
    assert not low, low
