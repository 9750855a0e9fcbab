"""A model of every kernel in ``kernels/`` on a card (``profiling/card.py``: an H100 SXM, an H200, or the
GPU it runs on), from its compiled sm_90 code and its launch shape.

For each kernel at a shape (a square layer of width N, a batch of B, float32) the model compiles the
module the launchers build for that shape and reads its code (``profiling/sass.py``): registers and static
shared memory, global loads by width, and the cycles of the L1/shared-memory data path (128 bytes a cycle:
shared loads and stores, global loads, copies into shared memory, shuffles) per FMA of a thread: those of
its hot loop each trip, and those of the rest of the kernel (what a thread does once: its first copies and
loads, the meeting of its sums), spread over the trips its hot loop makes at that shape (``design``).
With the launch shape of ``leapfrog_gpu/backends/launch.py`` that gives the occupancy and the issue rate:
the warps resident on a busy SM over the warps an SM needs to issue every cycle, at most 1:
``FULL_ISSUE_WARPS`` for a kernel whose FMAs chain, ``TILED_ISSUE_WARPS`` (two a scheduler, one issuing
while the other waits at a barrier or for its loads) for the register-tiled ones of ``DESIGNED``, whose
threads each hold 8 or 64 independent sums. Then these times, each a lower bound on the kernel's duration:

  memory    the compulsory bytes (``kernel_traffic.py``) at the card's bandwidth;
  latency   dependent round trips to memory per thread x their latency x (threads / resident threads,
            at least 1): a thread that must see a load's value before it issues the next one pays the
            latency once per round. A round that streams an (n, m) matrix pays ``HBM_LATENCY``; one that
            reads only (n, B) or (n,) arrays pays ``L2_LATENCY``, since the kernel before it has just
            written them;
  FMA       the multiply-adds at the busy SMs' peak rate times the issue rate;
  shared    the data path's cycles (above), likewise;
  L2        what the blocks of ``DESIGNED`` re-read from L2 beyond the compulsory bytes (each block of the
            chain GEMM all m rows of its columns of x and all of its rows of w, each block of the rank update
            its rows of delta and of a) at ``L2_BANDWIDTH``;
  pipeline  the design's own order, for ``DESIGNED``: a block's work is a sequence of units (a stage of w
            for the chain GEMM, an octet of rows for the rank update in rows, a tile for the one in tiles), U
            of them for a block slot of an SM over the grid's waves; a unit's load runs while earlier units
            compute, as far as the stages in flight allow (a unit's load from HBM takes at least a round trip
            over the stages in flight: Little's law), and its stores while later ones compute. So: the first
            load, then U - 1 times the slowest of a unit's load, compute (FMA, shared or L2) and store, then
            the last unit's compute and store. With one unit a slot (a single wave of rank-update tiles)
            nothing overlaps: load, compute, store in turn.

The prediction is the largest; its name is the kernel's bound, and ``predicted_fraction`` is the ideal time
over the prediction, the ideal being the largest of the memory time, the FMAs at the full issue rate of every
SM of the card and one round trip to L2 (no kernel that reads memory can take less). A kernel under 0.7 gets
the reason, from the terms that make its bound (``reason``). Assumptions, all stated here: every access is
coalesced, the compulsory bytes move at HBM bandwidth (an N = 1024 layer would partly hit the 50 MB L2), a
round's loads are all in flight together, the rounds of each kernel are counted from its loops in
``kernels/*.cu`` (``_rounds`` below), and launch overhead is left out of kernel times (the step adds ``NODE``
per kernel on the main stream's path, and charges Leapfrog's chain ``CONTENTION`` for the workers beside it).
SASS counts are static (``sass.py``): an instruction counts once, whichever path a launch takes (the 16-byte
one for the table's shapes), once a trip in the hot loop and once in all outside it.

``python profiling/kernel_model.py`` prints the table; ``--json FILE`` writes one record per kernel and
shape; ``--readme`` prints kernels/README.md (``profiling/kernel_tables.py``: the floors of
``kernel_traffic.py``, the before and after of the pipelined kernels, and this model's tables).
"""

import json
import math
import sys
from dataclasses import asdict

from leapfrog_gpu import get_backend
from leapfrog_gpu.backends import launch
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench.traffic import step_bytes
from leapfrog_gpu.tools.cli import Parser, output_refusal, path, written_whole

import card as cards
import graph_nodes
import kernel_traffic as traffic
import sass
from card import CARDS, H200
from sass import compiled, cuobjdump, nvrtc_version  # noqa: F401 - cuobjdump: the device check's probe

FMA_PER_CLOCK = {4: 128, 8: 64}  # per SM: float32, float64 lanes
REGISTERS = 65536  # per SM
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256
BLOCKS = 32  # resident per SM; shared memory per SM (less 1 KB per resident block) and warps are the card's
FULL_ISSUE_WARPS = 12  # resident warps an SM needs to issue an FMA or a shared load every cycle (3 a scheduler)
TILED_ISSUE_WARPS = 8  # the same for a register-tiled hot loop, whose warps each have 64 independent FMAs
CONTENTION = 0.1  # a Leapfrog step's chain kernels run this much slower beside the workers' gradient kernels
HBM_LATENCY = 0.6e-6  # s, a load that misses L2, under load
L2_LATENCY = 0.15e-6  # s, a load that hits L2
L2_BANDWIDTH = 6.0e12  # bytes/s of reads that hit L2, every SM together (5-7 TB/s is reported; not yet measured)
NODE = 1.0e-6  # s, a kernel node's cost on a graph's path, until the device check's empty-kernel graph measures it
GEMMS = ("forward_gemm", "backward_gemm")
RANKS = ("rank_update", "rank_update_sgd", "rank_update_bias")
DESIGNED = GEMMS + RANKS
"""The pipelined B > 1 kernels: register-tiled, with copies into shared memory in flight."""
SHAPES = tuple((n, batch) for n in (1024, 4096) for batch in (1, 32, 64))
STEP_BATCHES = (1, 32, 64)
HEADLINE = dict(N=1024, L=32, B=32)
TARGET = 0.7  # the fraction of its bound each kernel is designed to reach
W_RING = 32768  # bytes of rank_rows' ring of w (kernels/nabla_w.cu), in octets of rows of a block's columns


def _module(kernel, n, batch):
    """(file, -D options, grid, block) of the launch of ``kernel`` for an (n, n) layer and a batch."""
    if kernel in ("forward_gemv", "forward_gemm", "backward_gemv", "backward_gemm"):
        grid, block, defines = launch.chain_launch(kernel.split("_")[0], n, batch, 4)
        return "chain.cu", defines, grid, block
    if kernel in ("outer", "outer_sgd", "outer_bias"):
        return ("nabla_w.cu", *_order(launch.outer_launch(n, n)))
    if kernel in RANKS:
        return ("nabla_w.cu", *_order(launch.rank_update_launch(n, n, batch, 4)))
    if kernel == "bias_sum":
        return ("nabla_b.cu", *_order(launch.bias_launch(n)))
    if kernel in ("gru_forward", "gru_backward", "lstm_forward", "lstm_backward"):
        return ("gates.cu", *_order(launch.gates_launch(n, batch)))
    if kernel == "check_finite":
        return ("elementwise.cu", *_order(launch.check_finite_launch(n * n)))
    if kernel == "step_done":
        return "elementwise.cu", launch.elementwise_launch(1)[2], (1, 1, 1), (1, 1, 1)
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
    if kernel in GEMMS:  # the first stage of w, and x a stage ahead: later stages are in flight (pipeline)
        return 1, 1
    if kernel in RANKS:  # the first chunk or octet of delta; the next ones in flight; rank_update_sgd's w as well
        return int(kernel == "rank_update_sgd"), 1
    if kernel in ("outer", "outer_bias"):  # delta[i] and a[j] at once; the store needs no answer
        return 0, 1
    if kernel == "outer_sgd":  # delta[i], a[j] and w at once
        return 1, 0
    if kernel == "bias_sum":  # a warp per row, BIAS_UNROLL loads a lane a round
        return 0, math.ceil(batch / (32 * launch.BIAS_UNROLL))
    if kernel == "step_done":  # one thread reads two controls
        return 0, 1
    if kernel == "check_finite":  # a grid-stride loop over n*m, a float4 a round
        return math.ceil(n * m / (4 * threads)), 0
    if kernel == "sgd_update":  # a grid-stride loop over n*m: a round per element visited
        return math.ceil(n * m / threads), 0
    if kernel == "sgd_update_layer":  # the same over n*m + n
        return math.ceil((n * m + n) / threads), 0
    return 0, math.ceil(n * batch / threads)


def _fmas(kernel, n, batch):
    if kernel in ("forward_gemv", "backward_gemv", *DESIGNED):
        return n * n * batch
    if kernel in ("outer", "outer_sgd", "outer_bias", "sgd_update", "sgd_update_layer"):
        return n * n
    return 0


def design(kernel, n, batch, grid, itemsize=4):
    """``(stages in flight, units a block works through, bytes the grid re-reads from L2, trips of a thread's hot
    loop)`` of a kernel of ``DESIGNED`` (kernels/chain.cu, kernels/nabla_w.cu), from the launch's constants."""
    blocks = grid[0] * grid[1] * grid[2]
    if kernel in GEMMS:  # stages of 8 KB of w; each block reads all m rows of x's columns and all of its rows of w
        rows, groups = launch.gemm_shape(n, batch, itemsize)
        x_again, w_again = (blocks - grid[0]) * n * groups * 32, (grid[0] - 1) * n * n * itemsize
        stages = math.ceil(n / (8192 // (rows * itemsize)))
        return launch.GEMM_STAGES - 1, stages, x_again + w_again, stages
    # the blocks of a column of the grid read all n rows of delta, those of a row all m rows of a (m = n here)
    reread = ((grid[0] - 1) * n + (grid[1] * grid[2] - 1) * n) * batch * itemsize
    if launch.rank_parts(batch, itemsize) is None:  # in tiles: a tile a block, the batch in chunks
        return launch.RANK_STAGES - 1, 1, reread, math.ceil(batch / (launch.RANK_CHUNK * 4 // itemsize))
    octets = math.ceil(math.ceil(n / 8) / grid[1])  # in rows: an octet of rows a unit, and a trip of the hot loop
    stages = 16 // itemsize - 1  # octets of delta in flight; of w, its ring's slots less one
    if kernel == "rank_update_sgd":
        stages = W_RING // itemsize // (8 * 256 // launch.rank_parts(batch, itemsize)) - 1
    return stages, octets, reread, octets


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
    threads_per_block = block[0] * block[1] * block[2]
    warps_per_block = math.ceil(threads_per_block / 32)
    blocks = grid[0] * grid[1] * grid[2]
    resident, limiter = occupancy(function["registers"], function["shared"], threads_per_block, card)
    waves = math.ceil(blocks / (card.sms * resident))
    threads = blocks * threads_per_block
    per_sm = min(resident, math.ceil(blocks / card.sms))  # blocks at once on a busy SM
    tiled = kernel in DESIGNED
    issue = min(1.0, per_sm * warps_per_block / (TILED_ISSUE_WARPS if tiled else FULL_ISSUE_WARPS))
    busy = min(blocks, card.sms) * issue * card.clock  # SM cycles a second that issue
    fmas = _fmas(kernel, n, batch)
    bytes_moved = traffic.kernel_bytes(kernel, n, n, batch, itemsize)
    hbm, l2 = _rounds(kernel, n, batch, threads)
    concurrency = max(1.0, threads / (card.sms * resident * threads_per_block))
    stages, units, reread, trips = design(kernel, n, batch, grid, itemsize) if tiled else (0, 1, 0, 1)
    cycles_per_fma = data_path_per_fma(function, trips) if tiled else 0.0
    times = {
        "memory": bytes_moved / card.bandwidth,
        "latency": concurrency * (hbm * HBM_LATENCY + l2 * L2_LATENCY),
        "FMA": fmas / (FMA_PER_CLOCK[itemsize] * busy),
        "shared memory": fmas / 32 * cycles_per_fma / busy,
        "L2": reread / L2_BANDWIDTH,
    }
    _, reads, writes = traffic.KERNELS[kernel]
    loads, stores = (count(n, n, batch) * itemsize / card.bandwidth for count in (reads, writes))
    parts = _pipeline(kernel, times, loads, stores, stages, units * waves) if tiled else {}
    times["pipeline"] = sum(parts.values())
    bound = max(times, key=times.get)
    predicted = times[bound]
    return {
        "kernel": kernel, "N": n, "B": batch, "dtype": {4: "float32", 8: "float64"}[itemsize], "card": card.name,
        "grid": list(grid), "block": list(block), "registers": function["registers"],
        "shared_bytes": function["shared"], "blocks_per_sm": resident, "occupancy_limit": limiter,
        "occupancy": resident * warps_per_block / card.max_warps, "waves": waves, "issue": issue,
        "issue_warps": TILED_ISSUE_WARPS if tiled else FULL_ISSUE_WARPS, "warps_per_sm": per_sm * warps_per_block,
        "stages": stages, "units": units * waves, "rounds_hbm": hbm, "rounds_l2": l2, "bytes": bytes_moved,
        "fmas": fmas, "reread_bytes": reread,
        "ldg_32": sass.count(function["sass"], r"LDG\.E(\.U8|\.S8|\.U16|\.S16)?(\.CONSTANT)?"),
        "ldg_64": sass.count(function["sass"], r"LDG\.E\.64(\.CONSTANT)?"),
        "ldg_128": sass.count(function["sass"], r"LDG\.E\.128(\.CONSTANT)?"),
        "shared_cycles_per_fma": round(cycles_per_fma, 3),
        **{f"{name.split()[0].lower()}_us": seconds * 1e6 for name, seconds in times.items()},
        "pipeline_parts_us": {name: seconds * 1e6 for name, seconds in parts.items()}, "stores_us": stores * 1e6,
        "bound": bound, "predicted_us": predicted * 1e6,
        "predicted_fraction": max(times["memory"], fmas / (FMA_PER_CLOCK[itemsize] * card.sms * card.clock),
                                  L2_LATENCY) / predicted,
    }


def data_path_per_fma(function, trips):
    """Cycles of the L1/shared-memory data path per FMA of a thread whose hot loop runs ``trips`` times: the hot
    loop's each trip, and the rest of the function (what a thread does once: its first copies and loads, the sums'
    meeting) spread over them."""
    hot = function["hot"]
    rest = {opcode: count - hot.get(opcode, 0) for opcode, count in function["sass"].items()}
    return (sass.data_path_cycles(hot) * trips + sass.data_path_cycles(rest)) / (sass.count(hot, sass.FMA) * trips)


def _pipeline(kernel, times, loads, stores, stages, units):
    """The pipeline's parts (seconds) for ``units`` units a block slot, ``loads`` and ``stores`` seconds of
    traffic in all: ``first`` (what precedes the first unit's compute), ``steady`` (U - 1 units at the pace of
    the slowest of their load, compute and store), ``last`` (the last unit's compute and stores)."""
    compute = max(times["FMA"], times["shared memory"], times["L2"])
    if kernel in GEMMS:  # each stage of w a round trip over the stages in flight at least; the first a whole one
        load_u = max(loads / units, HBM_LATENCY / stages)
        first, during_last = max(HBM_LATENCY, load_u), 0.0
    else:  # delta and a come from L2 (their time is compute's); rank_update_sgd's w from HBM, over its stages
        load_u = during_last = (max(loads / units, HBM_LATENCY / stages) if kernel == "rank_update_sgd"
                                else loads / units)
        first = L2_LATENCY
    compute_u, store_u = compute / units, stores / units
    return {"first": first, "steady": (units - 1) * max(load_u, compute_u, store_u),
            "last": max(compute_u, during_last) + store_u}


def reason(r):
    """Why record ``r`` stays under ``TARGET`` of its bound, from the terms that make its prediction; "" when
    it does not. First whether the kernel's first round trip and its FMAs' trips through the data path alone
    (the prediction with no re-read from L2 and nothing left to overlap) come to more than the ideal over
    ``TARGET``; then the slowest part of its units."""
    if r["predicted_fraction"] >= TARGET:
        return ""
    if r["bound"] != "pipeline":
        return f"{r['bound']}: {r[r['bound'].split()[0].lower() + '_us']:.3g} us"
    compute = {"FMA": r["fma_us"], "shared memory": r["shared_us"], "L2": r["l2_us"]}
    slowest = max(compute, key=compute.get)
    first, ideal = r["pipeline_parts_us"]["first"], r["predicted_us"] * r["predicted_fraction"]
    if first + r["shared_us"] > ideal / TARGET:
        return (f"latency and the data path: the first round trip ({first:.2f} us) and the FMAs' operands and sums "
                f"through the data path ({r['shared_us']:.2f} us, {r['shared_cycles_per_fma']:.2f} cycles an FMA) "
                f"come to {first + r['shared_us']:.2f} us, over {ideal / TARGET:.2f} us with no re-read from L2")
    if slowest == "L2" and r["l2_us"] > max(r["memory_us"], r["fma_us"]):
        return (f"L2: its {math.prod(r['grid'])} blocks re-read {r['reread_bytes'] / 1e6:.1f} MB "
                f"({r['l2_us']:.2f} us at {L2_BANDWIDTH / 1e12:.0f} TB/s)")
    if r["issue"] < 1 and slowest == "FMA":
        return f"issue: {r['warps_per_sm']} warps an SM of the {r['issue_warps']} full issue needs"
    if r["units"] == 1:
        return (f"one wave of tiles: each SM computes its tiles ({compute[slowest]:.2f} us), then stores them "
                f"({r['stores_us']:.2f} us)")
    if slowest == "shared memory":
        return (f"shared memory: {r['shared_us']:.2f} us ({r['shared_cycles_per_fma']:.2f} cycles of the data path an "
                f"FMA, {r['units']} units a block slot)")
    return f"{slowest}: {compute[slowest]:.2f} us"


def records(shapes=SHAPES, card=H200):
    """Every kernel at every shape it runs at on ``card`` (B = 1 kernels at B = 1, their twins above)."""
    out = []
    for n, batch in shapes:
        for kernel in traffic.KERNELS:
            if (kernel in traffic.B_ONE and batch != 1) or (kernel in traffic.B_MANY and batch == 1):
                continue
            record = model(kernel, n, batch, card=card)
            out.append({**record, "reason": reason(record)})
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


def main(argv=None):
    from kernel_tables import readme, table  # the tables import this module

    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=path, metavar="FILE", help="write one JSON record per kernel and shape to FILE")
    parser.add_argument("--readme", action="store_true", help="print kernels/README.md (the H100 and H200)")
    parser.add_argument("--card", choices=(*CARDS, "device"),
                        help="the card of the table and the JSON (default H200); device: this machine's GPU, with "
                             "its copy bandwidth and a graph node's cost measured now")
    args = parser.parse_args(argv)
    if args.readme and args.card is not None:
        parser.error("--readme prints the tables of the H100 and the H200: drop --card")
    if args.json and (why := output_refusal("--json", args.json)):
        parser.error(why)
    card, node = CARDS.get(args.card or "H200"), NODE
    if card is None:
        cards.refuse_without_gpu(parser, "--card device", "--card H100 or H200 models a listed card")
        with get_backend("cupy") as backend:
            card, cost = cards.lent_card(backend), graph_nodes.node_cost(backend)
        node = cost["node_us"] * 1e-6
        print(cards.line(card), graph_nodes.line(cost), sep="\n", flush=True)
    rows = records(card=card)
    if args.json:
        steps = [step(rows, card, node, B=b) for b in STEP_BATCHES]
        with written_whole(f"--json {args.json}", args.json) as out:
            out.write(json.dumps({"card": asdict(card), "node_us": node * 1e6, "kernels": rows, "steps": steps},
                                 indent=1) + "\n")
    print(readme() if args.readme else table(rows), end="" if args.readme else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "kernel_model.py"))
