"""Micro-benchmark of equation (7): our nabla_w kernels against the library's matmul, in GB/s.

    python profiling/kernels.py --backend cupy --json kernels.json

For each shape (n, m, B) it times ``ops.nabla_w`` (the ``outer`` kernel at B = 1, ``rank_update``
above) and ``xp.matmul(delta, a.T, out=nabla_w)`` (cuBLAS on a GPU, BLAS on NumPy) on the same
arrays, checks that both agree, and prints GB/s from ``traffic.kernel_bytes`` beside the bandwidth
of a measured device-to-device copy: one table, one row per shape and implementation.
"""

import argparse
import json
import sys
from functools import partial

import numpy as np

from leapfrog_gpu import get_backend
from leapfrog_gpu.backends import timing
from leapfrog_gpu.tools import traffic

SHAPES = ((1024, 1024, 1), (1024, 1024, 32), (1024, 1024, 64), (4096, 4096, 1), (4096, 4096, 32), (1000, 999, 33))


def rows(backend, shapes, dtype="float32", repeats=20, warmup=3):
    """One dict per (shape, implementation): median and p20/p80 ms, GB/s, the copy's GB/s, and the
    relative difference between the two implementations (a NaN or one above the tolerance raises)."""
    xp, ops, main = backend.xp, backend.ops, backend.main
    copy = timing.copy_bandwidth(backend, repeats=repeats, warmup=warmup)["median"]
    rng = np.random.default_rng(0)
    out = []
    for n, m, batch in shapes:
        delta = xp.asarray(rng.standard_normal((n, batch)), dtype=dtype)
        a = xp.asarray(rng.standard_normal((m, batch)), dtype=dtype)
        ours, theirs = xp.empty((n, m), dtype=dtype), xp.empty((n, m), dtype=dtype)
        backend.synchronize()  # the uploads ran on CuPy's default stream, which main does not wait for
        a_t = a.T
        implementations = (("ours", lambda: backend.launch(main, "nabla_w", ops.nabla_w, ours, delta, a)),
                           ("matmul", lambda: backend.launch(main, "matmul", partial(xp.matmul, out=theirs),
                                                             delta, a_t)))
        kernel = "outer" if batch == 1 else "rank_update"
        bytes_moved = traffic.kernel_bytes(kernel, n, m, batch, np.dtype(dtype).itemsize)
        shape_rows = []
        for name, fn in implementations:
            ms = timing.summary(timing.measure(backend, fn, repeats, warmup))
            shape_rows.append({"n": n, "m": m, "B": batch, "dtype": dtype, "impl": name, "ms": ms,
                               "gbps": bytes_moved / (ms["median"] * 1e6), "copy_gbps": copy})
        tolerance = 1e-4 if dtype == "float32" else 1e-10
        error = float(xp.max(xp.abs(ours - theirs))) / max(float(xp.max(xp.abs(theirs))), 1e-30)
        if not error <= tolerance:  # a NaN fails too
            raise AssertionError(f"nabla_w differs from matmul at {(n, m, batch)}: relative error {error:.2e}")
        out += [{**row, "error": error} for row in shape_rows]
    return out


def text(results):
    lines = ["     n      m     B  impl        ms [p20-p80]           GB/s   of copy"]
    for r in results:
        ms = r["ms"]
        lines.append(f"{r['n']:>6} {r['m']:>6} {r['B']:>5}  {r['impl']:<6}  {ms['median']:.4f} "
                     f"[{ms['p20']:.4f}-{ms['p80']:.4f}]  {r['gbps']:>8.1f}  {100 * r['gbps'] / r['copy_gbps']:>6.1f}%")
    lines.append(f"copy: {results[0]['copy_gbps']:.1f} GB/s (read + write of a 128 MiB array)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--shapes", default=None, help="n:m:B,... (default: a fixed set)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    shapes = SHAPES if args.shapes is None else [tuple(map(int, s.split(":"))) for s in args.shapes.split(",")]
    with get_backend(args.backend) as backend:
        results = rows(backend, shapes, args.dtype, args.repeats)
    print(text(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
