"""``leapfrog-bench --model rnn``: the recurrent network's backward pass under each schedule, against BPTT
and PyTorch's ``nn.RNN``.

For every (N, tau, B), ``RNN([N] * L, output="every")`` runs its backward pass (the chain and the weight
gradients) under BPTT(), Leapfrog(k), Wavefront(k), TimeScan(k) and NaumovRNN(k), interleaved, after a
warm-up (``RNN.time_backward``); a row gives the median, the ratio to BPTT's median in the same run, the
dependent rounds and the flops of each chain against BPTT's. A schedule whose predicted chain work exceeds
``max_gflop`` is skipped, one whose buffers exceed ``memory_limit`` is refused by its own check; both show
as rows. PyTorch's ``nn.RNN`` (tanh, L-2 layers, bias_hh held at zero, a Linear output at every step; on
the GPU cuDNN's) is timed on the same batch and parameters: ``loss.backward()`` alone, after a forward
pass under autograd.
"""

import statistics
import time

import numpy as np

from ..backends import get_backend
from ..rnn import RNN
from ..rnn_scans import DEFAULT_MEMORY_LIMIT, NaumovRNN, TimeScan
from ..rnn_schedules import BPTT, Wavefront, resolve
from ..schedules import Leapfrog

HEADER = (f"{'N':>4} {'tau':>5} {'B':>3}  {'schedule':<13} {'median ms':>10} {'vs bptt':>8} {'rounds':>7} "
          f"{'flops/bptt':>10}")


def schedules(k, memory_limit=DEFAULT_MEMORY_LIMIT):
    """The schedules measured, by name."""
    return {"bptt": BPTT(), f"leapfrog({k})": Leapfrog(k), "wavefront": Wavefront(k=k),
            "time-scan": TimeScan(k=k, memory_limit=memory_limit),
            "naumov-rnn": NaumovRNN(k=k, memory_limit=memory_limit)}


def sequences(N, tau, B, dtype="float32", seed=0):
    """x (tau, N, B) standard normal and targets at every step in (0.05, 0.95)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((tau, N, B)).astype(dtype), rng.uniform(0.05, 0.95, (tau, N, B)).astype(dtype))


def torch_backward(torch, net, x, y, repeats, device="cpu"):
    """Median seconds of ``loss.backward()`` of ``net`` written as torch.nn.RNN plus a Linear output layer."""
    L, N = net.L, net.sizes[0]
    rnn = torch.nn.RNN(N, N, num_layers=L - 2, nonlinearity="tanh", dtype=getattr(torch, net.dtype))
    out = torch.nn.Linear(N, net.sizes[-1], dtype=getattr(torch, net.dtype))
    weights, recurrent, biases = (_host(a) for a in (net.weights, net.recurrent, net.biases))
    with torch.no_grad():
        for i in range(L - 2):
            getattr(rnn, f"weight_ih_l{i}").copy_(torch.from_numpy(weights[i]))
            getattr(rnn, f"weight_hh_l{i}").copy_(torch.from_numpy(recurrent[i]))
            getattr(rnn, f"bias_ih_l{i}").copy_(torch.from_numpy(biases[i]))
            getattr(rnn, f"bias_hh_l{i}").zero_()
        out.weight.copy_(torch.from_numpy(weights[-1]))
        out.bias.copy_(torch.from_numpy(biases[-1]))
    rnn, out = rnn.to(device), out.to(device)
    xt = torch.from_numpy(x.transpose(0, 2, 1).copy()).to(device)
    yt = torch.from_numpy(y.transpose(0, 2, 1).copy()).to(device)
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(repeats + 1):  # the first is the warm-up
        for parameter in (*rnn.parameters(), *out.parameters()):
            parameter.grad = None
        states, _ = rnn(xt)
        loss = 0.5 * ((torch.tanh(out(states)) - yt) ** 2).sum()
        synchronize()
        start = time.perf_counter()
        loss.backward()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def _host(arrays):
    return [a.get() if hasattr(a, "get") else a for a in arrays]


def measure(N, tau, B, L=4, k=2, repeats=5, dtype="float32", backend="numpy", max_gflop=3.0,
            memory_limit=DEFAULT_MEMORY_LIMIT, torch=None, blas_threads=None):
    """The rows of one (N, tau, B): a dict per schedule (and ``"torch nn.RNN"`` when ``torch``, the module,
    is given) with ``median_s`` and ``ratio`` (to BPTT) and the schedule's ``stats``, or ``refused``."""
    sizes, chosen, refused = [N] * L, {}, {}
    itemsize = np.dtype(dtype).itemsize
    for name, schedule in schedules(k, memory_limit).items():
        flops = resolve(schedule).counters(sizes, tau, B, itemsize)["flops"]
        if flops > max_gflop * 1e9:
            refused[name] = f"skipped: {flops / 1e9:.1f} GFLOP over the budget of {max_gflop:g}"
        else:
            chosen[name] = schedule
    options = {"blas_threads": blas_threads} if backend == "numpy" and blas_threads else {}
    with get_backend(backend, **options) as device, RNN(sizes, output="every", dtype=dtype, backend=device) as net:
        x, y = sequences(N, tau, B, dtype)
        results = net.time_backward(x, y, chosen, repeats=repeats)
        if torch is not None:
            where = "cuda" if device.name == "cupy" and torch.cuda.is_available() else "cpu"
            results["torch nn.RNN"] = {"median_s": torch_backward(torch, net, x, y, repeats, where)}
    results.update({name: {"refused": why} for name, why in refused.items()})
    base = results["bptt"]["median_s"]
    rows = []
    for name in [*schedules(k), "torch nn.RNN"]:
        if name in results:
            row = {"N": N, "tau": tau, "B": B, "L": L, "schedule": name, "repeats": repeats, **results[name]}
            if "median_s" in row:
                row["ratio"] = row["median_s"] / base
            rows.append(row)
    return rows


def format_row(row):
    """One line of the table under ``HEADER``."""
    head = f"{row['N']:>4} {row['tau']:>5} {row['B']:>3}  {row['schedule']:<13}"
    if "median_s" not in row:
        return f"{head} {row['refused'][:80]}"
    flops = f"{row['flops'] / row['sequential_flops']:10.2f}" if "flops" in row else f"{'':>10}"
    return f"{head} {row['median_s'] * 1e3:>10.3f} {row['ratio']:>8.2f} {row.get('rounds', ''):>7} {flops}"


def run(grid, report=print, **options):
    """Measure every (N, tau, B) of ``grid`` (an iterable of triples), printing each row as it comes."""
    report(HEADER)
    report("-" * len(HEADER))
    rows = []
    for N, tau, B in grid:
        for row in measure(N, tau, B, **options):
            report(format_row(row))
            rows.append(row)
    return rows
