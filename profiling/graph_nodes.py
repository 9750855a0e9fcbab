"""The cost of a kernel node in a CUDA graph, measured: graphs of n empty kernels, each launched and timed
on the main stream; a node's cost is the slope of the median time over n, the intercept the graph's
launch (``kernel_model.NODE`` stands in for the slope until this measures it).

    python profiling/graph_nodes.py [--backend cupy] [--repeats 20]
"""

import sys

import numpy as np

from leapfrog_gpu import get_backend
from leapfrog_gpu.backends import timing
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import Parser, integer
from card import refuse_without_gpu

EMPTY = 'extern "C" __global__ void empty() {}\n'
COUNTS = (1, 16, 64, 256)


def node_cost(backend, counts=COUNTS, repeats=20, warmup=3):
    """``{"counts", "us", "node_us", "launch_us"}``: the median us of each graph of ``counts`` empty
    kernels, and the least-squares line through them (its slope a node, its intercept the launch)."""
    xp, stream = backend.xp, backend.main
    kernel = xp.RawModule(code=EMPTY, options=()).get_function("empty")
    kernel((1,), (32,), (), stream=stream)  # loaded outside the capture
    backend.synchronize()
    medians = []
    for n in counts:
        stream.begin_capture(mode=xp.cuda.runtime.streamCaptureModeThreadLocal)
        for _ in range(n):
            kernel((1,), (32,), (), stream=stream)
        graph = stream.end_capture()
        ms = timing.measure(backend, lambda: graph.launch(stream), repeats, warmup)  # noqa: B023 - used at once
        medians.append(1e3 * float(np.median(ms)))
    slope, intercept = np.polyfit(counts, medians, 1)
    return {"counts": list(counts), "us": medians, "node_us": float(slope), "launch_us": float(intercept)}


def line(cost):
    """One line: a node's cost, the launch, and the graphs it comes from."""
    graphs = ", ".join(f"{n}: {us:.1f}" for n, us in zip(cost["counts"], cost["us"]))
    return (f"graph node: {cost['node_us']:.2f} us a node, {cost['launch_us']:.1f} us a launch "
            f"(empty-kernel graphs, nodes: us = {graphs})")


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("auto", "cupy"), default="cupy")
    parser.add_argument("--repeats", type=integer(1), default=20)
    args = parser.parse_args(argv)
    refuse_without_gpu(parser, "this script (graphs of empty kernels, on the device)")
    with get_backend(args.backend) as backend:
        print(line(node_cost(backend, repeats=args.repeats)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "graph_nodes.py"))
