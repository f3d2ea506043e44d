"""The study's figure: where the KV budget goes per allocator (the paper's Fig. 2) and requests running at once.

Both panels put every allocator side by side on one axis (contiguous max / pow2 / oracle, then paged
block sizes), so a mean is only ever drawn beside other means and a peak beside other peaks.
"""
from __future__ import annotations

from pathlib import Path

from sandbox.memory.waste import CATEGORIES

COLORS = {"tokens": "#2a9d8f", "reserved": "#e9c46a", "internal": "#e76f51", "external": "#8d99ae", "free": "#edf2f4"}
# One colour per allocator in every figure of both studies (paged block sizes share paged's blue).
ALLOCATOR_COLORS = {"paged": "#1f77b4", "static": "#9467bd", "max": "#d62728", "pow2": "#ff7f0e", "oracle": "#2ca02c"}


def allocator_color(name: str) -> str:
    """The colour of an allocator named paged-16, contiguous-max, contig. pow2, ... (ALLOCATOR_COLORS)."""
    for key, color in ALLOCATOR_COLORS.items():
        if key in name:
            return color
    return "#555555"


def allocator_rows(result: dict) -> list[tuple[str, dict]]:
    """(label, row) for every allocator in display order."""
    rows = [result["contiguous"], *result.get("contiguous_variants", [])]
    rows = sorted(rows, key=lambda r: ("max", "pow2", "oracle").index(r["reserve"]))
    out = [(f"contig.\n{r['reserve']}", r) for r in rows]
    return out + [(f"paged\n{r['block_size']}", r) for r in result["paged"]]


def concurrency_series(result: dict) -> dict[str, list[float]]:
    """{"mean": [...], "peak": [...]} over allocator_rows: the same statistic for every allocator."""
    rows = [r for _, r in allocator_rows(result)]
    return {"mean": [r["mean_concurrent_requests"] for r in rows], "peak": [r["max_concurrent_requests"] for r in rows]}


def plot_study(result: dict, path: Path) -> Path:
    """Two panels from a study result dict, written as PNG to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label for label, _ in allocator_rows(result)]
    rows = [r for _, r in allocator_rows(result)]
    x = range(len(rows))
    fig, (ax_w, ax_c) = plt.subplots(1, 2, figsize=(15, 6))

    bottom = [0.0] * len(rows)
    for cat in CATEGORIES:
        values = [100 * r[cat] for r in rows]
        ax_w.bar(x, values, bottom=bottom, color=COLORS[cat], edgecolor="#555", linewidth=0.4, label=cat)
        for i, (v, b) in enumerate(zip(values, bottom)):
            if cat == "tokens" and v > 6:
                ax_w.text(i, b + v / 2, f"{v:.0f}", ha="center", va="center", fontsize=8, color="white")
        bottom = [b + v for b, v in zip(bottom, values)]
    ax_w.set_ylim(0, 100)
    ax_w.set_ylabel("% of the whole KV budget (mean over steps)")
    ax_w.set_title("Where the KV budget goes (the paper's Fig. 2 split)")
    ax_w.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)

    series = concurrency_series(result)
    ax_c.bar(x, series["mean"], color=["#e76f51" if r["allocator"] == "contiguous" else "#2a9d8f" for r in rows],
             label="mean over steps")
    ax_c.plot(list(x), series["peak"], "k_", markersize=18, mew=2, ls="none", label="peak")
    for i, m in enumerate(series["mean"]):
        ax_c.text(i, m, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
    ax_c.set_ylabel("requests running at once")
    ax_c.set_title("Concurrency: means beside means, peaks beside peaks")
    ax_c.legend(fontsize=8, loc="upper left")

    for ax in (ax_w, ax_c):
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    meta = result["meta"]
    fig.suptitle(f"Paged vs contiguous KV cache: {meta['workload']}, budget {meta['budget_tokens']:,} tokens, "
                 f"max length {meta['max_len']}, {meta['lengths']['num_requests']} requests, seed {meta['seed']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
