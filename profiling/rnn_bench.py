"""The recurrent network's SGD step under each schedule, parallel in time, and PyTorch's nn.RNN, over the
standard grid: N in {4, 8, 16, 32, 128}, tau in {64, 256, 1024, 4096}, L = 4, B in {1, 8, 32} (about
half an hour on one CPU core).

    python profiling/rnn_bench.py
    python profiling/rnn_bench.py --N 8 --tau 64,256 --B 1 --repeats 3 --time step,backward
    python profiling/rnn_bench.py --deer --torch-threads 1,2 --repeats 3 --max-gflop 50

Each (N, tau, B) is measured by ``leapfrog_gpu.tools.bench.rnn.measure`` (the same as ``leapfrog-bench
--model rnn``): the steps of BPTT, Leapfrog(k), TimeScan, the step parallel in time (``TimeNewton``,
Newton and quasi-Newton, with TimeScan) and PyTorch's, interleaved, medians of ``--repeats`` repeats after
a warm-up each, ``--repeats-long`` at the longest tau of two or more. NumPy's BLAS and PyTorch both run ``--threads``
threads (one by default: on a shared machine more threads only wait for each other), ``--torch-threads``
PyTorch's step at each count too, a row each. ``--deer``: DEER's demo problem instead of the grid (``DEER``),
its rows named ``DEER step ...`` and marked ``"problem": "deer"``. Writes the rows as JSON under
profiling/results/ with the date in the file name (``-2``, ``-3`` ... after it where a run of the day wrote
it), or to ``--out``.
"""

import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import rnn as bench_rnn, torch_anchor
from leapfrog_gpu.tools.cli import (Parser, integer, integers, names, number, output_refusal, path, unused,
                                   written_whole)
from leapfrog_gpu.tools.schedules import names_type

HERE = Path(__file__).resolve().parent
DEER = {"N": [8, 32], "tau": [10000], "B": [16], "L": 3, "inputs": 2, "cell": "gru", "schedule": ["bptt"],
        "time": ["step"]}
"""DEER's demo problem (Lim et al., 2024), the options it sets: one GRU layer of N units on 2 inputs, 16
sequences of 10,000 steps; BPTT's step against the steps parallel in time (Newton's iterations) and PyTorch's."""


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--N", type=integers(1, "width"), default=[4, 8, 16, 32, 128])
    parser.add_argument("--tau", type=integers(1, "sequence length"), default=[64, 256, 1024, 4096])
    parser.add_argument("--B", type=integers(1, "batch size"), default=[1, 8, 32])
    parser.add_argument("--schedule", type=names_type("rnn"), default=["bptt", "leapfrog", "timescan"])
    parser.add_argument("--forward-solver", type=names(["newton", "quasi-newton"], "RNN forward solver"),
                        default=["newton", "quasi-newton"])
    parser.add_argument("--time", type=names(bench_rnn.PARTS, "part"), default=["step"],
                        help="step, backward, or both (step,backward)")
    parser.add_argument("--L", type=integer(3), default=4,
                        help="depth L: the input layer, L - 2 recurrent layers and the output layer (>= 3)")
    parser.add_argument("--k", type=integer(1), default=2, help="worker streams")
    parser.add_argument("--repeats", type=integer(1), help="repeats at each tau (default 15; 5 with --deer)")
    parser.add_argument("--repeats-long", type=integer(1), default=5,
                        help="repeats at the longest tau, where --tau gives two or more")
    parser.add_argument("--max-gflop", type=number(0, strict=True), default=3.0,
                        help="skip a schedule whose chain does more (> 0)")
    parser.add_argument("--threads", type=integer(1), default=1,
                        help="NumPy's BLAS threads and PyTorch's intra-op threads")
    parser.add_argument("--torch-threads", type=integers(1, "threads"), default=[],
                        help="PyTorch's step at each number of intra-op threads, a row each (default: --threads)")
    parser.add_argument("--cell", choices=("elman", "gru", "lstm"), default="elman", help="recurrent cell")
    parser.add_argument("--deer", action="store_true", help="DEER's demo problem instead of the grid: a GRU [2, N, "
                        "N], N = 8 and 32, B = 16, tau = 10,000; BPTT's step, the steps parallel in time and PyTorch's")
    parser.add_argument("--out", type=path, default=None,
                        help="the JSON file (default: profiling/results/rnn_bench_cpu_<date>.json, or where that file "
                             "is there, the first name free with -2, -3 ... before .json)")
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else unused(HERE / "results" / f"rnn_bench_cpu_{today}.json")
    if why := output_refusal("--out", out):
        parser.error(why)
    args.inputs = None
    args.repeats = args.repeats or (5 if args.deer else 15)
    if args.deer:
        given = [f"--{key}" for key in DEER if parser.get_default(key) is not None and
                 vars(args)[key] != parser.get_default(key)]
        if given:
            parser.error(f"--deer sets {', '.join(given)} itself: drop {'it' if len(given) == 1 else 'them'}")
        vars(args).update(DEER)
    torch, torch_note = None, torch_anchor.skipped(False)
    if torch_note is None:
        import torch

        torch.set_num_threads(args.threads)
    start = time.perf_counter()

    def write(rows):  # after every (N, tau, B), so that an interrupted run keeps what it measured
        meta = {"date": today, "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                "load_average": [round(v, 2) for v in os.getloadavg()], "python": platform.python_version(),
                "numpy": np.__version__, "torch": torch and torch.__version__, "threads": args.threads,
                "dtype": "float32", "output": "every", "k": args.k, "max_gflop": args.max_gflop,
                "schedules": args.schedule, "forward_solvers": args.forward_solver, "parts": args.time,
                "cell": args.cell, "problem": "deer" if args.deer else "grid",
                "seconds": round(time.perf_counter() - start, 1)}
        with written_whole(f"--out {out}", out) as written:
            written.write(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        return meta

    print(*bench_rnn.HEAD, sep="\n")
    rows = []
    for N in args.N:
        for tau in args.tau:
            for B in args.B:
                repeats = args.repeats_long if len(args.tau) > 1 and tau == max(args.tau) else args.repeats
                for row in bench_rnn.measure(N, tau, B, args.L, args.k, repeats, max_gflop=args.max_gflop,
                                             torch=torch, blas_threads=args.threads, names=args.schedule,
                                             solvers=args.forward_solver, parts=args.time, cell=args.cell,
                                             inputs=args.inputs, torch_threads=args.torch_threads):
                    if args.deer:
                        row = {**row, "problem": "deer"}
                    print(bench_rnn.format_row({**row, "schedule": ("DEER " if args.deer else "") + row["schedule"]}),
                          flush=True)
                    rows.append(row)
                meta = write(rows)
    if torch_note:
        print(torch_note)
    print(f"wrote {out} ({meta['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "rnn_bench.py"))
