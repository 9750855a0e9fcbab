"""Where does Naumov's log-depth scan beat the sequential chain? Time the backward pass over a grid.

    nsys profile -t cuda,nvtx -o naumov --force-overwrite true \\
        python profiling/naumov_crossover.py --backend cupy --L 32,128 --N 16,64 --B 1

For every (L, N, B) of the grid, ``MLP([N] * L)`` runs its backward pass (4)-(7) under naumov-scan,
naumov-jacobi (from zero, L-2 sweeps), sequential and leapfrog (k workers), interleaved, ``--repeats``
times each after a warm-up; the table gives the median, the speed-up over sequential in the same run
(the sequential median over the row's, > 1: faster), the rounds or sweeps, and the flops each pass does against the chain (5). A schedule whose predicted work
exceeds ``--max-gflop`` or ``--max-gbyte`` is skipped, one whose buffers exceed ``--memory-limit`` is
refused by the schedule itself; both show in the table. Writes the rows as JSON and plots time vs L,
one panel per N.
"""

import datetime
import importlib.util
import json
import numbers
import platform
import sys
from pathlib import Path

import numpy as np

from leapfrog_gpu import MLP, Sequential
from leapfrog_gpu.backends import get_backend
from leapfrog_gpu.core.checks import MEMORY_LIMIT
from leapfrog_gpu.mlp.naumov import jacobi_counters, scan_counters, sequential_counters
from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.bench import runner
from leapfrog_gpu.tools.bench.runner import ratio
from leapfrog_gpu.tools.cli import Parser, integers, number, output_refusal, pip_install, unused, written_whole
from leapfrog_gpu.tools.schedules import make_schedule, names_type, schedule_names

HERE = Path(__file__).resolve().parent


def time_backward(L, N, B, names=schedule_names("mlp"), backend="numpy", k=2, repeats=5, dtype="float32",
                  memory_limit=MEMORY_LIMIT, activation="sigmoid", seed=0):
    """Time the backward pass (4)-(7) of ``MLP([N] * L)`` at batch ``B`` under each schedule in ``names``.

    One forward pass, one warm-up pass per schedule (it allocates), then ``repeats`` rounds that run
    every schedule once each in turn, each round starting one later (``runner.interleaved``, as
    leapfrog-bench times, so that load on the machine falls on all alike). Returns one dict per name:
    ``median_s``, ``speedup`` (the sequential median over it, > 1: faster; when ``"sequential"`` is in
    ``names``), and the schedule's counters; a schedule refused by its memory check has ``refused`` (the message) instead of a time.
    """
    for name in names:
        make_schedule("mlp", name)  # an unknown name: ValueError, naming the known ones
    if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1; got {repeats!r}")
    rows = {}
    with MLP([N] * L, activation=activation, dtype=dtype, seed=seed, backend=backend) as net:
        rng = np.random.default_rng(seed)
        net.backprop(rng.random((N, B)), rng.random((N, B)), Sequential())
        plan = net.plan(B)

        def backward(schedule):
            plan.backward(schedule)
            return dict(getattr(schedule, "stats", {}))

        made = {name: make_schedule("mlp", name, k, memory_limit=memory_limit) for name in names}
        calls = {name: lambda s=schedule: backward(s) for name, schedule in made.items()}
        for name, timed in runner.interleaved(net.backend, calls, repeats).items():
            rows[name] = {"schedule": name, "L": L, "N": N, "B": B, "backend": net.backend.name, "dtype": dtype}
            if "ms" in timed:
                rows[name]["median_s"] = float(np.median(timed.pop("ms"))) / 1e3
            rows[name].update(timed)
    if "median_s" in rows.get("sequential", {}):
        for row in rows.values():
            if "median_s" in row:
                row["speedup"] = rows["sequential"]["median_s"] / row["median_s"]
    return [rows[name] for name in names]


def predicted(name, sizes, B, itemsize):
    """(flops, bytes moved) of one backward chain under ``name``, for the budget."""
    if name == "naumov-scan":
        counters = scan_counters(sizes, B, itemsize)
    elif name == "naumov-jacobi":
        counters = jacobi_counters(sizes, B, itemsize, len(sizes) - 2, warm_start=False)
    else:
        counters = sequential_counters(sizes, B, itemsize)
    return counters["flops"], counters["bytes"]


def run_grid(args, backend):
    itemsize = np.dtype(args.dtype).itemsize
    rows = []
    header = (f"{'L':>4} {'N':>4} {'B':>2}  {'schedule':<14} {'median ms':>10} {'speed-up vs seq':>15} "
              f"{'rounds/sweeps':>13} {'flops/seq':>9}")
    print("speed-up vs seq: the sequential median over the row's, same network (> 1: faster)")
    print(header)
    print("-" * len(header))
    for N in args.N:
        for L in args.L:
            for B in args.B:
                sizes = [N] * L
                run, skipped = [], []
                for name in args.schedule:
                    flops, moved = predicted(name, sizes, B, itemsize)
                    if flops > args.max_gflop * 1e9 or moved > args.max_gbyte * 1e9:
                        skipped.append({"schedule": name, "L": L, "N": N, "B": B,
                                        "skipped": f"predicted {flops / 1e9:.1f} GFLOP, {moved / 1e9:.1f} GB per pass"})
                    else:
                        run.append(name)
                if "sequential" not in run and "sequential" in args.schedule:
                    run.insert(0, "sequential")
                timed = time_backward(L, N, B, names=tuple(run), backend=backend, k=args.k, repeats=args.repeats,
                                      dtype=args.dtype, memory_limit=args.memory_limit) if run else []
                for row in timed + skipped:
                    rows.append(row)
                    print(format_row(row))
                sys.stdout.flush()
    return rows


def format_row(row):
    head = f"{row['L']:>4} {row['N']:>4} {row['B']:>2}  {row['schedule']:<14}"
    if "median_s" not in row:
        why = row.get("refused") or row.get("skipped")
        return f"{head} {'refused' if 'refused' in row else 'skipped':>10}  ({why.split(';')[0][:90]})"
    count = row.get("rounds", row.get("sweeps", ""))
    work = f"{row['flops'] / row['sequential_flops']:.1f}x" if row.get("sequential_flops") else ""
    speedup = ratio(row.get("speedup")) if "speedup" in row else ""
    return f"{head} {row['median_s'] * 1e3:>10.3f} {speedup:>15} {count!s:>13} {work:>9}"


def plot(rows, args, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.N), figsize=(5 * len(args.N), 4), squeeze=False)
    styles = {B: style for B, style in zip(args.B, ("-", "--", ":", "-."))}
    for ax, N in zip(axes[0], args.N):
        for index, name in enumerate(args.schedule):
            for B in args.B:
                points = sorted((r["L"], r["median_s"] * 1e3) for r in rows
                                if r["schedule"] == name and r["N"] == N and r["B"] == B and "median_s" in r)
                if points:
                    ax.plot(*zip(*points), styles.get(B, "-"), marker="o", color=f"C{index}", label=f"{name}, B={B}")
        ax.set(xscale="log", yscale="log", xlabel="layers L", ylabel="backward pass, median ms", title=f"N = {N}")
        ax.set_xticks(args.L, [str(L) for L in args.L])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"backward pass on {args.backend} ({args.dtype}); naumov-jacobi from zero", fontsize=10)
    fig.tight_layout()
    with written_whole(f"--out {path}", path, "wb") as out:
        fig.savefig(out, format="png", dpi=90)


def crossover(rows):
    """Per (N, B): the configurations where naumov-scan's median is below sequential's."""
    wins = [r for r in rows if r["schedule"] == "naumov-scan" and r.get("speedup", 0) > 1]
    return [{"L": r["L"], "N": r["N"], "B": r["B"], "speedup": r["speedup"]} for r in wins]


def main(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--L", type=integers(2), default=[8, 32, 128, 512], help="depths (default 8,32,128,512)")
    parser.add_argument("--N", type=integers(1), default=[16, 64, 256], help="widths (default 16,64,256)")
    parser.add_argument("--B", type=integers(1), default=[1, 8], help="batch sizes (default 1,8)")
    parser.add_argument("--schedule", type=names_type("mlp"), default=list(schedule_names("mlp")),
                        help=f"from {','.join(schedule_names('mlp'))}")
    parser.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="numpy backend: BLAS threads per call (default 1: k+1 host streams on k+1 cores "
                             "without BLAS threads spinning against each other)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--k", type=int, default=2, help="worker streams for (6)(7) (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per schedule (default 5)")
    parser.add_argument("--memory-limit", type=int, default=MEMORY_LIMIT, help="bytes, per schedule")
    parser.add_argument("--max-gflop", type=number(0, strict=True), default=30.0,
                        help="skip a pass predicted above this (> 0)")
    parser.add_argument("--max-gbyte", type=number(0, strict=True), default=20.0,
                        help="skip a pass moving more than this (> 0)")
    parser.add_argument("--out", type=Path, help="path stem of the .json and .png written (default "
                                                 "results/naumov_crossover_{cpu,gpu}_<UTC date>, -2, -3 ... where "
                                                 "a run of the day wrote it)")
    args = parser.parse_args(argv)
    if min(args.k, args.repeats, args.memory_limit, args.blas_threads) < 1:
        parser.error("--k, --repeats, --memory-limit and --blas-threads must be >= 1")
    if importlib.util.find_spec("matplotlib") is None:
        parser.error(f"the plot of time against L needs matplotlib: {pip_install('plot')}")
    if args.out is None:
        day = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        device = "gpu" if args.backend == "cupy" else "cpu"
        args.out = unused(HERE / "results" / f"naumov_crossover_{device}_{day}.json").with_suffix("")
    for suffix in (".json", ".png"):  # before the grid is measured, not after
        named = args.out.name not in ("", ".", "..")
        if not named or (why := output_refusal("--out", args.out.with_suffix(suffix))):
            parser.error(why if named else "--out must name a path stem, such as results/crossover")
    options = {"blas_threads": args.blas_threads} if args.backend == "numpy" else {}
    try:
        backend = get_backend(args.backend, **options)
    except (RuntimeError, ValueError) as error:
        print(f"naumov_crossover: {error}", file=sys.stderr)
        return 2
    with backend:
        rows = run_grid(args, backend)
        machine = {"backend": repr(backend), "python": platform.python_version(), "numpy": np.__version__,
                   "processor": platform.processor() or platform.machine()}
    wins = crossover(rows)
    print("\nnaumov-scan faster than sequential:",
          ", ".join(f"L={w['L']} N={w['N']} B={w['B']} ({ratio(w['speedup'])})" for w in wins) or "nowhere")
    settings = {key: (value.name if isinstance(value, Path) else value) for key, value in vars(args).items()}
    with written_whole(f"--out {args.out.with_suffix('.json')}", args.out.with_suffix(".json")) as f:
        json.dump({"settings": settings, "machine": machine, "rows": rows, "scan_wins": wins}, f, indent=1)
    plot(rows, args, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "naumov_crossover.py"))
