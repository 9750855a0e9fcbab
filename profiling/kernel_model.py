"""A model of every kernel in ``kernels/`` on a card (``profiling/card.py``: an H100 SXM, an H200, or the
GPU it runs on), from its compiled sm_90 code and its launch shape.

For each kernel at a shape (a square layer of width N, a batch of B, float32) the model compiles the
module the launchers build for that shape (NVRTC, ``-arch=sm_90``, CuPy's own options) and reads the
cubin with ``cuobjdump``: registers and static shared memory (``-res-usage``), and the SASS
instructions (``-sass``): global loads by width (``LDG.E`` 32-bit, ``.64``, ``.128``) and the shared
loads issued per FMA. With the launch shape of ``leapfrog_gpu/backends/launch.py`` that gives the
occupancy and the issue rate: the warps resident on a busy SM over ``FULL_ISSUE_WARPS``, at most 1 (the
instruction-level parallelism within a warp is not counted). Then five times, each a lower bound on the
kernel's duration:

  memory    the compulsory bytes (``kernel_traffic.py``) at the card's bandwidth;
  latency   dependent round trips to memory per thread x their latency x (threads / resident threads,
            at least 1): a thread that must see a load's value before it issues the next one (a loop
            with no prefetch, a tile staged behind a barrier) pays the latency once per round, however
            little each round moves. A round that streams an (n, m) matrix (w, nabla_w) pays
            ``HBM_LATENCY``; one that reads only (n, B) or (n,) arrays pays ``L2_LATENCY``, since the
            kernel before it has just written them (at N = 4096, B = 32 they are 512 KB);
  FMA       the multiply-adds at the busy SMs' peak rate times the issue rate;
  shared    the shared-memory load cycles (one cycle per 128 bytes a warp loads, per SM), likewise;
  load + compute   for a GEMM of ``STAGED`` with one stage and one block on each SM, which waits for
            its slab of w before it computes and has no other block to overlap: the load (memory, or
            one HBM round trip) plus the compute (FMA, shared, or its L2 rounds).

The prediction is the largest; its name is the kernel's bound, and ``predicted_fraction`` is the
ideal time over the prediction, the ideal being the largest of the memory and FMA times and one round
trip to L2 (no kernel that reads memory can take less): 1 means the kernel runs at the bandwidth, at
the FMA peak, or in a single round trip; 0.2 that it takes five times as long. Assumptions, all stated here:
every access is coalesced, the compulsory bytes move at HBM bandwidth (an N = 1024 layer would partly
hit the 50 MB L2), a round's loads are all in flight together, blocks overlap (no tail effect), the rounds of
each kernel are counted from its loops in ``kernels/*.cu`` (``ROUNDS`` below, with the unroll factor
each source asks for), and launch overhead is left out of kernel times (the step adds ``NODE`` per
kernel on the main stream's path, and charges Leapfrog's chain ``CONTENTION`` for the workers beside it). Not timed: re-reads served by L2 (the staged chain GEMM re-reads
a_prev's 32 columns once per block of 8 rows, 16 MB from L2 at N = 1024, B = 32, about 2-3 us if L2
delivers 5-7 TB/s: the first thing a measurement should check), warp shuffles, and the tail of a grid
whose blocks differ (the blocks of rank_update_bias's first column also sum nabla_b). SASS counts are
static: an instruction outside the hot loop counts as one inside it, which is why the once-a-thread
loops of rank_update_bias are left rolled.

``python profiling/kernel_model.py`` prints the table; ``--json FILE`` writes one record per kernel and
shape; ``--readme`` prints kernels/README.md (the floors of ``kernel_traffic.py`` and this table).
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
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from cuda.bindings import nvrtc

from leapfrog_gpu import get_backend
from leapfrog_gpu.backends import launch
from leapfrog_gpu.backends.sources import kernel_source
from leapfrog_gpu.tools.bench.traffic import step_bytes

import card as cards
import kernel_traffic as traffic
import graph_nodes
from card import CARDS, H100, H200

FMA_PER_CLOCK = {4: 128, 8: 64}  # per SM: float32, float64 lanes
SHARED_BYTES_PER_CLOCK = 128  # per SM: one 32-lane 32-bit load a cycle, no bank conflicts
REGISTERS = 65536  # per SM
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256
BLOCKS = 32  # resident per SM; shared memory per SM (less 1 KB per resident block) and warps are the card's
FULL_ISSUE_WARPS = 12  # resident warps an SM needs to issue an FMA or a shared load every cycle (3 a scheduler)
CONTENTION = 0.1  # a Leapfrog step's chain kernels run this much slower beside the workers' gradient kernels
STAGED = ("forward_gemm", "backward_gemm")  # each block loads its slab of w, then computes on it
HBM_LATENCY = 0.6e-6  # s, a load that misses L2, under load
L2_LATENCY = 0.15e-6  # s, a load that hits L2
NODE = 1.0e-6  # s, a kernel node's cost on a graph's path, until the device check's empty-kernel graph measures it
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
    if kernel in ("gru_forward", "gru_backward", "lstm_forward", "lstm_backward"):
        return ("gates.cu", *_order(launch.gates_launch(n, batch)))
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


def occupancy(registers, shared, threads_per_block, card=H200):
    """Blocks of a kernel resident on one SM of ``card``, and what limits them."""
    warps = math.ceil(threads_per_block / 32)
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    limits = {
        "registers": REGISTERS // (per_warp * warps),
        "shared": card.shared_per_sm // (shared + 1024),
        "threads": card.max_warps // warps,
        "blocks": BLOCKS,
    }
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


def model(kernel, n, batch, itemsize=4, card=H200):
    """The record of ``kernel`` for an (n, n) layer and a batch of ``batch`` on ``card`` (see the module
    docstring)."""
    filename, defines, grid, block = _module(kernel, n, batch)
    suffix = {4: "f32", 8: "f64"}[itemsize]
    function = compiled(filename, tuple(defines))[f"{kernel}_{suffix}"]
    sass = function["sass"]
    threads_per_block = block[0] * block[1] * block[2]
    warps_per_block = math.ceil(threads_per_block / 32)
    blocks = grid[0] * grid[1] * grid[2]
    resident, limiter = occupancy(function["registers"], function["shared"], threads_per_block, card)
    waves = math.ceil(blocks / (card.sms * resident))
    threads = blocks * threads_per_block
    per_sm = min(resident, math.ceil(blocks / card.sms))  # blocks at once on a busy SM
    issue = min(1.0, per_sm * warps_per_block / FULL_ISSUE_WARPS)
    busy = min(blocks, card.sms) * issue * card.clock  # SM cycles a second that issue
    fmas = _fmas(kernel, n, batch)
    bytes_moved = traffic.kernel_bytes(kernel, n, n, batch, itemsize)
    ffma = _count(sass, r"[FD]FMA(\..*)?")
    shared_cycles = sum(count * {"": 1, ".64": 2, ".128": 4}[re.sub(r"^LDS(\.U)?", "", op) or ""]
                        for op, count in sass.items() if re.fullmatch(r"LDS(\.U)?(\.64|\.128)?", op))
    from_shared = kernel in ("forward_gemm", "backward_gemm", "rank_update", "rank_update_sgd", "rank_update_bias")
    cycles_per_fma = shared_cycles / ffma if from_shared and ffma else 0.0
    hbm, l2 = _rounds(kernel, n, batch, threads)
    concurrency = max(1.0, threads / (card.sms * resident * threads_per_block))
    times = {
        "memory": bytes_moved / card.bandwidth,
        "latency": concurrency * (hbm * HBM_LATENCY + l2 * L2_LATENCY),
        "FMA": fmas / (FMA_PER_CLOCK[itemsize] * busy),
        "shared memory": fmas / 32 * cycles_per_fma / busy,
    }
    serial = kernel in STAGED and hbm == 1 and per_sm == 1  # one stage, one block an SM: nothing overlaps
    times["load + compute"] = serial * (max(times["memory"], HBM_LATENCY)
                                        + max(times["FMA"], times["shared memory"], l2 * L2_LATENCY))
    bound = max(times, key=times.get)
    predicted = times[bound]
    return {
        "kernel": kernel, "N": n, "B": batch, "dtype": {4: "float32", 8: "float64"}[itemsize], "card": card.name,
        "grid": list(grid), "block": list(block), "registers": function["registers"],
        "shared_bytes": function["shared"], "blocks_per_sm": resident, "occupancy_limit": limiter,
        "occupancy": resident * warps_per_block / card.max_warps, "waves": waves, "issue": issue,
        "rounds_hbm": hbm, "rounds_l2": l2, "bytes": bytes_moved, "fmas": fmas,
        "ldg_32": _count(sass, r"LDG\.E(\.U8|\.S8|\.U16|\.S16)?(\.CONSTANT)?"),
        "ldg_64": _count(sass, r"LDG\.E\.64(\.CONSTANT)?"), "ldg_128": _count(sass, r"LDG\.E\.128(\.CONSTANT)?"),
        "shared_cycles_per_fma": round(cycles_per_fma, 3),
        **{f"{name.split()[0].lower()}_us": seconds * 1e6 for name, seconds in times.items()},
        "bound": bound, "predicted_us": predicted * 1e6,
        "predicted_fraction": max(times["memory"], times["FMA"] * issue, L2_LATENCY) / predicted,
    }


def records(shapes=SHAPES, card=H200):
    """Every kernel at every shape it runs at on ``card`` (B = 1 kernels at B = 1, their twins above)."""
    out = []
    for n, batch in shapes:
        for kernel in traffic.KERNELS:
            if (kernel in traffic.B_ONE and batch != 1) or (kernel in traffic.B_MANY and batch == 1):
                continue
            out.append(model(kernel, n, batch, card=card))
    return out


def step(rows, card=H200, node=NODE, N=HEADLINE["N"], L=HEADLINE["L"], B=HEADLINE["B"]):
    """The predicted GPU time of one graph step of Leapfrog(k) (unfused) and of Sequential(), and the
    bytes floor: N-wide, L layers, batch B, float32, every layer square.

    Sequential: every kernel on one stream, in order, each adding ``node`` seconds. Leapfrog: the chain
    (forward, delta) on the main stream, each of its kernels ``CONTENTION`` slower; the gradients of layer
    l (one kernel, (6) in the (7) kernel) run on a worker beside the chain below it, so they cost time only
    past the chain's remaining length, and the updates (one kernel for w and b) follow the join.
    """
    t = {(r["kernel"]): r["predicted_us"] * 1e-6 for r in rows if r["N"] == N and r["B"] == B}
    many = B > 1
    forward, backward = t["forward_gemm" if many else "forward_gemv"], t["backward_gemm" if many else "backward_gemv"]
    gradients = t["rank_update_bias" if many else "outer_bias"] + node
    update = t["sgd_update_layer"] + node
    layers = L - 1
    kernels = layers * forward + t["delta_output"] + (layers - 1) * backward
    nodes = (2 * layers) * node
    sequential = kernels + nodes + layers * (gradients + update)
    leapfrog = (1 + CONTENTION) * kernels + nodes + gradients + layers * update  # the last gradients: past the end
    floor = step_bytes([N] * L, B, 4) / card.bandwidth
    return {"N": N, "L": L, "B": B, "sequential_us": sequential * 1e6, "leapfrog_us": leapfrog * 1e6,
            "bytes_floor_us": floor * 1e6, "leapfrog_over_floor": leapfrog / floor}


def table(rows):
    """Markdown table of ``rows``."""
    lines = ["| kernel | N | B | regs | smem | blocks/SM | waves | issue | rounds HBM+L2 | LDG 32/64/128 | smem cyc/FMA "
             "| memory us | latency us | bound | predicted us | fraction |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['N']} | {r['B']} | {r['registers']} | {r['shared_bytes']} | "
            f"{r['blocks_per_sm']} ({r['occupancy_limit']}) | {r['waves']} | {r['issue']:.2f} | {r['rounds_hbm']}+{r['rounds_l2']} | "
            f"{r['ldg_32']}/{r['ldg_64']}/{r['ldg_128']} | {r['shared_cycles_per_fma']:g} | "
            f"{r['memory_us']:.3g} | {r['latency_us']:.3g} | {r['bound']} | {r['predicted_us']:.3g} | "
            f"{r['predicted_fraction']:.2f} |")
    return "\n".join(lines)


def nvrtc_version():
    """``"major.minor"`` of the NVRTC that compiles the kernels: the model's numbers depend on it."""
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def readme(tables=None):
    """kernels/README.md: the floors of ``traffic.readme()``, then for each listed card this model's table
    and the step (``tables``: ``{card: records}``, computed where None)."""
    tables = {card: records(card=card) for card in (H100, H200)} if tables is None else tables
    text = [traffic.readme()]
    for card, rows in tables.items():
        text += [f"## Model on an {card.name} (float32)", "", textwrap.fill(
            "From the sm_90 code NVRTC compiles and `cuobjdump` reads, with each kernel's launch shape: the "
            "occupancy, the issue rate (resident warps over the "
            f"{FULL_ISSUE_WARPS} an SM needs), and five lower bounds on its time (the bytes at the bandwidth, "
            "the dependent round trips to memory at their latency, the FMAs, the shared-memory loads, and "
            "for a one-stage GEMM with one block an SM its load plus its compute); the largest is the bound. "
            "Fraction: the ideal time (memory, FMA, or one round trip to L2) over the prediction. Assumptions "
            f"are in `profiling/kernel_model.py`: {card.bandwidth / 1e12:.2f} TB/s, {HBM_LATENCY * 1e6:.2f} us a "
            f"round from HBM, {L2_LATENCY * 1e6:.2f} us from L2, {card.clock / 1e9:.2f} GHz, {card.sms} SMs. "
            f"Compiled with NVRTC {nvrtc_version()}. Not yet checked against a measurement on the device.", 100),
            "", table(rows), "", textwrap.fill(
                "Graph step, N = 1024, L = 32, float32, unfused (gradients and updates one kernel a layer each): "
                f"the kernels above plus {NODE * 1e6:.0f} us a node (not yet measured), the chain "
                f"{CONTENTION:.0%} slower beside the workers in Leapfrog(k), and the bytes floor "
                "(`traffic.step_bytes`) at the same bandwidth:", 100), "",
            "| B | Sequential() us | Leapfrog(k) us | bytes floor us | Leapfrog over floor |",
            "|---:|---:|---:|---:|---:|"]
        for s in (step(rows, card, B=batch) for batch in (1, 32)):
            text.append(f"| {s['B']} | {s['sequential_us']:.0f} | {s['leapfrog_us']:.0f} | "
                        f"{s['bytes_floor_us']:.0f} | {s['leapfrog_over_floor']:.1f}x |")
        text.append("")
    return "\n".join(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="write one JSON record per kernel and shape to FILE")
    parser.add_argument("--readme", action="store_true", help="print kernels/README.md (the H100 and H200)")
    parser.add_argument("--card", choices=(*CARDS, "device"), default="H200",
                        help="the card of the table and the JSON; device: this machine's GPU, with its copy "
                             "bandwidth and a graph node's cost measured now")
    args = parser.parse_args(argv)
    card, node = CARDS.get(args.card), NODE
    if card is None:
        with get_backend("cupy") as backend:
            card, cost = cards.lent_card(backend), graph_nodes.node_cost(backend)
        node = cost["node_us"] * 1e-6
        print(cards.line(card), graph_nodes.line(cost), sep="\n", flush=True)
    rows = records(card=card)
    if args.json:
        steps = [step(rows, card, node, B=b) for b in (1, 32)]
        Path(args.json).write_text(json.dumps({"card": asdict(card), "node_us": node * 1e6, "kernels": rows,
                                               "steps": steps}, indent=1) + "\n")
    print(readme() if args.readme else table(rows), end="" if args.readme else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
