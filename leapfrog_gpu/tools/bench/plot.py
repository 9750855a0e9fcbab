"""The figure of ``leapfrog-bench --plot``: the speed-up of a pass (forward + backward) against k over the
sequential schedule at the same BLAS setting, k = 1 included, measured (dots) and as the model predicts (the
line, 1 / (1 - (1 - 1/k) f3/f)). One panel per width N, one colour per (L, B, BLAS threads), each panel's
legend below it, off the data; the title says where and when (backend, machine, date). A pass is the same whatever
the step's optimizer and update: the rows of the run's first optimizer are plotted, the one-pass rows (measured
again, with their steps) left out."""

from ...core.schedules import Leapfrog


def plot(records, path, about):
    """Write the figure for ``records`` (``mlp``'s) to ``path`` (PNG); ``about`` is the run's
    header (``date``, ``machine``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = plotted(records)
    widths = sorted({r["N"] for r in ours}) or sorted({r["N"] for r in records})
    fig, axes = plt.subplots(1, len(widths), figsize=(5 * len(widths), 4), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], widths):
        def group(r):
            return r["L"], r["B"], r["blas_threads"] or 0

        for colour, (layers, batch, threads) in enumerate(sorted({group(r) for r in ours if r["N"] == n})):
            rows = sorted((r for r in ours if r["N"] == n and group(r) == (layers, batch, threads)),
                          key=lambda r: r["k"])
            ks = [r["k"] for r in rows]
            label = f"L={layers} B={batch}" + (f" blas={threads}" if threads else "")
            ax.plot(ks, [1 / (1 - r["predicted_saving"]) for r in rows], "-", color=f"C{colour}", alpha=0.6)
            ax.plot(ks, [1 / (1 - r["measured_saving"]) for r in rows], "o", color=f"C{colour}", label=label)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"N = {n}")
        ax.set_xlabel("k (worker streams)")
        ax.set_xticks(sorted({r["k"] for r in ours if r["N"] == n}) or [1])
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    axes[0][0].set_ylabel("speed-up of a pass vs sequential\n(> 1: faster; dots measured, lines the model)")
    machine = about["machine"]
    fig.suptitle(f"leapfrog-bench, {records[0]['backend'] if records else '?'} backend: {machine['device']} "
                 f"({machine['cores']} cores), {machine['platform']}; {about['date'][:10]}", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plotted(records):
    """The records the figure plots: the eager leapfrog rows of the run's first optimizer, one-pass rows left out."""
    first = records[0].get("optimizer") if records else None
    return [r for r in records if r["schedule"] == Leapfrog.name and not r.get("graph") and not r.get("one_pass")
            and r.get("optimizer") == first]
