"""Training curves from ``leapfrog-train --metrics FILE`` lines: the test metric and the training loss by
epoch (left) and by seconds of training steps (right), one colour per file, labelled by its schedule and
forward solver.

    python profiling/plot_metrics.py RUN.jsonl [RUN.jsonl ...] -o curves.png [--title TEXT]

A regression's ``test_mse`` and losses are drawn on a log scale, with the chance level (``--chance``, 1/6 for
the adding problem) as a dashed line; a classification's ``test_accuracy`` on a linear one.
"""

import importlib.util
import itertools
import json
import os
import sys

from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import Parser, output_refusal, path, pip_install, read_or_refuse, written_whole


def read(path):
    """The metrics lines of ``path``, one dict an epoch."""
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def plot(runs, path, title="", chance=None):
    """Draw ``runs`` (label -> metrics lines) into ``path``, in the format its extension names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for colour, (label, lines) in enumerate(runs.items()):
        metric = "test_mse" if "test_mse" in lines[0] else "test_accuracy"
        epochs = [line["epoch"] for line in lines]
        seconds = list(itertools.accumulate(line["seconds"] for line in lines))
        for ax, x in zip(axes, (epochs, seconds)):
            ax.plot(x, [line[metric] for line in lines], "o-", color=f"C{colour}", label=f"{label}: {metric}")
            ax.plot(x, [line["train_loss"] for line in lines], ":", color=f"C{colour}", label=f"{label}: train loss")
    for ax, xlabel in zip(axes, ("epoch", "seconds of training steps")):
        if metric == "test_mse":
            ax.set_yscale("log")
            if chance is not None:
                ax.axhline(chance, color="grey", linestyle="--", linewidth=0.8, label=f"chance ({chance:.3g})")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric + " (dotted: train loss)")
    axes[1].legend(fontsize="x-small", loc="upper right")
    fig.suptitle(title, fontsize="small")
    fig.tight_layout()
    with written_whole(f"-o {path}", path, "wb") as out:
        fig.savefig(out, format=os.path.splitext(path)[1][1:].lower(), dpi=110, bbox_inches="tight")
    plt.close(fig)


def label(lines):
    first = lines[0]
    solver = first.get("forward_solver", "sequential")
    return first["schedule"].split("(")[0] + ("" if solver == "sequential" else f" + {solver}")


def format_refusal(option, path):
    """Why matplotlib cannot write a chart to ``path``, in one line, or ``None``: its extension names a format
    matplotlib writes (matplotlib's own list, less PGF, which it writes through a LaTeX install)."""
    from matplotlib.figure import Figure

    formats = set(Figure().canvas.get_supported_filetypes()) - {"pgf"}
    extension = os.path.splitext(path)[1][1:].lower()
    if extension in formats:
        return None
    why = f"matplotlib cannot write a .{extension} file" if extension else "the name has no extension"
    return f"{option} {path}: {why}; give a name ending in one of {', '.join('.' + name for name in sorted(formats))}"


def main(argv=None):
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="RUN.jsonl")
    p.add_argument("-o", "--output", type=path, required=True, metavar="FILE.png",
                   help="the chart, in the format its extension names (.png, .pdf, .svg, ...)")
    p.add_argument("--title", default="")
    p.add_argument("--chance", type=float, default=None, help="the chance level of the test metric, dashed")
    args = p.parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        p.error(f"the plot needs matplotlib: {pip_install('plot')}")
    if why := output_refusal("-o", args.output) or format_refusal("-o", args.output):
        p.error(why)
    runs = {}
    for name in args.files:
        lines = read_or_refuse(p, name, read, "a file of leapfrog-train --metrics lines")
        if not lines or not all(isinstance(line, dict) and {"epoch", "seconds", "train_loss", "schedule"} <= set(line)
                                and ("test_mse" in line or "test_accuracy" in line) for line in lines):
            p.error(f"{name} holds no leapfrog-train --metrics lines (each an epoch's, with its epoch, seconds, "
                    "train_loss, test metric and schedule)")
        runs[f"{label(lines)} ({name.rsplit('/', 1)[-1]})" if label(lines) in runs else label(lines)] = lines
    plot(runs, args.output, args.title, args.chance)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "plot_metrics.py"))
