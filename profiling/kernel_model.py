"""A model of every kernel in ``kernels/`` on an H200, from its compiled sm_90 code and its launch shape.

For each kernel at a shape (a square layer of width N, a batch of B, float32) the model compiles the
module the launchers build for that shape (NVRTC, ``-arch=sm_90``, CuPy's own options) and reads the
cubin with ``cuobjdump``: registers and static shared memory (``-res-usage``), and the SASS
instructions (``-sass``): global loads by width (``LDG.E`` 32-bit, ``.64``, ``.128``) and the shared
loads issued per FMA. With the launch shape of ``leapfrog_gpu/backends/launch.py`` that gives the
occupancy, then four times, each a lower bound on the kernel's duration:

  memory    the compulsory bytes (``leapfrog_gpu/tools/bench/traffic.py``) at ``BANDWIDTH``;
  latency   dependent round trips to memory per thread x their latency x (threads / resident threads,
            at least 1): a thread that must see a load's value before it issues the next one (a loop
            with no prefetch, a tile staged behind a barrier) pays the latency once per round, however
            little each round moves. A round that streams an (n, m) matrix (w, nabla_w) pays
            ``HBM_LATENCY``; one that reads only (n, B) or (n,) arrays pays ``L2_LATENCY``, since the
            kernel before it has just written them (at N = 4096, B = 32 they are 512 KB);
  FMA       the multiply-adds at the SMs' peak rate;
  shared    the shared-memory load cycles (one cycle per 128 bytes a warp loads, per SM).

The prediction is the largest; its name is the kernel's bound, and ``predicted_fraction`` is the
ideal time over the prediction, the ideal being the largest of the memory and FMA times and one round
trip to L2 (no kernel that reads memory can take less): 1 means the kernel runs at the bandwidth, at
the FMA peak, or in a single round trip; 0.2 that it takes five times as long. Assumptions, all stated here:
every access is coalesced, the compulsory bytes move at HBM bandwidth (an N = 1024 layer would partly
hit the 50 MB L2), a round's loads are all in flight together, blocks overlap (no tail effect), the rounds of
each kernel are counted from its loops in ``kernels/*.cu`` (``ROUNDS`` below, with the unroll factor
each source asks for), and launch overhead is left out of kernel times (the step adds ``NODE`` per
kernel on the main stream's path). Not timed: re-reads served by L2 (the staged chain GEMM re-reads
a_prev's 32 columns once per block of 8 rows, 16 MB from L2 at N = 1024, B = 32, about 2-3 us if L2
delivers 5-7 TB/s: the first thing a measurement should check), warp shuffles, and the tail of a grid
whose blocks differ (the blocks of rank_update_bias's first column also sum nabla_b). SASS counts are
static: an instruction outside the hot loop counts as one inside it, which is why the once-a-thread
loops of rank_update_bias are left rolled.

``python profiling/kernel_model.py`` prints the table; ``--json FILE`` writes one record per kernel and
shape; ``--readme`` prints kernels/README.md (the floors of ``traffic.py`` and this table).
"""

import argparse
import json
import math
import re
import subprocess
import shutil
import sys
import tempfile
import textwrap
from functools import lru_cache
from pathlib import Path

from cuda.bindings import nvrtc

from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source
from leapfrog_gpu.tools.bench import traffic

SMS = 132
BANDWIDTH = 4.3e12  # bytes/s HBM3e that a streaming kernel reaches (4.8 TB/s is the data sheet's peak)
CLOCK = 1.98e9  # Hz, boost clock
FMA_PER_CLOCK = {4: 128, 8: 64}  # per SM: float32, float64 lanes
SHARED_BYTES_PER_CLOCK = 128  # per SM: one 32-lane 32-bit load a cycle, no bank conflicts
REGISTERS = 65536  # per SM
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256
SHARED = 228 * 1024  # bytes per SM, of which the runtime keeps 1 KB per resident block
THREADS, BLOCKS = 2048, 32  # resident per SM
HBM_LATENCY = 0.6e-6  # s, a load that misses L2, under load
L2_LATENCY = 0.15e-6  # s, a load that hits L2
NODE = 1.0e-6  # s, what a kernel node on a graph's critical path adds to its kernel time
SHAPES = ((1024, 1), (1024, 32), (4096, 1))
HEADLINE = dict(N=1024, L=32, B=32)


def _module(kernel, n, batch):
    """(file, -D options, grid, block) of the launch of ``kernel`` for an (n, n) layer and a batch."""
    if kernel in ("forward_gemv", "forward_gemm", "backward_gemv", "backward_gemm"):
        grid, block, defines = launch.chain_launch(kernel.split("_")[0], n, batch, 4)
        return "chain.cu", defines, grid, block
    if kernel in ("outer", "outer_sgd", "outer_bias"):
        return ("nabla_w.cu", *_order(launch.outer_launch(n, n)))
    if kernel in ("rank_update", "rank_update_sgd", "rank_update_bias"):
        return ("nabla_w.cu", *_order(launch.rank_update_launch(n, n)))
    if kernel == "bias_sum":
        return ("nabla_b.cu", *_order(launch.bias_launch(n)))
    if kernel == "check_finite":
        return ("elementwise.cu", *_order(launch.check_finite_launch(n * n)))
    size = {"sgd_update": n * n, "sgd_update_layer": n * n + n}.get(kernel, n * batch)
    return ("elementwise.cu", *_order(launch.elementwise_launch(size)))


def _order(shape):
    grid, block, defines = shape
    return defines, grid, block


def _rounds(kernel, n, batch, threads):
    """Dependent round trips to memory each thread makes, counted from the kernel's loops:
    ``(rounds that stream a matrix from HBM, rounds that read vectors from L2)``."""
    m = n
    if kernel == "forward_gemv":  # a warp per row, FORWARD_GEMV_UNROLL float4 loads a lane a round; then b
        return math.ceil(m / (32 * 4 * launch.FORWARD_GEMV_UNROLL)), 1
    if kernel == "backward_gemv":  # threads / (cols / 4) share the rows, BACKWARD_GEMV_UNROLL each a round; sp
        cols, block = launch.BACKWARD_GEMV_BLOCK
        return math.ceil(m / (block // (cols // 4) * launch.BACKWARD_GEMV_UNROLL)), 1
    if kernel in ("forward_gemm", "backward_gemm"):  # a stage: its slab of w, then GEMM_UNROLL x-vectors a round
        stages = math.ceil(m / launch.GEMM_STAGE)  # then b / sp
        return stages, stages * math.ceil(launch.GEMM_STAGE / (32 * launch.GEMM_UNROLL)) + 1
    if kernel in ("rank_update", "rank_update_sgd", "rank_update_bias"):  # a staged chunk per RANK_CHUNK of B;
        return int(kernel == "rank_update_sgd"), math.ceil(batch / launch.RANK_CHUNK)  # the SGD reads w after
    if kernel in ("outer", "outer_bias"):  # delta[i] and a[j] at once; the store needs no answer
        return 0, 1
    if kernel == "outer_sgd":  # delta[i], a[j] and w at once
        return 1, 0
    if kernel == "bias_sum":  # a warp per row, BIAS_UNROLL loads a lane a round
        return 0, math.ceil(batch / (32 * launch.BIAS_UNROLL))
    if kernel == "check_finite":  # a grid-stride loop over n*m, a float4 a round
        return math.ceil(n * m / (4 * threads)), 0
    if kernel == "sgd_update":  # a grid-stride loop over n*m: a round per element visited
        return math.ceil(n * m / threads), 0
    if kernel == "sgd_update_layer":  # the same over n*m + n
        return math.ceil((n * m + n) / threads), 0
    return 0, math.ceil(n * batch / threads)


def _fmas(kernel, n, batch):
    if kernel in ("forward_gemv", "forward_gemm", "backward_gemv", "backward_gemm", "rank_update",
                  "rank_update_sgd", "rank_update_bias"):
        return n * n * batch
    if kernel in ("outer", "outer_sgd", "outer_bias", "sgd_update", "sgd_update_layer"):
        return n * n
    return 0


@lru_cache(maxsize=None)
def compiled(filename, defines):
    """``inspect`` of ``kernels/<filename>`` built as the launchers build it with ``defines``."""
    return inspect(kernel_source(filename), filename, (*launch.compile_options(defines), *launch.CUPY_OPTIONS))


def inspect(source, filename, options):
    """``{function: {"registers", "shared", "sass": {opcode: count}}}`` of ``source`` built for sm_90."""
    options = [*options, "-arch=sm_90"]
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), [option.encode() for option in options])
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC could not compile {filename} {' '.join(options)}: {status!r}")
        _, size = nvrtc.nvrtcGetCUBINSize(program)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(program, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "module.cubin"
        path.write_bytes(cubin)
        usage = _cuobjdump("-res-usage", path)
        sass = _cuobjdump("-sass", path)
    functions = {}
    for name, registers, shared in re.findall(r"Function (\w+):\s*REG:(\d+) STACK:\d+ SHARED:(\d+)", usage):
        functions[name] = {"registers": int(registers), "shared": int(shared), "sass": {}}
    for name, body in re.findall(r"Function : (\w+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S):
        counts = functions[name]["sass"]
        for opcode in re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", body):
            counts[opcode] = counts.get(opcode, 0) + 1
    return functions


def _cuobjdump(flag, path):
    tool = cuobjdump()
    done = subprocess.run([tool, flag, str(path)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{tool} {flag} failed: {done.stderr.strip()}")
    return done.stdout


def cuobjdump():
    """The ``cuobjdump`` of the test extras' ``nvidia-cuda-cuobjdump`` wheel, else the one on PATH."""
    try:
        import nvidia
        for root in map(Path, nvidia.__path__):
            for candidate in sorted(root.glob("cu*/bin/cuobjdump")):
                return str(candidate)
    except ImportError:
        pass
    found = shutil.which("cuobjdump")
    if found is None:
        raise FileNotFoundError("cuobjdump not found: pip install 'leapfrog_gpu[test]' (nvidia-cuda-cuobjdump)")
    return found


def _count(sass, pattern):
    return sum(count for opcode, count in sass.items() if re.fullmatch(pattern, opcode))


def occupancy(registers, shared, threads_per_block):
    """Blocks of a kernel resident on one SM, and what limits them."""
    warps = math.ceil(threads_per_block / 32)
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    limits = {
        "registers": REGISTERS // (per_warp * warps),
        "shared": SHARED // (shared + 1024),
        "threads": THREADS // threads_per_block,
        "blocks": BLOCKS,
    }
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


def model(kernel, n, batch, itemsize=4):
    """The record of ``kernel`` for an (n, n) layer and a batch of ``batch`` (see the module docstring)."""
    filename, defines, grid, block = _module(kernel, n, batch)
    suffix = {4: "f32", 8: "f64"}[itemsize]
    function = compiled(filename, tuple(defines))[f"{kernel}_{suffix}"]
    sass = function["sass"]
    threads_per_block = block[0] * block[1] * block[2]
    blocks = grid[0] * grid[1] * grid[2]
    resident, limiter = occupancy(function["registers"], function["shared"], threads_per_block)
    waves = math.ceil(blocks / (SMS * resident))
    threads = blocks * threads_per_block
    fmas = _fmas(kernel, n, batch)
    bytes_moved = traffic.kernel_bytes(kernel, n, n, batch, itemsize)
    ffma = _count(sass, r"[FD]FMA(\..*)?")
    shared_cycles = sum(count * {"": 1, ".64": 2, ".128": 4}[re.sub(r"^LDS(\.U)?", "", op) or ""]
                        for op, count in sass.items() if re.fullmatch(r"LDS(\.U)?(\.64|\.128)?", op))
    from_shared = kernel in ("forward_gemm", "backward_gemm", "rank_update", "rank_update_sgd", "rank_update_bias")
    cycles_per_fma = shared_cycles / ffma if from_shared and ffma else 0.0
    hbm, l2 = _rounds(kernel, n, batch, threads)
    concurrency = max(1.0, threads / (SMS * resident * threads_per_block))
    times = {
        "memory": bytes_moved / BANDWIDTH,
        "latency": concurrency * (hbm * HBM_LATENCY + l2 * L2_LATENCY),
        "FMA": fmas / (SMS * FMA_PER_CLOCK[itemsize] * CLOCK),
        "shared memory": fmas / 32 * cycles_per_fma / (SMS * CLOCK),
    }
    bound = max(times, key=times.get)
    predicted = times[bound]
    return {
        "kernel": kernel, "N": n, "B": batch, "dtype": {4: "float32", 8: "float64"}[itemsize],
        "grid": list(grid), "block": list(block), "registers": function["registers"],
        "shared_bytes": function["shared"], "blocks_per_sm": resident, "occupancy_limit": limiter,
        "occupancy": resident * math.ceil(threads_per_block / 32) / (THREADS // 32), "waves": waves,
        "rounds_hbm": hbm, "rounds_l2": l2, "bytes": bytes_moved, "fmas": fmas,
        "ldg_32": _count(sass, r"LDG\.E(\.U8|\.S8|\.U16|\.S16)?(\.CONSTANT)?"),
        "ldg_64": _count(sass, r"LDG\.E\.64(\.CONSTANT)?"), "ldg_128": _count(sass, r"LDG\.E\.128(\.CONSTANT)?"),
        "shared_cycles_per_fma": round(cycles_per_fma, 3),
        **{f"{name.split()[0].lower()}_us": seconds * 1e6 for name, seconds in times.items()},
        "bound": bound, "predicted_us": predicted * 1e6,
        "predicted_fraction": max(times["memory"], times["FMA"], L2_LATENCY) / predicted,
    }


def records(shapes=SHAPES):
    """Every kernel at every shape it runs at (B = 1 kernels at B = 1, their twins above)."""
    out = []
    for n, batch in shapes:
        for kernel in traffic.KERNELS:
            if (kernel in traffic.B_ONE and batch != 1) or (kernel in traffic.B_MANY and batch == 1):
                continue
            out.append(model(kernel, n, batch))
    return out


def step(rows, N=HEADLINE["N"], L=HEADLINE["L"], B=HEADLINE["B"]):
    """The predicted GPU time of one graph step of Leapfrog(k) (unfused) and of Sequential(), and the
    bytes floor: N-wide, L layers, batch B, float32, every layer square.

    Sequential: every kernel on one stream, in order, each adding ``NODE``. Leapfrog: the chain
    (forward, delta) on the main stream; the gradients of layer l (one kernel, (6) in the (7) kernel) run
    on a worker beside the chain below it, so they cost time only past the chain's remaining length, and
    the updates (one kernel for w and b) follow the join.
    """
    t = {(r["kernel"]): r["predicted_us"] * 1e-6 + NODE for r in rows if r["N"] == N and r["B"] == B}
    many = B > 1
    forward, backward = t["forward_gemm" if many else "forward_gemv"], t["backward_gemm" if many else "backward_gemv"]
    gradients = t["rank_update_bias" if many else "outer_bias"]
    update = t["sgd_update_layer"]
    layers = L - 1
    chain = layers * forward + t["delta_output"] + (layers - 1) * backward
    sequential = chain + layers * (gradients + update)
    leapfrog = chain + gradients + layers * update  # the last layer's gradients pass the chain's end
    floor = traffic.step_bytes([N] * L, B, 4) / BANDWIDTH
    return {"N": N, "L": L, "B": B, "sequential_us": sequential * 1e6, "leapfrog_us": leapfrog * 1e6,
            "bytes_floor_us": floor * 1e6, "leapfrog_over_floor": leapfrog / floor}


def table(rows):
    """Markdown table of ``rows``."""
    lines = ["| kernel | N | B | regs | smem | blocks/SM | waves | rounds HBM+L2 | LDG 32/64/128 | smem cyc/FMA "
             "| memory us | latency us | bound | predicted us | fraction |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['N']} | {r['B']} | {r['registers']} | {r['shared_bytes']} | "
            f"{r['blocks_per_sm']} ({r['occupancy_limit']}) | {r['waves']} | {r['rounds_hbm']}+{r['rounds_l2']} | "
            f"{r['ldg_32']}/{r['ldg_64']}/{r['ldg_128']} | {r['shared_cycles_per_fma']:g} | "
            f"{r['memory_us']:.3g} | {r['latency_us']:.3g} | {r['bound']} | {r['predicted_us']:.3g} | "
            f"{r['predicted_fraction']:.2f} |")
    return "\n".join(lines)


def nvrtc_version():
    """``"major.minor"`` of the NVRTC that compiles the kernels: the model's numbers depend on it."""
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def readme(rows=None):
    """kernels/README.md: the floors of ``traffic.readme()``, then this model's table and the step."""
    rows = records() if rows is None else rows
    steps = [step(rows, B=batch) for batch in (1, 32)]
    about = (
        "From the sm_90 code NVRTC compiles and `cuobjdump` reads, with each kernel's launch shape: the "
        "occupancy, and four lower bounds on its time (the bytes at the bandwidth, the dependent round "
        "trips to memory at their latency, the FMAs, the shared-memory loads); the largest is the bound. "
        "Fraction: the ideal time (memory, FMA, or one round trip to L2) over the prediction. Assumptions are in "
        f"`profiling/kernel_model.py`: {BANDWIDTH / 1e12:.1f} TB/s, {HBM_LATENCY * 1e6:.2f} us a round "
        f"from HBM, {L2_LATENCY * 1e6:.2f} us from L2, {CLOCK / 1e9:.2f} GHz, {SMS} SMs. Compiled with "
        f"NVRTC {nvrtc_version()}. Not yet checked against a measurement on the device."
    )
    text = [traffic.readme(), "## Model on an H200 (float32)", "", textwrap.fill(about, 100), "",
            table(rows), "", textwrap.fill(
                "Graph step, N = 1024, L = 32, float32, unfused (gradients and updates one kernel a layer each): "
                "the kernels above plus "
                f"{NODE * 1e6:.0f} us a node, and the bytes floor (`traffic.step_bytes`) at the same bandwidth:",
                100), "",
            "| B | Sequential() us | Leapfrog(k) us | bytes floor us | Leapfrog over floor |",
            "|---:|---:|---:|---:|---:|"]
    for s in steps:
        text.append(f"| {s['B']} | {s['sequential_us']:.0f} | {s['leapfrog_us']:.0f} | "
                    f"{s['bytes_floor_us']:.0f} | {s['leapfrog_over_floor']:.1f}x |")
    return "\n".join(text) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write one JSON record per kernel and shape to FILE")
    parser.add_argument("--readme", action="store_true", help="print kernels/README.md")
    args = parser.parse_args(argv)
    rows = records()
    if args.json:
        Path(args.json).write_text(json.dumps({"kernels": rows, "steps": [step(rows, B=b) for b in (1, 32)]},
                                              indent=1) + "\n")
    print(readme(rows) if args.readme else table(rows), end="" if args.readme else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
