"""The products of a CPU step on their own: ours (the OpenBLAS of ``scipy-openblas32``, as ``ops_numpy``
calls it) against SciPy's bundled OpenBLAS and PyTorch's BLAS, and what it costs to mix NumPy's BLAS
with ours; and Adam's update beside them, so that ``--threads 1`` gives what a step of either costs in
thread time.

    python profiling/cpu_gemms.py --size 1024 --layers 16 --batch 1,64 --json gemms.json

Per batch size B, the median time per layer, over ``--layers - 1`` weight matrices of N x N float32
swept in turn, of each product a step makes:
- ``ours``: (2) ``z = w a``, (5) ``delta = w^T delta_next``, and the update ``w -= eta delta a^T``
  (``rank_update``: ger at B = 1, gemm with beta = 1 above), on ``(n, B)`` arrays in the order of the
  backend's plans; ``(2) rows``, the product of (2) into a row-major array, where ``ops_numpy.forward`` makes
  it at B > 1; (7) ``nabla_w = delta a^T`` and ``Adam().apply`` by it (one compiled pass over w,
  nabla_w and the two moments);
- ``scipy``: the same three through SciPy's wrappers (``scipy.linalg.blas``), on the OpenBLAS SciPy
  bundles;
- ``torch``: the same three in PyTorch's layout (samples are rows): ``x w^T``, ``g w`` and ``g^T x``, and
  ``torch.optim.Adam(fused=True)``'s step over the ``--layers - 1`` matrices;
- ``pools-mixed``, ``pools-one``: one forward pass of (2) then one sweep of ``backward_update``, per
  pass, the forward on NumPy's ``matmul`` (``numpy_then_ours``) or on our BLAS like the sweep
  (``ours_only``);
- ``beside``: ours (5) then (7) on one thread, alone and while a second thread makes the same products or
  Adam's update on matrices of its own: what two streams running at once cost each other.
Each side runs in a process of its own, so that no thread pool of one meets the other's, and the sides
take turns for ``--rounds`` rounds, so that a drift of the machine's load reaches all of them alike.
"""

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import runner
from leapfrog_gpu.tools.cli import Parser, integers, output_refusal, path

SIDES = ("ours", "scipy", "torch", "pools-mixed", "pools-one", "beside")


def main(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1024, help="N, the width of every layer (default 1024)")
    p.add_argument("--layers", type=int, default=16, help="L: L - 1 weight matrices (default 16)")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[1, 64], metavar="B[,B...]",
                   help="batch sizes B, comma-separated (default 1,64)")
    p.add_argument("--threads", type=int, default=2, help="BLAS threads, and PyTorch's (default 2)")
    p.add_argument("--repeats", type=int, default=10, help="timed sweeps per round (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="turns of each side (default 3)")
    p.add_argument("--json", type=path, metavar="FILE", help="write the medians to FILE")
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one side's process
    args = p.parse_args(argv)
    if args.size < 1 or args.layers < 2 or args.threads < 1 or args.repeats < 1 or args.rounds < 1:
        p.error("--size, --threads, --repeats and --rounds must be >= 1, --layers >= 2")
    if args.json and (why := output_refusal("--json", args.json)):
        p.error(why)
    if args.side:
        print(json.dumps({str(b): SIDE[args.side](args.size, args.layers - 1, b, args.threads, args.repeats)
                          for b in args.batch}))
        return 0
    samples = {}
    for _ in range(args.rounds):
        for side in SIDES:
            done = subprocess.run([sys.executable, __file__, "--side", side, *_options(args)], capture_output=True,
                                  text=True)
            if done.returncode:
                sys.exit(f"cpu_gemms.py: the {side} side failed:\n{done.stderr}")
            for b, ops in json.loads(done.stdout).items():
                for name, times in ops.items():
                    samples.setdefault(b, {}).setdefault(side, {}).setdefault(name, []).extend(times)
    medians = {b: {side: {name: float(np.median(t)) for name, t in ops.items()} for side, ops in sides.items()}
               for b, sides in samples.items()}
    for b, sides in medians.items():
        print(f"N={args.size} B={b}, ms per layer (a pass for pools):",
              "; ".join(f"{side} " + ", ".join(f"{name} {ms:.3f}" for name, ms in ops.items())
                        for side, ops in sides.items()))
    if args.json:
        command = " ".join(["python profiling/cpu_gemms.py", *_options(args), "--rounds", str(args.rounds)])
        runner.write_json(args.json, {**runner.header(command, "numpy"), "ms": medians})
    return 0


def _options(args):
    return ["--size", str(args.size), "--layers", str(args.layers), "--batch", ",".join(map(str, args.batch)),
            "--threads", str(args.threads), "--repeats", str(args.repeats)]


def _per_layer(fns, count, repeats):
    """``{name: [ms per layer, ...]}``: ``repeats`` timed calls of each of ``fns`` in turn, after one untimed."""
    times = {name: [] for name in fns}
    for i in range(repeats + 1):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if i:
                times[name].append((time.perf_counter() - start) * 1e3 / count)
    return times


def _weights(n, count, batch):
    rng = np.random.default_rng(0)
    w = [rng.standard_normal((n, n), dtype=np.float32) / n**0.5 for _ in range(count)]  # float32 still
    return w, rng.random((n, batch), dtype=np.float32), rng.standard_normal((n, batch), dtype=np.float32)


class _Ours:
    """Our side's arrays, ``--layers - 1`` weight matrices with their Adam moments, and in ``ops`` the step's
    ops on them as calls of no argument, each a sweep over the matrices."""

    def __init__(self, n, count, batch):
        from leapfrog_gpu import Adam
        from leapfrog_gpu.backends import host_blas, ops_numpy
        from leapfrog_gpu.backends.host import NumpyBackend
        from leapfrog_gpu.core.controls import Controls

        host_blas.load()
        w, a, delta = _weights(n, count, batch)
        a, delta = (np.asarray(x, order=NumpyBackend.batch_order) for x in (a, delta))
        out, rows, controls = np.empty_like(a), np.empty(a.shape, np.float32), np.array([1e-6, 0], np.float32)
        nabla, scratch = np.empty((n, n), np.float32), np.empty(ops_numpy.SCRATCH, np.float32)
        adam = Adam()
        moments = [{slot: np.zeros_like(m) for slot in adam.SLOTS} for m in w]
        with NumpyBackend(mode="serial") as backend:  # the step's controls as a network's: in its dtype, set by it
            adam_controls = Controls(backend, np.float32)
            adam_controls.set_step(adam.controls(batch, 1))
        self.ops = {
            "(2)": lambda: [host_blas.matmul(out, m, a) for m in w],
            "(2) rows": lambda: [host_blas.matmul(rows, m, a) for m in w],
            "(5)": lambda: [host_blas.matmul(out, m.T, delta) for m in w],
            "update": lambda: [ops_numpy.rank_update(m, delta, a, controls) for m in w],
            "(7)": lambda: [ops_numpy.nabla_w(nabla, delta, a) for m in w],
            "adam": lambda: [adam.apply(ops_numpy, m, nabla, state, adam_controls.array, scratch)
                             for m, state in zip(w, moments)]}

    def backward(self):
        """(5) then (7) over the matrices, the products a leapfrog step's chain and worker make."""
        self.ops["(5)"]()
        self.ops["(7)"]()


def ours(n, count, batch, threads, repeats):
    from threadpoolctl import threadpool_limits

    ops = _Ours(n, count, batch).ops  # our BLAS loaded first: a limit reaches only the libraries loaded by then
    with threadpool_limits(threads, user_api="blas"):
        return _per_layer(ops, count, repeats)


def beside(n, count, batch, threads, repeats):
    """Our (5) and (7) on one thread: ``alone``, and while a second thread runs, on matrices of its own, the
    same products (``beside_products``) or Adam's update (``beside_adam``, bound by memory). One BLAS thread
    each, as a leapfrog step's streams run them, whatever ``threads``."""
    import threading

    from threadpoolctl import threadpool_limits

    mine, other = _Ours(n, count, batch), _Ours(n, count, batch)

    def repeat(load, stop):
        while not stop.is_set():
            load()

    with threadpool_limits(1, user_api="blas"):
        times = _per_layer({"alone": mine.backward}, count, repeats)
        for name, load in {"beside_products": other.backward, "beside_adam": other.ops["adam"]}.items():
            stop = threading.Event()
            thread = threading.Thread(target=repeat, args=(load, stop))
            thread.start()
            times[name] = _per_layer({name: mine.backward}, count, repeats)[name]
            stop.set()
            thread.join()
    return times


def scipy_side(n, count, batch, threads, repeats):
    from scipy.linalg import blas
    from threadpoolctl import threadpool_limits

    w, a, delta = _weights(n, count, batch)
    out, eta = np.empty_like(a), 1e-6
    if batch == 1:  # on the Fortran views, as host_blas takes them
        products = {"(2)": lambda m: blas.sgemv(1.0, m.T, a[:, 0], y=out[:, 0], trans=1, overwrite_y=True),
                    "(5)": lambda m: blas.sgemv(1.0, m.T, delta[:, 0], y=out[:, 0], overwrite_y=True),
                    "update": lambda m: blas.sger(-eta, a[:, 0], delta[:, 0], a=m.T, overwrite_a=True)}
    else:
        products = {"(2)": lambda m: blas.sgemm(1.0, a.T, m.T, c=out.T, overwrite_c=True),
                    "(5)": lambda m: blas.sgemm(1.0, delta.T, m.T, c=out.T, trans_b=1, overwrite_c=True),
                    "update": lambda m: blas.sgemm(-eta, a.T, delta.T, c=m.T, trans_a=1, beta=1.0, overwrite_c=True)}
    with threadpool_limits(threads, user_api="blas"):
        return _per_layer({name: lambda f=f: [f(m) for m in w] for name, f in products.items()}, count, repeats)


def torch_side(n, count, batch, threads, repeats):
    import torch

    torch.set_num_threads(threads)
    w, a, delta = _weights(n, count, batch)
    w = [torch.from_numpy(m) for m in w]
    x, g = torch.from_numpy(np.ascontiguousarray(a.T)), torch.from_numpy(np.ascontiguousarray(delta.T))
    out, grad = torch.empty(batch, n), torch.empty(n, n)
    params = [torch.nn.Parameter(m) for m in w]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    adam = torch.optim.Adam(params, fused=True)
    return _per_layer({
        "(2)": lambda: [torch.mm(x, m.T, out=out) for m in w],
        "(5)": lambda: [torch.mm(g, m, out=out) for m in w],
        "grad_w": lambda: [torch.mm(g.T, x, out=grad) for m in w],
        "adam_fused": adam.step}, count, repeats)


def pools(mixed):
    """The pass of ``pools``, its forward on NumPy's ``matmul`` if ``mixed``, else on our BLAS: one
    side each, since within one process the pool that NumPy's calls woke would slow both."""

    def side(n, count, batch, threads, repeats):
        from threadpoolctl import threadpool_limits

        from leapfrog_gpu.backends import host_blas, ops_numpy

        host_blas.load()
        w, a, delta = _weights(n, count, batch)
        z, d, sp, controls = np.empty_like(a), np.empty_like(a), np.ones_like(a), np.array([1e-6, 0], np.float32)

        def one_pass():
            for m in w:
                if mixed:
                    np.matmul(m, a, out=z)
                else:
                    host_blas.matmul(z, m, a)
            for m in reversed(w):
                ops_numpy.backward_update(d, m, delta, sp, a, controls)

        with threadpool_limits(threads, user_api="blas"):
            return _per_layer({"numpy_then_ours" if mixed else "ours_only": one_pass}, 1, repeats)

    return side


SIDE = {"ours": ours, "scipy": scipy_side, "torch": torch_side, "pools-mixed": pools(True), "pools-one": pools(False),
        "beside": beside}

if __name__ == "__main__":
    sys.exit(guarded(main, "cpu_gemms.py"))
