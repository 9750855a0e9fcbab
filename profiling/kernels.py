"""Micro-benchmark of our kernels against the library's: (7), and the chain (2)(3) and (5), in GB/s.

    python profiling/kernels.py --backend cupy --json kernels.json [--jsonl kernels.jsonl] [--model MODEL]

For each shape (n, m, B) it times ``ops.nabla_w`` (the ``outer`` kernel at B = 1, ``rank_update``
above) and ``xp.matmul(delta, a.T, out=nabla_w)`` (cuBLAS on a GPU, BLAS on NumPy) on the same
arrays, checks that both agree, then (7)'s two other kernels of ours: ``ops.fused_update`` (impl
"fused": ``outer_sgd``, ``rank_update_sgd``) and ``ops.gradients`` (impl "grads": ``outer_bias``,
``rank_update_bias``), each checked against the product and sum of the same arrays, and prints GB/s from
``traffic.kernel_bytes`` beside the bandwidth of a measured device-to-device copy: one table, one row per
shape and implementation.

Then the chain (``chain_rows``): the forward layer (2)(3) and the backward layer (5) on our kernels of
kernels/chain.cu (what a graph step runs; a GEMV at B = 1, a staged GEMM above) against cuBLAS plus our
elementwise kernel (what an eager step runs), in GB/s and, for B > 1, GFLOP/s, with the verdicts on
the GPU targets: the GEMVs at >= 80 % of the copy's bandwidth at N = 4096, and no slower than cuBLAS
plus the elementwise kernel at N = 1024. On NumPy there is one implementation, the library's.

With ``--model`` (the JSON of ``profiling/kernel_model.py --json``), each row of our kernels (on NumPy,
of their twins: the predictions are then for reference only) at a shape the model covers (square, its
dtype) gets the model's ``predicted_us`` and ``bound`` of the kernel it times (``model_kernel``), printed
beside the measured median with the ratio of the two; a shape the model lacks prints "-".

Each kernel is timed over ``--launches`` launches back to back between one pair of events: the time per
launch, and apart from it the host's time to issue one (in each row's JSON, and a line under each table).

Each row is printed, and with ``--jsonl`` appended to a file, as soon as its shape is measured and its
implementations agree, so that a run stopped part-way keeps what it measured.
"""

import argparse
import contextlib
import json
import math
import sys
from functools import partial

import numpy as np

from leapfrog_gpu import get_backend
from leapfrog_gpu.backends import launch, timing
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import (Parser, integer, one_file_each, output_refusal, path, read_or_refuse,
                                   refusing_too_large, writing, written_whole)
import kernel_traffic as traffic
from card import refuse_without_gpu

SHAPES = ((1024, 1024, 1), (1024, 1024, 32), (1024, 1024, 64), (4096, 4096, 1), (4096, 4096, 32), (4096, 4096, 64),
          (1000, 999, 33))
COPY_SHARE_TARGET, CUBLAS_TARGET = 0.8, 1.0  # the GEMVs: of copy bandwidth at N = 4096; of cuBLAS's speed at 1024
# The kernel of profiling/kernel_model.py that a row of ours times, by (the row's kernel, B > 1): ops.nabla_w
# launches outer at B = 1 and rank_update above, ops.fused_update their _sgd twins, ops.gradients their _bias twins;
# each chain row names its own.
MODEL_KERNELS = {("nabla_w", False): "outer", ("nabla_w", True): "rank_update",
                 ("fused_update", False): "outer_sgd", ("fused_update", True): "rank_update_sgd",
                 ("gradients", False): "outer_bias", ("gradients", True): "rank_update_bias",
                 ("forward_gemv", False): "forward_gemv", ("forward_gemm", True): "forward_gemm",
                 ("backward_gemv", False): "backward_gemv", ("backward_gemm", True): "backward_gemm"}
LAUNCHES = 20  # launches between one pair of events: a kernel's time apart from Python's launch of it
OURS = ("ours", "fused", "grads", "numpy")  # our kernels; on NumPy the chain's one implementation, their twin
KERNEL_OF = {"ours": "nabla_w", "matmul": "nabla_w", "fused": "fused_update", "grads": "gradients"}
"""The op of ``backend.ops`` each implementation of the nabla_w table times (matmul: beside ours)."""


def timed(backend, fn, repeats, warmup, launches):
    """``{"ms": summary of the device time per launch, "launch_us": the host's median time to issue one,
    "launches", "launch_bound"}``: ``launches`` launches back to back between one pair of events
    (``timing.measure_launches``); launch-bound where issuing took 90 % of the time or more (the device
    waited on Python: the figure is then the launch rate, an upper bound of the kernel's time)."""
    per_launch, issue = timing.measure_launches(backend, fn, repeats, warmup, launches)
    ms, launch_us = timing.summary(per_launch), float(np.median(issue)) * 1e3
    return {"ms": ms, "launch_us": launch_us, "launches": launches, "launch_bound": launch_us >= 900 * ms["median"]}


def rows(backend, shapes, dtype="float32", repeats=20, warmup=3, launches=LAUNCHES):
    """One dict per (shape, implementation), yielded as each shape is measured: median and p20/p80 ms of one
    launch (``timed``), the host's time to issue it, GB/s, the copy's GB/s, and the relative difference
    from the maths on the same arrays (matmul's product; a NaN or one above the tolerance raises)."""
    xp, ops, main = backend.xp, backend.ops, backend.main
    copy = timing.copy_bandwidth(backend, repeats=repeats, warmup=warmup, launches=launches)["median"]
    rng = np.random.default_rng(0)
    for n, m, batch in shapes:
        delta = xp.asarray(rng.standard_normal((n, batch)), dtype=dtype)
        a = xp.asarray(rng.standard_normal((m, batch)), dtype=dtype)
        w = xp.asarray(rng.standard_normal((n, m)), dtype=dtype)
        ours, theirs, fused, nabla_w, nabla_b = (xp.empty(shape, dtype=dtype) for shape in [(n, m)] * 4 + [(n,)])
        controls = xp.asarray([0.5, 0], dtype=dtype)  # the step's scale, and no refusal
        scratch = xp.empty(max(ops.SCRATCH, m), dtype=dtype)
        backend.synchronize()  # the uploads ran on CuPy's default stream, which main does not wait for
        a_t = a.T
        implementations = (("ours", lambda: backend.launch(main, "nabla_w", ops.nabla_w, ours, delta, a)),
                           ("matmul", lambda: backend.launch(main, "matmul", partial(xp.matmul, out=theirs),
                                                             delta, a_t)),
                           ("fused", lambda: backend.launch(main, "fused_update", ops.fused_update, fused, delta, a,
                                                            controls, scratch)),
                           ("grads", lambda: backend.launch(main, "gradients", ops.gradients, nabla_w, nabla_b,
                                                            delta, a)))
        for name, fn in implementations:  # once, on the arrays as they are, for the check below
            if name == "fused":
                fused[...] = w
                backend.synchronize()
            fn()
        backend.synchronize()
        results = {"ours": (ours, theirs), "fused": (fused, w - 0.5 * theirs), "grads": (nabla_w, theirs),
                   "grads b": (nabla_b, delta.sum(axis=1))}
        tolerance = 1e-4 if dtype == "float32" else 1e-10
        errors = {}
        for name, (got, want) in results.items():
            error = float(xp.max(xp.abs(got - want))) / max(float(xp.max(xp.abs(want))), 1e-30)
            if not error <= tolerance:  # a NaN fails too
                raise AssertionError(f"{name} differs from the product at {(n, m, batch)}: relative error {error:.2e}")
            errors[name] = error
        errors["grads"] = max(errors["grads"], errors.pop("grads b"))
        errors["matmul"] = errors["ours"]
        for name, fn in implementations:
            kernel = KERNEL_OF[name]
            model_kernel = MODEL_KERNELS[(kernel, batch > 1)]
            bytes_moved = traffic.kernel_bytes(model_kernel, n, m, batch, np.dtype(dtype).itemsize)
            time = timed(backend, fn, repeats, warmup, launches)
            yield {"n": n, "m": m, "B": batch, "dtype": dtype, "kernel": kernel, "impl": name, **time,
                   "gbps": bytes_moved / (time["ms"]["median"] * 1e6), "copy_gbps": copy, "error": errors[name]}


def chain_implementations(backend):
    """``{name: ops}``: on CuPy our chain kernels and cuBLAS plus our elementwise kernel; on NumPy its twin."""
    if backend.name != "cupy":
        return {"numpy": backend.ops}
    from leapfrog_gpu.backends.ops_cuda import CudaOps

    return {"ours": CudaOps(backend.xp, "kernels"), "cublas+ew": CudaOps(backend.xp, "cublas")}


def chain_rows(backend, shapes, dtype="float32", repeats=20, warmup=3, copy=None, launches=LAUNCHES):
    """One dict per (shape, direction, implementation) of the chain, yielded as each (shape, direction)
    is measured: ms, GB/s, GFLOP/s (B > 1), copy GB/s.

    The implementations must agree (relative to the largest output, 1e-4 in float32 and 1e-10 in
    float64: a different order of summation); the outputs are compared before anything is reported.
    """
    xp, main = backend.xp, backend.main
    if copy is None:
        copy = timing.copy_bandwidth(backend, repeats=repeats, warmup=warmup, launches=launches)["median"]
    rng = np.random.default_rng(1)
    implementations = chain_implementations(backend)
    for n, m, batch in shapes:
        def array(*shape):
            return xp.asarray(rng.standard_normal(shape), dtype=dtype)

        w, a_prev, b, delta_next, sp = array(n, m), array(m, batch), array(n), array(n, batch), array(m, batch)
        for direction in ("forward", "backward"):
            results, measured = {}, []
            kernel = f"{direction}_{'gemv' if batch == 1 else 'gemm'}"
            # forward: layer of n outputs from m inputs; backward: delta^l (m, B) from w (n, m), delta^{l+1} (n, B)
            outputs, rows = (n, m) if direction == "forward" else (m, n)
            bytes_moved = traffic.kernel_bytes(kernel, outputs, rows, batch, np.dtype(dtype).itemsize)
            for name, ops in implementations.items():
                buffers = [xp.empty((outputs, batch), dtype=dtype) for _ in range(3)]
                if direction == "forward":
                    args = (ops.forward, *buffers, w, a_prev, b, "tanh")
                else:
                    args = (ops.backward, buffers[0], w, delta_next, sp)
                backend.synchronize()  # the uploads ran on CuPy's default stream
                time = timed(backend, lambda a=args: backend.launch(main, kernel, *a), repeats, warmup, launches)
                ms = time["ms"]
                results[name] = buffers[0]
                measured.append({"n": n, "m": m, "B": batch, "dtype": dtype, "kernel": kernel, "impl": name,
                                 **time, "gbps": bytes_moved / (ms["median"] * 1e6), "copy_gbps": copy,
                                 "gflops": 2 * n * m * batch / (ms["median"] * 1e6) if batch > 1 else None})
            _agree(list(results.values()), dtype, f"{kernel} at {(n, m, batch)}")
            yield from measured


def _agree(outputs, dtype, where):
    tolerance = 1e-4 if dtype == "float32" else 1e-10
    for other in outputs[1:]:
        scale = max(float(abs(outputs[0]).max()), 1e-30)
        error = float(abs(outputs[0] - other).max()) / scale
        if not error <= tolerance:
            raise AssertionError(f"the chain implementations differ at {where}: relative error {error:.2e}")


def chain_header(model=False):
    """The chain table's header, with the model's columns if ``model``."""
    return ("     n      m     B  kernel         impl           ms [p20-p80]           GB/s   of copy    GFLOP/s"
            f"{MODEL_HEADER if model else ''}  blocks")


def chain_line(r, model=False):
    """One row of the chain's table, with the model's columns if ``model``."""
    ms = r["ms"]
    gflops = "-" if r["gflops"] is None else f"{r['gflops']:.1f}"
    blocks = ":".join("x".join(map(str, block)) for block in r["gemv_blocks"]) if "gemv_blocks" in r else ""
    return (f"{r['n']:>6} {r['m']:>6} {r['B']:>5}  {r['kernel']:<13}  {r['impl']:<9}  {ms['median']:.4f} "
            f"[{ms['p20']:.4f}-{ms['p80']:.4f}]  {r['gbps']:>8.1f}  {100 * r['gbps'] / r['copy_gbps']:>6.1f}%"
            f"  {gflops:>9}{model_columns(r) if model else ''}  {blocks}")


def chain_verdicts(results):
    """The GPU targets of the GEMVs, where the run measured their shapes (our kernels only)."""
    lines = []
    ours = [r for r in results if r["impl"] == "ours" and r["B"] == 1 and r["n"] == r["m"]]
    for r in ours:
        if r["n"] == 4096:
            share = r["gbps"] / r["copy_gbps"]
            met = "met" if share >= COPY_SHARE_TARGET else "NOT MET"
            lines.append(f"target {r['kernel']} N=4096: {share:.0%} of copy bandwidth "
                         f"(>= {COPY_SHARE_TARGET:.0%}: {met})")
        if r["n"] == 1024:
            library = next(x for x in results if x["impl"] == "cublas+ew" and (x["n"], x["m"], x["B"], x["kernel"])
                           == (r["n"], r["m"], r["B"], r["kernel"]))
            ratio = library["ms"]["median"] / r["ms"]["median"]
            met = "met" if ratio >= CUBLAS_TARGET else "NOT MET"
            lines.append(f"target {r['kernel']} N=1024: {ratio:.2f}x the speed of cuBLAS + elementwise (>= 1x: {met})")
    return lines


def shapes(text):
    """An argument type: ``n:m:B,...``, each of n, m and B an integer >= 1."""
    try:
        found = [tuple(map(integer(1), shape.split(":"))) for shape in text.split(",")]
    except argparse.ArgumentTypeError:
        found = []
    if not found or any(len(shape) != 3 for shape in found):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of n:m:B, each an integer >= 1; got {text!r}")
    return found


def gemv_blocks(text):
    """An argument type: ``[((lanes, rows), (cols, threads)), ...]`` from ``32x4:8x256,32x8:16x512``, each an
    integer >= 1 (whether the launcher runs a shape is its own check, made as the shape's turn comes)."""
    try:
        found = [tuple(tuple(map(integer(1), block.split("x"))) for block in pair.split(":"))
                 for pair in text.split(",")]
    except argparse.ArgumentTypeError:
        found = []
    if not found or any(len(pair) != 2 or any(len(block) != 2 for block in pair) for pair in found) or \
            len(set(found)) < len(found):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of FxR:CxS, each an integer >= 1, each pair "
                                         f"given once; got {text!r}")
    return found


@contextlib.contextmanager
def _gemv_block_shapes(forward, backward):
    """The launcher's GEMV block shapes set to ``forward`` and ``backward`` within the block."""
    saved = launch.FORWARD_GEMV_BLOCK, launch.BACKWARD_GEMV_BLOCK
    launch.FORWARD_GEMV_BLOCK, launch.BACKWARD_GEMV_BLOCK = forward, backward
    try:
        yield
    finally:
        launch.FORWARD_GEMV_BLOCK, launch.BACKWARD_GEMV_BLOCK = saved


MODEL_FILE = "a file profiling/kernel_model.py --json wrote"
"""What ``--model`` names."""


def load_model(path):
    """``{(kernel, N, B, dtype): record}`` of a ``kernel_model.py --json`` file; a ``ValueError`` that names the file
    and what is wrong where its JSON is not of that layout."""
    with open(path, encoding="utf-8") as source:
        found = json.load(source)
    records = found.get("kernels") if isinstance(found, dict) else None
    if not isinstance(records, list):
        raise ValueError(f"{path} holds no \"kernels\" list: it is not {MODEL_FILE}")
    for i, r in enumerate(records):
        if not (isinstance(r, dict) and _model_record(r)):
            raise ValueError(f"{path}: kernels[{i}] is no record of {MODEL_FILE} (its kernel and dtype, N and B "
                             "integers >= 1, a bound's words and predicted_us, a time > 0)")
    return {(r["kernel"], r["N"], r["B"], r["dtype"]): r for r in records}


def _model_record(r):
    """Whether ``r`` holds what a row's prediction reads: kernel, dtype, N and B (integers >= 1), bound (words) and
    predicted_us (a finite time > 0)."""
    count, time_us = (lambda v: type(v) is int and v >= 1), r.get("predicted_us")
    return (isinstance(r.get("kernel"), str) and isinstance(r.get("dtype"), str) and count(r.get("N"))
            and count(r.get("B")) and isinstance(r.get("bound"), str) and bool(r["bound"].split())
            and type(time_us) in (int, float) and math.isfinite(time_us) and time_us > 0)


def model_kernel(table, r):
    """The model's name of the kernel that row ``r`` of ``table`` (``nabla_w`` or ``chain``) times."""
    return MODEL_KERNELS[(r.get("kernel", "nabla_w") if table == "nabla_w" else r["kernel"], r["B"] > 1)]


def with_model(table, r, model):
    """``r`` with the model's ``model_kernel``, ``predicted_us`` and ``bound`` if it is a row of ours at the
    launcher's block shapes; ``predicted_us`` and ``bound`` are None where the model lacks its shape."""
    if r["impl"] not in OURS or "gemv_blocks" in r:
        return r
    kernel = model_kernel(table, r)
    record = model.get((kernel, r["n"], r["B"], r["dtype"])) if r["n"] == r["m"] else None
    found = record is not None
    return {**r, "model_kernel": kernel, "predicted_us": record["predicted_us"] if found else None,
            "bound": record["bound"] if found else None}


MODEL_HEADER = "  model us  bound    vs model"


def model_columns(r):
    """The model's columns of a row: predicted us, its bound and the measured median over it, or "-"."""
    if r.get("predicted_us") is None:
        return f"  {'-':>8}  {'-':<7}  {'-':>8}"
    ratio = 1e3 * r["ms"]["median"] / r["predicted_us"]
    return f"  {r['predicted_us']:>8.2f}  {r['bound'].split()[0]:<7}  {f'{ratio:.{2 if ratio < 100 else 0}f}x':>8}"


def header(model=False):
    """The nabla_w table's header, with the model's columns if ``model``."""
    return "     n      m     B  impl        ms [p20-p80]           GB/s   of copy" + (MODEL_HEADER if model else "")


def line(r, model=False):
    """One row of the nabla_w table, with the model's columns if ``model``."""
    ms = r["ms"]
    return (f"{r['n']:>6} {r['m']:>6} {r['B']:>5}  {r['impl']:<6}  {ms['median']:.4f} "
            f"[{ms['p20']:.4f}-{ms['p80']:.4f}]  {r['gbps']:>8.1f}  {100 * r['gbps'] / r['copy_gbps']:>6.1f}%"
            f"{model_columns(r) if model else ''}")


def launch_line(rows):
    """One line under a table: the host's time to issue a launch (median over its rows, their range), and
    the rows whose launches it bound (``timed``), whose times are then the launch rate."""
    costs = [r["launch_us"] for r in rows]
    if not costs:
        return "launches: none timed"
    bound = [f"{r['n']}:{r['m']}:{r['B']} {r.get('kernel', 'nabla_w')} {r['impl']}" for r in rows if r["launch_bound"]]
    return (f"launches: {rows[0]['launches']} an event pair; the host issues one in {np.median(costs):.1f} us "
            f"(median; {min(costs):.1f}-{max(costs):.1f}); bound by it: {', '.join(bound) if bound else 'none'}")


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--shapes", type=shapes, default=SHAPES, metavar="n:m:B,...", help="(default: a fixed set)")
    parser.add_argument("--repeats", type=integer(1), default=20)
    parser.add_argument("--launches", type=integer(1), default=LAUNCHES,
                        help=f"launches back to back between one pair of events per repeat (default {LAUNCHES}): "
                             "the time per launch apart from the host's time to issue one")
    parser.add_argument("--gemv-blocks", type=gemv_blocks, default=[], metavar="FxR:CxS,...",
                        help="chain GEMV block shapes to compare at B = 1, forward (lanes x rows) and backward "
                             "(columns x threads) pairs such as 32x4:8x256,32x8:16x512 (default: the launcher's)")
    parser.add_argument("--json", type=path, metavar="FILE")
    parser.add_argument("--jsonl", type=path, metavar="FILE",
                        help="append one JSON line per row to FILE as it is measured (its table in \"table\")")
    parser.add_argument("--model", type=path, metavar="FILE",
                        help="profiling/kernel_model.py --json output: its prediction beside each kernel of ours")
    args = parser.parse_args(argv)
    for option, named in (("--json", args.json), ("--jsonl", args.jsonl)):
        if named and (why := output_refusal(option, named)):
            parser.error(why)
    if why := one_file_each([("--model", args.model), ("--json", args.json), ("--jsonl", args.jsonl)]):
        parser.error(why)  # an output over the model read, or over the other output
    if args.backend == "cupy":
        refuse_without_gpu(parser, "--backend cupy", "--backend numpy runs the kernels' NumPy twins")
    gemvs = [shape for shape in args.shapes if shape[2] == 1]
    results, chain = [], []
    try:
        model = None if args.model is None else read_or_refuse(parser, args.model, load_model, MODEL_FILE)
    except ValueError as error:  # JSON of another layout (read_or_refuse says what is not JSON)
        parser.error(str(error))

    def show(table, r):
        r = {**r, "backend_repr": repr(backend)}
        if model is not None:
            r = with_model(table, r, model)
        (results if table == "nabla_w" else chain).append(r)
        print((line if table == "nabla_w" else chain_line)(r, model is not None), flush=True)
        if args.jsonl:
            with writing(f"--jsonl {args.jsonl}"), open(args.jsonl, "a", encoding="utf-8") as out:
                out.write(json.dumps({"table": table, **r}) + "\n")

    with refusing_too_large(parser), get_backend(args.backend) as backend:
        print(header(model is not None), flush=True)
        for r in rows(backend, args.shapes, args.dtype, args.repeats, launches=args.launches):
            show("nabla_w", r)
        copy = results[0]["copy_gbps"]
        print(launch_line(results), flush=True)
        print(f"copy: {copy:.1f} GB/s (read + write of a 128 MiB array, {args.launches} copies an event pair)\n",
              flush=True)
        print(chain_header(model is not None), flush=True)
        for r in chain_rows(backend, args.shapes, args.dtype, args.repeats, copy=copy, launches=args.launches):
            show("chain", r)
        print(launch_line(chain), flush=True)
        print("\n".join(chain_verdicts(chain)), flush=True)
        failed = [blocks for blocks in args.gemv_blocks
                  if not _other_gemv_blocks(backend, blocks, gemvs, args, show, copy)]
    if args.json:
        with written_whole(f"--json {args.json}", args.json) as out:
            json.dump({"nabla_w": results, "chain": chain}, out, indent=1)
    if failed:
        print(f"{len(failed)} of the GEMV block shapes failed: {', '.join(map(_blocks_text, failed))}")
    return 1 if failed else 0


def _blocks_text(blocks):
    return ":".join("x".join(map(str, block)) for block in blocks)


def _other_gemv_blocks(backend, blocks, gemvs, args, show, copy):
    """The chain's GEMVs at ``blocks`` (forward, backward), ours only, each row shown; True if they ran.
    A shape the launcher refuses, or a launch that fails, is reported on one line and the device's
    error cleared, so that the next block shapes still run."""
    forward, backward = blocks
    try:
        with _gemv_block_shapes(forward, backward):
            launch.chain_launch("forward", 1, 1, 4)  # the launcher's checks, before anything is launched
            for r in chain_rows(backend, gemvs, args.dtype, args.repeats, copy=copy, launches=args.launches):
                if r["impl"] != "cublas+ew":
                    show("chain", {**r, "gemv_blocks": [list(forward), list(backward)]})
        return True
    except Exception as error:  # noqa: BLE001 - reported; the other block shapes still run
        text = str(error).splitlines()[0] if str(error) else ""
        print(f"GEMV blocks {_blocks_text(blocks)}: failed: {type(error).__name__}: {text}", flush=True)
        with contextlib.suppress(Exception):
            backend.synchronize()  # the error a launch kept, cleared
        return False


if __name__ == "__main__":
    sys.exit(guarded(main, "kernels.py"))
