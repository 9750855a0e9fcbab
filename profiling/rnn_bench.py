"""The recurrent network's backward pass under each schedule, against BPTT and PyTorch's nn.RNN.

    python profiling/rnn_bench.py                        # the grid of the issue, about 5 minutes on a CPU
    python profiling/rnn_bench.py --N 8 --tau 16,64 --B 1 --repeats 3

For every (N, tau, B) of the grid, ``RNN([N] * L, output="every")`` runs its backward pass (BPTT with the
weight gradients) under BPTT(), Leapfrog(k), Wavefront(k), TimeScan(k) and NaumovRNN(k), interleaved,
``--repeats`` times each after a warm-up (``--repeats-long`` at the longest tau); the table gives the
median, the ratio to BPTT's median in the same run, the dependent rounds and the flops of each chain
against BPTT's. A schedule whose predicted chain work exceeds ``--max-gflop`` is skipped, one whose
buffers exceed ``--memory-limit`` is refused by the schedule itself; both show in the table. PyTorch's
``nn.RNN`` (tanh, L-2 layers, bias_hh held at zero, a Linear output at every step) is timed on the same
batch: ``loss.backward()`` alone, after a forward pass under autograd. Writes the rows as JSON under
profiling/results/ with the date in the file name.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from leapfrog_gpu import BPTT, RNN, Leapfrog, NaumovRNN, TimeScan, Wavefront
from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.rnn_schedules import resolve

HERE = Path(__file__).resolve().parent


def schedules(k, memory_limit):
    return {"bptt": BPTT(), f"leapfrog({k})": Leapfrog(k), "wavefront": Wavefront(k=k),
            "time-scan": TimeScan(k=k, memory_limit=memory_limit),
            "naumov-rnn": NaumovRNN(k=k, memory_limit=memory_limit)}


def batch(N, tau, B, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((tau, N, B)).astype(np.float32),
            rng.uniform(0.05, 0.95, (tau, N, B)).astype(np.float32))


def torch_backward(torch, net, x, y, repeats):
    """Median seconds of loss.backward() of the same network as torch.nn.RNN plus a Linear output layer."""
    L, N = net.L, net.sizes[0]
    rnn = torch.nn.RNN(N, N, num_layers=L - 2, nonlinearity="tanh")
    out = torch.nn.Linear(N, N)
    weights, recurrent, biases = net.weights, net.recurrent, net.biases
    with torch.no_grad():
        for i in range(L - 2):
            getattr(rnn, f"weight_ih_l{i}").copy_(torch.from_numpy(weights[i]))
            getattr(rnn, f"weight_hh_l{i}").copy_(torch.from_numpy(recurrent[i]))
            getattr(rnn, f"bias_ih_l{i}").copy_(torch.from_numpy(biases[i]))
            getattr(rnn, f"bias_hh_l{i}").zero_()
        out.weight.copy_(torch.from_numpy(weights[-1]))
        out.bias.copy_(torch.from_numpy(biases[-1]))
    xt, yt = torch.from_numpy(x.transpose(0, 2, 1).copy()), torch.from_numpy(y.transpose(0, 2, 1).copy())
    times = []
    for _ in range(repeats + 1):  # the first is the warm-up
        for parameter in (*rnn.parameters(), *out.parameters()):
            parameter.grad = None
        states, _ = rnn(xt)
        loss = 0.5 * ((torch.tanh(out(states)) - yt) ** 2).sum()
        start = time.perf_counter()
        loss.backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def run(args):
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rows, itemsize = [], 4
    header = (f"{'N':>4} {'tau':>5} {'B':>2}  {'schedule':<12} {'median ms':>10} {'vs bptt':>8} {'rounds':>7} "
              f"{'flops/bptt':>10}")
    print(header)
    print("-" * len(header))
    for N in args.N:
        for tau in args.tau:
            for B in args.B:
                sizes = [N] * args.L
                chosen, skipped = {}, {}
                for name, schedule in schedules(args.k, args.memory_limit).items():
                    flops = resolve(schedule).counters(sizes, tau, B, itemsize)["flops"]
                    if flops > args.max_gflop * 1e9:
                        skipped[name] = f"skipped: {flops / 1e9:.1f} GFLOP over --max-gflop {args.max_gflop:g}"
                    else:
                        chosen[name] = schedule
                repeats = args.repeats_long if tau == max(args.tau) else args.repeats
                backend = get_backend("numpy", blas_threads=args.threads)
                with RNN(sizes, output="every", dtype="float32", backend=backend) as net:
                    x, y = batch(N, tau, B)
                    results = net.time_backward(x, y, chosen, repeats=repeats)
                    if torch is not None:
                        results["torch nn.RNN"] = {"median_s": torch_backward(torch, net, x, y, repeats)}
                results.update({name: {"refused": why} for name, why in skipped.items()})
                base = results["bptt"]["median_s"]
                for name in [*schedules(args.k, args.memory_limit), "torch nn.RNN"]:
                    result = results.get(name)
                    if result is None:
                        continue
                    row = {"N": N, "tau": tau, "B": B, "L": args.L, "schedule": name, "repeats": repeats, **result}
                    if "median_s" in result:
                        row["ratio"] = result["median_s"] / base
                        flops = result.get("flops")
                        ratio = f"{flops / result['sequential_flops']:10.2f}" if flops else f"{'':>10}"
                        print(f"{N:>4} {tau:>5} {B:>2}  {name:<12} {result['median_s'] * 1e3:>10.3f} "
                              f"{row['ratio']:>8.2f} {result.get('rounds', ''):>7} {ratio}")
                    else:
                        print(f"{N:>4} {tau:>5} {B:>2}  {name:<12} {result['refused'][:70]}")
                    rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731 - a comma-separated list of integers
    parser.add_argument("--N", type=ints, default=[8, 32, 128])
    parser.add_argument("--tau", type=ints, default=[16, 64, 256, 1024])
    parser.add_argument("--B", type=ints, default=[1, 8])
    parser.add_argument("--L", type=int, default=4)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--repeats-long", type=int, default=3, help="repeats at the longest tau")
    parser.add_argument("--max-gflop", type=float, default=3.0, help="skip a schedule whose chain does more")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads of NumPy and PyTorch's intra-op threads")
    parser.add_argument("--memory-limit", type=int, default=2**30)
    parser.add_argument("--out", type=Path, default=None, help="the JSON file (default: under profiling/results/)")
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    out = args.out or HERE / "results" / f"rnn_bench_cpu_{today}.json"
    start = time.perf_counter()
    rows = run(args)
    meta = {"date": today, "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "seconds": round(time.perf_counter() - start, 1), "dtype": "float32",
            "output": "every", "k": args.k, "max_gflop": args.max_gflop, "threads": args.threads,
            "load_average": list(os.getloadavg())}
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        meta["torch"] = None
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out} ({meta['seconds']} s)")


if __name__ == "__main__":
    main()
