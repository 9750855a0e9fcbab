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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "profiling"))
import card  # noqa: E402
import kernel_traffic as traffic  # noqa: E402
import kernel_model  # noqa: E402

FIELDS = {"kernel", "N", "B", "bound", "predicted_us", "predicted_fraction"}


@pytest.fixture(scope="module")
def tables():
    return {c: kernel_model.records(card=c) for c in (card.H100, card.H200)}


@pytest.fixture(scope="module")
def rows(tables):
    return tables[card.H200]


def _row(rows, kernel, n, batch):
    (r,) = [r for r in rows if (r["kernel"], r["N"], r["B"]) == (kernel, n, batch)]
    return r


def test_kernels_readme_is_current(tables):
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
    assert readme == kernel_model.readme(tables), fix
    assert "## Model on an H100 SXM (float32)" in readme and "## Model on an H200 (float32)" in readme


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
                 "shared memory": r["shared_us"], "load + compute": r["load_us"]}
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
    round trip to HBM, then reads a_prev in rounds of GEMM_UNROLL vectors a thread from L2, then b; the
    tiled GEMM it replaced made 64 trips in a row."""
    gemm = _row(rows, "forward_gemm", 1024, 32)
    assert gemm["rounds_hbm"] == 1 and gemm["rounds_l2"] == 1024 // (32 * launch.GEMM_UNROLL) + 1
    assert gemm["latency_us"] == pytest.approx(0.6 + gemm["rounds_l2"] * 0.15)
    assert gemm["ldg_128"] > 0


@pytest.mark.parametrize("name, bandwidth", [("H100", 0.9 * 3.35e12), ("H200", 4.3e12)])
def test_a_one_stage_gemm_with_one_block_an_sm_loads_then_computes(tables, name, bandwidth):
    """128 blocks of 8 rows (N = 1024) on 132 SMs: one block of 8 warps an SM, which stages its slab of w
    and only then computes on it, at 8 of the 12 warps full issue needs. Its time is the sum of the two."""
    gemm = _row(tables[card.CARDS[name]], "forward_gemm", 1024, 32)
    assert (math.prod(gemm["grid"]), math.prod(gemm["block"])) == (128, 256)
    cycles = 128 * 1.98e9 * 8 / 12  # issuing SM cycles a second
    load = max(traffic.kernel_bytes("forward_gemm", 1024, 1024, 32, 4) / bandwidth, 0.6e-6)
    compute = max(1024 * 1024 * 32 / (128 * cycles), 1024 * 1024 * 32 / 32 * gemm["shared_cycles_per_fma"] / cycles,
                  gemm["rounds_l2"] * 0.15e-6)
    assert gemm["bound"] == "load + compute"
    assert gemm["predicted_us"] == pytest.approx((load + compute) * 1e6, rel=2e-3)
    assert 2.5 <= gemm["predicted_us"] <= 3.5  # and so slower than its bytes at the bandwidth, 1.1 us on an H200


def test_the_issue_rate_follows_the_warps_resident_on_an_sm(rows):
    """rank_update_bias at N = 1024, B = 32: its grid spread over 132 SMs leaves a few warps on each, which
    issue a third as often as the 12 an SM needs; its shared-memory time grows by that factor."""
    r = _row(rows, "rank_update_bias", 1024, 32)
    blocks, warps = math.prod(r["grid"]), math.prod(r["block"]) // 32
    on_an_sm = math.ceil(blocks / 132) * warps
    assert on_an_sm == 4 and r["issue"] == pytest.approx(on_an_sm / 12)
    full = 1024 * 1024 * 32 / 32 * r["shared_cycles_per_fma"] / (132 * 1.98e9)
    assert r["shared_us"] == pytest.approx(full * 12 / on_an_sm * 1e6, rel=2e-3)
    assert r["predicted_us"] > 3 * 1.3  # three times the 1.32 us a full issue rate would give


def test_the_step_counts_each_node_and_the_chain_s_contention(rows, monkeypatch):
    """L = 32: Sequential() runs 31 forward, 1 delta, 30 backward, 31 gradient and 31 update kernels (124
    nodes); Leapfrog(k) has 94 on its path (the chain's 62, the last gradients, the 31 updates), and its
    chain's kernels, beside the workers, take CONTENTION longer."""
    one, two = (kernel_model.step(rows, card.H200, node) for node in (1e-6, 2e-6))
    assert two["sequential_us"] - one["sequential_us"] == pytest.approx(124)
    assert two["leapfrog_us"] - one["leapfrog_us"] == pytest.approx(94)
    t = {r["kernel"]: r["predicted_us"] for r in rows if (r["N"], r["B"]) == (1024, 32)}
    chain = 31 * t["forward_gemm"] + t["delta_output"] + 30 * t["backward_gemm"]
    monkeypatch.setattr(kernel_model, "CONTENTION", 0.0)
    alone = kernel_model.step(rows, card.H200, 1e-6)
    assert one["leapfrog_us"] - alone["leapfrog_us"] == pytest.approx(0.1 * chain)
    assert one["sequential_us"] == alone["sequential_us"]


def test_a_card_from_the_device_s_properties():
    """An H100 SXM's properties as CuPy reports them: 2 x 2619 MHz x 5120 bits = 3.35 TB/s peak."""
    properties = {"name": b"NVIDIA H100 80GB HBM3", "multiProcessorCount": 132, "clockRate": 1980000,
                  "memoryClockRate": 2619000, "memoryBusWidth": 5120, "l2CacheSize": 52428800,
                  "sharedMemPerMultiprocessor": 233472, "maxThreadsPerMultiProcessor": 2048}
    got = card.from_device(properties)
    assert (got.name, got.sms, got.clock, got.l2, got.shared_per_sm, got.max_warps) == (
        "NVIDIA H100 80GB HBM3", 132, 1.98e9, 52428800, 233472, 64)
    assert got.bandwidth == pytest.approx(0.9 * 2 * 2619e6 * 640)
    assert card.from_device(properties, copy_bandwidth=3.0e12).bandwidth == 3.0e12


def test_the_clocks_a_cuda_13_device_s_properties_lack_are_asked_for_by_attribute():
    """CUDA 13's ``cudaDeviceProp`` has no ``clockRate`` or ``memoryClockRate``: they come from
    ``deviceGetAttribute`` (13 and 36, in kHz); the properties that are there are taken as they are."""
    class Runtime:
        asked = []

        @staticmethod
        def getDeviceProperties(device):
            return {"name": b"NVIDIA H100 80GB HBM3", "multiProcessorCount": 132, "memoryBusWidth": 5120}

        @staticmethod
        def deviceGetAttribute(attribute, device):
            Runtime.asked.append((attribute, device))
            return {13: 1980000, 36: 2619000}[attribute]

    got = card.device_properties(Runtime, 3)
    assert (got["clockRate"], got["memoryClockRate"], got["multiProcessorCount"]) == (1980000, 2619000, 132)
    assert sorted(Runtime.asked) == [(13, 3), (36, 3)]


def test_the_kernels_of_a_step_at_b_1_reach_seventy_percent_of_their_bound(rows):
    """The kernels' design target, by the model: at N = 1024, B = 1, each at 70 % of its bound or more.
    At B = 32 the GEMMs (load + compute) and the rank updates (4 warps an SM) fall short of it."""
    low = [(r["kernel"], r["B"], round(r["predicted_fraction"], 2)) for r in rows
           if r["N"] == 1024 and r["predicted_fraction"] < 0.7]
    assert {(kernel, batch) for kernel, batch, _ in low} == {
        ("forward_gemm", 32), ("backward_gemm", 32), ("rank_update", 32), ("rank_update_sgd", 32),
        ("rank_update_bias", 32)}, low


def test_the_device_s_card_takes_its_properties_the_copy_and_the_node_measured(standin, monkeypatch, tmp_path,
                                                                                capsys):
    """``--card device`` on the stand-in (an H200's properties): the bandwidth is the copy's, 2000 GB/s here,
    and the step charges the node cost measured, 0.7 us here, for each of Sequential()'s 124 nodes."""
    import graph_nodes
    from leapfrog_gpu.backends import timing

    monkeypatch.setattr(timing, "copy_bandwidth", lambda backend, **timed: {"median": 2000.0})
    cost = {"counts": [1, 2], "us": [3.7, 4.4], "node_us": 0.7, "launch_us": 3.0}
    monkeypatch.setattr(graph_nodes, "node_cost", lambda backend: cost)
    path = tmp_path / "model.json"
    assert kernel_model.main(["--card", "device", "--json", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["card: CPU stand-in (cuda_cpu harness), 132 SMs, 1.98 GHz, 2.00 TB/s, L2 50 MiB, 228 KiB "
                       "shared and 64 warps an SM", graph_nodes.line(cost)]
    written = json.loads(path.read_text())
    assert written["card"]["bandwidth"] == 2e12 and written["node_us"] == 0.7
    gemv = [r for r in written["kernels"] if (r["kernel"], r["N"]) == ("forward_gemv", 1024)][0]
    assert gemv["memory_us"] == pytest.approx(traffic.kernel_bytes("forward_gemv", 1024, 1024, 1, 4) / 2e12 * 1e6)
    (s32,) = [s for s in written["steps"] if s["B"] == 32]
    t = {r["kernel"]: r["predicted_us"] for r in written["kernels"] if (r["N"], r["B"]) == (1024, 32)}
    kernels = 31 * (t["forward_gemm"] + t["rank_update_bias"] + t["sgd_update_layer"]) + t["delta_output"] + \
        30 * t["backward_gemm"]
    assert s32["sequential_us"] == pytest.approx(kernels + 124 * 0.7)
