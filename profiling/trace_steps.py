"""Training steps for a trace: warm up, then ``--steps`` sequential and ``--steps`` leapfrog steps
inside the CUDA profiler's capture range (``nsys profile --capture-range=cudaProfilerApi``).

    nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \\
        -o trace python profiling/trace_steps.py --sizes 1024 --layers 32 --batch 32 --k 2

NVTX ranges: ``sequential`` and ``leapfrog`` around each phase, and the library's own (forward,
backward, update, each launch) when a profiler has injected itself.
"""

import argparse

import numpy as np

from leapfrog_gpu import MLP, Leapfrog, Sequential, annotate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, default=1024, help="width N")
    parser.add_argument("--layers", type=int, default=32, help="layers L")
    parser.add_argument("--batch", type=int, default=32, help="batch size B")
    parser.add_argument("--k", type=int, default=2, help="worker streams")
    parser.add_argument("--steps", type=int, default=10, help="steps per schedule inside the capture range")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)

    import cupyx.profiler

    rng = np.random.default_rng(0)
    x, y = rng.random((args.sizes, args.batch)), rng.random((args.sizes, args.batch))
    with MLP([args.sizes] * args.layers, dtype=args.dtype, backend="cupy") as net:
        schedules = (("sequential", Sequential()), ("leapfrog", Leapfrog(args.k)))
        for _, schedule in schedules:  # warm-up: compile the kernels, allocate the plan
            for _ in range(3):
                net.sgd_step(x, y, 1e-3, schedule)
        net.synchronize()
        with cupyx.profiler.profile():
            for name, schedule in schedules:
                with annotate.range(name):
                    for _ in range(args.steps):
                        net.sgd_step(x, y, 1e-3, schedule)
                    net.synchronize()
    print(f"traced {args.steps} sequential and {args.steps} Leapfrog(k={args.k}) steps "
          f"(NVTX by {annotate.PROVIDER or 'nothing: ranges off'})")


if __name__ == "__main__":
    main()
