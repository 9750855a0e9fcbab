"""The device check's first minute: does the GPU path work at all?

    python profiling/smoke.py [--summary FILE]

Imports CuPy and the package, names the device, runs one kernel of each family of ``kernels/``
(elementwise.cu, nabla_w.cu, nabla_b.cu, chain.cu) against its NumPy twin, then one eager and one graph
SGD step of a small network (float64, Leapfrog(2), the chain on our kernels) against NumPy's step. The
eager and the graph step must agree to the bit (they run the same kernels); against NumPy's step,
whose products are BLAS's, in another order of summation, they must agree to a relative 1e-10.

Each check prints one line, appended at once to ``--summary`` too, so that a run killed later keeps
them; a check that fails says why and the next still runs. Exit status 1 if any failed.
"""

import argparse
import sys
import time

import numpy as np

from leapfrog_gpu import MLP, Leapfrog, get_backend
from leapfrog_gpu.backends import ops_numpy
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import writing

SIZES = [33, 64, 31, 10]
TOLERANCE = 1e-10


def kernel_checks(cupy):
    """``{name: fn}``: each runs one kernel family on ``cupy`` and its NumPy twin, returning the relative
    difference."""
    from leapfrog_gpu.backends.ops_cuda import CudaOps

    ops, rng = CudaOps(cupy, "kernels"), np.random.default_rng(0)

    def arrays(*shapes):
        host = [rng.standard_normal(shape) for shape in shapes]
        return host, [cupy.asarray(x) for x in host]

    def compare(run, outputs, shapes):
        host, device = arrays(*shapes)
        outs_host = [np.full(shape, np.nan) for shape in outputs]
        outs_device = [cupy.asarray(x) for x in outs_host]
        run(ops_numpy, outs_host, host)
        run(ops, outs_device, device)
        cupy.cuda.Device().synchronize()
        return max(_relative(d.get(), h) for d, h in zip(outs_device, outs_host))

    n, m, batch = 65, 33, 7
    return {
        "elementwise (bias_activation)": lambda: compare(  # z is read (w a_prev), then overwritten (+ b)
            lambda o, out, x: _bias_activation(o, out, *x), [(n, batch)] * 3, [(n,), (n, batch)]),
        "nabla_w (rank_update)": lambda: compare(
            lambda o, out, x: o.nabla_w(out[0], *x), [(n, m)], [(n, batch), (m, batch)]),
        "nabla_b (bias_sum)": lambda: compare(lambda o, out, x: o.nabla_b(out[0], *x), [(n,)], [(n, batch)]),
        "chain (forward_gemm)": lambda: compare(
            lambda o, out, x: o.forward(*out, *x, "tanh"), [(n, batch)] * 3, [(n, m), (m, batch), (n,)]),
    }


def _bias_activation(ops, out, b, z):
    out[0][...] = z
    ops.bias_activation(*out, b, "tanh")


def steps(cupy):
    """One eager and one graph step on CuPy (the second graph step launches the captured graph), and the
    same steps on NumPy: the largest relative difference of eager against graph, and of graph against
    NumPy."""
    rng = np.random.default_rng(1)
    x, y = rng.random((SIZES[0], 5)), rng.uniform(0.05, 0.95, (SIZES[-1], 5))
    taken = {}
    for name, backend, graph in (("numpy", get_backend("numpy"), False), ("eager", get_backend("cupy", chain="kernels"), False),
                                 ("graph", get_backend("cupy", chain="kernels"), True)):
        with backend, MLP(SIZES, activation="tanh", dtype="float64", seed=3, backend=backend) as net:
            for eta in (0.5, 0.2):  # on the graph: the capture's step, then a launch
                net.sgd_step(x, y, eta, Leapfrog(2), graph=graph)
            net.synchronize()
            taken[name] = [np.asarray(p.get() if hasattr(p, "get") else p) for p in net.weights + net.biases]
    bitwise = all(np.array_equal(p, q) for p, q in zip(taken["eager"], taken["graph"]))
    return bitwise, max(_relative(p, q) for p, q in zip(taken["graph"], taken["numpy"]))


def _relative(got, want):
    scale = max(float(np.max(np.abs(want))), 1e-300)
    difference = float(np.max(np.abs(got - want)))
    return difference / scale if np.isfinite(got).all() else float("inf")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", metavar="FILE", help="append each check's line to FILE as it is done")
    args = parser.parse_args(argv)
    failed = []

    def say(check, ok, text):
        line = f"smoke check: {check}: {'ok' if ok else 'FAILED'}{': ' if text else ''}{text}"
        print(line, flush=True)
        if args.summary:
            with writing(f"--summary {args.summary}"), open(args.summary, "a", encoding="utf-8") as out:
                out.write(line + "\n")
        if not ok:
            failed.append(check)

    def check(name, fn):
        started = time.perf_counter()
        try:
            ok, text = fn()
        except Exception as error:  # noqa: BLE001 - said, and the next check runs
            ok, text = False, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        say(name, ok, f"{text} ({time.perf_counter() - started:.1f} s)")

    try:
        import cupy

        with get_backend("cupy") as backend:
            say("device", True, f"{backend.device_name}, {backend!r}")
    except Exception as error:  # noqa: BLE001 - nothing else can run
        say("device", False, f"{type(error).__name__}: {error}")
        return 1
    def kernel(fn):
        error = fn()
        return error <= TOLERANCE, f"relative difference {error:.1e} from its NumPy twin"

    for name, fn in kernel_checks(cupy).items():
        check(name, lambda fn=fn: kernel(fn))

    def step():
        bitwise, error = steps(cupy)
        return bitwise and error <= TOLERANCE, (f"eager and graph {'bitwise equal' if bitwise else 'DIFFER'}; "
                                               f"graph against NumPy's step: relative {error:.1e}")

    check("eager and graph step (float64, Leapfrog(2))", step)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(guarded(main, "smoke.py"))
