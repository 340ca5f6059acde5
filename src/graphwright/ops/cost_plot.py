"""A picture of cost over time: one bar per run, split by stage, beside what a full rebuild
would have cost at that point."""

from __future__ import annotations

from pathlib import Path

from graphwright.pipeline.definition import ORDER


def plot_history(history: list[dict], path: str | Path, currency: str = "USD") -> Path:
    """Write a PNG or SVG (by `path`'s suffix): money and wall seconds per run, by stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    present = {st["stage"] for run in history for st in run["stages"]}
    stages = [s for s in ORDER if s in present] + sorted(present - set(ORDER))
    labels = [f"{i + 1}\n{run['command']}" for i, run in enumerate(history)]
    x = list(range(len(history)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(7, 0.9 * len(history) + 4.5), 7), sharex=True)
    colors = plt.get_cmap("tab10")
    for axis, field, full_field, unit in ((top, "cost", "full_rebuild_cost", currency), (bottom, "wall_s", "full_rebuild_s", "seconds")):
        base = [0.0] * len(history)
        for n, stage in enumerate(stages):
            values = [sum(st[field] for st in run["stages"] if st["stage"] == stage) for run in history]
            axis.bar(x, values, bottom=base, label=stage, color=colors(n % 10), width=0.6)
            base = [b + v for b, v in zip(base, values)]
        axis.plot(x, [run[full_field] for run in history], "k_", markersize=28, mew=2, label="full rebuild (estimate)")
        axis.set_ylabel(unit)
        axis.grid(axis="y", alpha=0.3)
    top.set_title("Cost per run by stage, against a full rebuild")
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    bottom.set_xticks(x, labels, fontsize=8)
    bottom.set_xlabel("run (oldest first)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
