"""A DagNet's forward solvers and backward schedules against its sequential order, on the CPU: its standard grid.

    python profiling/dag_bench.py --repeats 7                # N 16,64,256  D 8,32,128  B 1,8: about a minute
    python profiling/dag_bench.py --sizes 16 --depths 8 --batch 1

``leapfrog-bench --model dag`` (``leapfrog_gpu.tools.bench.dag``: the networks, the rows and what they mean),
every option of it taken as it is, on the NumPy backend unless ``--backend`` says otherwise, with the forward
pass in the same alternation: node by node (the forward's ``sequential`` row, its baseline), by
``ForwardJacobi()`` and by ``ForwardNewton()`` (a block solver, held to ``--memory-limit`` and
``--max-block-depth`` as the backward's are), each with the rounds, sweeps or iterations, flops and memory it
reports. The records go to ``results/dag_bench_cpu_<UTC date>.json`` unless ``--json`` says otherwise.
"""

import datetime
import sys
from pathlib import Path

from leapfrog_gpu.dag.forward import ForwardJacobi, ForwardNewton, forward_counters
from leapfrog_gpu.tools.bench import dag as bench_dag, runner

HERE = Path(__file__).resolve().parent
PROG = "python profiling/dag_bench.py"
RECORDS, GRID, ABOUT, HEAD, work, start, heading, format_row = (
    bench_dag.RECORDS, bench_dag.GRID, bench_dag.ABOUT, bench_dag.HEAD, bench_dag.work, bench_dag.start,
    bench_dag.heading, bench_dag.format_row)
"""What this suite of ``runner`` takes of ``leapfrog-bench --model dag``'s (``bench.dag``) as it is."""
FOOT = bench_dag.FOOT + "\nforward: its speed-up over the forward pass node by node (its sequential row)"


def parser():
    """``leapfrog-bench --model dag``'s options."""
    p = bench_dag.parser()
    p.prog, p.description = PROG, __doc__.split("\n\n")[0]
    return p


def case(args, backend, key):
    """The network's backward rows (``leapfrog-bench --model dag``'s) and forward rows, in one alternation."""
    return bench_dag.measure(**key, backend=backend, k=args.k, repeats=args.repeats, warmup=args.warmup,
                             memory_limit=int(args.memory_limit_mib * 2**20), max_block_depth=args.max_block_depth,
                             dtype=args.dtype, names=args.schedule,
                             more=forward_rows(int(args.memory_limit_mib * 2**20)))


def forward_rows(memory_limit):
    """``more`` of ``bench_dag.measure``: the forward pass node by node, by ``ForwardJacobi()`` and by
    ``ForwardNewton(memory_limit=...)``."""
    def made(net, x, y):
        counters = forward_counters(net, x.shape[1])
        node_by_node = {"rounds": counters["sequential_rounds"], "flops": counters["sequential_flops"],
                        "bytes": counters["sequential_bytes"], "memory_bytes": 0, **counters}

        def sequential():
            net.feedforward(x)
            return dict(node_by_node)

        def solved(solver):
            def call():
                net.feedforward(x, solver=solver)
                return dict(solver.stats)

            return call

        jacobi, newton = ForwardJacobi(), ForwardNewton(memory_limit=memory_limit)
        return [("forward", "sequential", None, sequential), ("forward", "forward-jacobi", jacobi, solved(jacobi)),
                ("forward", "forward-newton", newton, solved(newton))]

    return made


def main(argv=None):
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    out = HERE / "results" / f"dag_bench_cpu_{date}.json"
    return runner.main(sys.modules[__name__], ["--backend", "numpy", "--json", str(out),
                                               *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
