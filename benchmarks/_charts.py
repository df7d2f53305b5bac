"""The report's charts: PNGs of the scale curves a module's figures carry, one file per
(module, chart), so a run redraws only the charts of the modules it ran."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

#: Each chart's file suffix and title.
TITLES = {
    "concurrency": "Concurrent I/O-bound runs in one process",
    "history": "Per-step cost vs history length",
}


def chart_path(outdir: Path, module: str, kind: str) -> Path:
    """The file of chart ``kind`` drawn from module ``module``'s figures."""
    return outdir / f"{module}_{kind}.png"


def existing(outdir: Path, module: str) -> list[tuple[str, Path]]:
    """(title, path) of the charts module ``module``'s figures left in ``outdir``."""
    paths = [(title, chart_path(outdir, module, kind)) for kind, title in TITLES.items()]
    return [(title, path) for title, path in paths if path.exists()]


def remove(outdir: Path, module: str) -> None:
    """Delete module ``module``'s charts (before it draws its new ones)."""
    for _, path in existing(outdir, module):
        path.unlink()


def draw(figures: list[dict[str, Any]], outdir: Path, module: str) -> list[tuple[str, Path]]:
    """PNG charts of the scale curves in module ``module``'s ``figures`` (matplotlib, Agg);
    (title, path) of each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in figures:
        if f["section"] == "scale" and f.get("series") and f.get("x") is not None:
            series[f["series"]].append(f)
    out: list[tuple[str, Path]] = []

    def plot(ax: Any, prefix: str, key: str, ylabel: str, title: str) -> bool:
        drawn = False
        for name, pts in sorted(series.items()):
            if not name.startswith(prefix):
                continue
            pts.sort(key=lambda f: f["x"])
            xs = [f["x"] for f in pts]
            ys = [f[key] for f in pts]
            if key == "ratio":
                lo = [f["ratio"] - (f["ratio_spread"] or [f["ratio"]] * 2)[0] for f in pts]
                hi = [(f["ratio_spread"] or [f["ratio"]] * 2)[1] - f["ratio"] for f in pts]
            else:
                lo = [f["value"] - f["spread"][0] for f in pts]
                hi = [f["spread"][1] - f["value"] for f in pts]
            label = name[len(prefix) :]
            ax.errorbar(
                xs,
                ys,
                yerr=[lo, hi],
                marker="o",
                capsize=3,
                label=label,
                color="C0" if "postgresql" in label else "C1",
                linestyle="--" if "last10%" in label else "-",
            )
            drawn = True
        ax.set_xscale("log")
        ax.set_xlabel(title)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if drawn:
            ax.legend()
        return drawn

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ok = plot(axes[0], "wall/ideal ", "ratio", "wall time / ideal", "concurrent runs")
    axes[0].axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ok |= plot(axes[1], "cpu ", "value", "CPU µs per step", "concurrent runs")
    ok |= plot(axes[2], "rss ", "value", "peak RSS (MB)", "concurrent runs")
    axes[0].set_title("wall time vs ideal")
    axes[1].set_title("CPU cost per step")
    axes[2].set_title("peak memory")
    fig.tight_layout()
    if ok:
        path = chart_path(outdir, module, "concurrency")
        fig.savefig(path, dpi=110)
        out.append((TITLES["concurrency"], path))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    if plot(ax, "history ", "value", "µs per step", "steps in the run (history length)"):
        ax.set_yscale("log")
        ax.set_title("per-step cost vs history length")
        fig.tight_layout()
        path = chart_path(outdir, module, "history")
        fig.savefig(path, dpi=110)
        out.append((TITLES["history"], path))
    plt.close(fig)
    return out
