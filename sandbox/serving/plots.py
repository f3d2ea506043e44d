"""The serving run's figures: latency against rate (the paper's Fig. 12), memory over time (Fig. 2 split),
and for parallel sampling / beam search the sharing saved by width beside the paper's Fig. 15 range."""
from __future__ import annotations

import textwrap
from pathlib import Path

from sandbox.memory import paper
from sandbox.memory.plot import COLORS
from sandbox.memory.waste import CATEGORIES


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _style(name: str) -> dict:
    if name.startswith("paged"):
        return dict(marker="o", ls="-")
    return dict(marker="s", ls="--")


def plot_latency(result: dict, path: Path) -> Path:
    """Mean normalized latency (s/token) against request rate, one line per allocator, one panel per width."""
    plt = _plt()
    meta, allocators = result["meta"], result["allocators"]
    widths = meta["widths"]
    bound = meta["latency_bound"]
    fig, axes = plt.subplots(1, len(widths), figsize=(6.5 * len(widths), 5), squeeze=False)
    for ax, width in zip(axes[0], widths):
        for name, entry in allocators.items():
            if entry["width"] != width:
                continue
            pts = sorted(entry["points"], key=lambda p: p["rate"])
            label = f"{entry['allocator']}: max {entry['max_rate'] if entry['max_rate'] is not None else '-'} req/s"
            ax.plot([p["rate"] for p in pts], [p["normalized_latency"] for p in pts], label=label, **_style(name))
        ax.axhline(bound, color="k", lw=0.8, ls=":", label=f"bound {bound:g} s/token")
        ax.set_ylim(0, 4 * bound)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("normalized latency (s/token), clipped at 4x the bound")
        ax.set_title(f"{meta['workload']}" + (f", width {width}" if width > 1 else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    source = textwrap.fill(f"step time: {meta['step_cost']}", width=110 * len(widths))
    fig.suptitle(f"Normalized latency vs request rate ({meta['requests']} requests, seed {meta['seed']}, KV budget "
                 f"{meta['budget_tokens']:,} tokens)\n{source}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def timeline_rate(result: dict) -> float:
    """The rate the memory-over-time figure shows: the highest rate some paged allocator sustains
    (so the contiguous baselines are seen past their limit), else the lowest rate."""
    rates = sorted(result["meta"]["rates"])
    paged = [e["max_rate"] for e in result["allocators"].values()
             if e["allocator"].startswith("paged") and e["max_rate"] is not None]
    return max(paged) if paged else rates[0]


def plot_memory(result: dict, timelines: dict, path: Path) -> Path:
    """Stacked shares of the KV budget over simulated time, one panel per allocator (first width)."""
    plt = _plt()
    meta = result["meta"]
    rate = timeline_rate(result)
    budget = meta["budget_tokens"]
    names = [n for n, e in result["allocators"].items() if e["width"] == meta["widths"][0]]
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 2.2 * len(names)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        samples = timelines.get((name, rate), [])
        t = [s[0] for s in samples]
        parts = [[100 * s[i] / budget for s in samples] for i in range(1, 5)]
        parts.append([100 - sum(p[k] for p in parts) for k in range(len(samples))])
        ax.stackplot(t, *parts, labels=CATEGORIES, colors=[COLORS[c] for c in CATEGORIES])
        point = next(p for p in result["allocators"][name]["points"] if p["rate"] == rate)
        ax.set_title(f"{name} at {rate:g} req/s: tokens {100 * point['tokens_share']:.1f}%, "
                     f"{point['mean_running_seqs']:.1f} sequences running on average, "
                     f"{point['preemptions']} preemptions", fontsize=9)
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of budget")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=5, loc="upper right", bbox_to_anchor=(0.99, 0.995), frameon=False)
    axes[-1, 0].set_xlabel("simulated time (s)")
    fig.suptitle(f"Where the KV budget goes over time ({budget:,} tokens; the paper's Fig. 2 split)", fontsize=10,
                 x=0.02, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_sharing(result: dict, path: Path) -> Path:
    """Paged sharing saved by width (mean over sustained rates) beside the paper's range; max rate by width."""
    plt = _plt()
    meta = result["meta"]
    kind = meta["workload"]
    widths = meta["widths"]
    fig, (ax_s, ax_r) = plt.subplots(1, 2, figsize=(13, 5))
    lengths = meta["lengths"] if meta["lengths"] in paper.FIG15 else None       # no paper figure for a trace
    if lengths:
        lo, hi = paper.FIG15[lengths][kind]
        ax_s.fill_between([min(widths), max(widths)], [100 * lo] * 2, [100 * hi] * 2, color="#cccccc", alpha=0.5,
                          label=f"paper Fig. 15 ({lengths}): {100 * lo:.1f}-{100 * hi:.1f}% over widths 2-6")
        ax_s.plot(list(paper.FIG15_WIDTHS[::2]), [100 * lo, 100 * hi], "kx", ms=9,
                  label="the range's ends (taken as widths 2 and 6)")
    allocs = sorted({e["allocator"] for e in result["allocators"].values()})
    for alloc in allocs:
        entries = [e for e in result["allocators"].values() if e["allocator"] == alloc]
        entries.sort(key=lambda e: e["width"])
        ax_r.plot([e["width"] for e in entries], [e["max_rate"] or 0 for e in entries], label=alloc, **_style(alloc))
        if alloc.startswith("paged"):
            saved = []
            for e in entries:
                ok = [p for p in e["points"] if p["normalized_latency"] <= meta["latency_bound"]] or e["points"]
                saved.append(100 * sum(p["sharing_saved"] for p in ok) / len(ok))
            ax_s.plot([e["width"] for e in entries], saved, label=f"{alloc} (this run, inside the budget)",
                      **_style(alloc))
    ax_s.set_xlabel("parallel samples n" if kind == "parallel" else "beam width k")
    ax_s.set_ylabel("memory saved by sharing (%)")
    ax_s.set_title("Sharing saved: blocks saved / blocks without sharing")
    ax_r.set_xlabel(ax_s.get_xlabel())
    ax_r.set_ylabel(f"max rate under {meta['latency_bound']:g} s/token (req/s)")
    ax_r.set_title("Highest sustained rate by width")
    for ax in (ax_s, ax_r):
        ax.set_xticks(widths)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_all(result: dict, timelines: dict, run_dir: Path) -> list[Path]:
    run_dir = Path(run_dir)
    out = [plot_latency(result, run_dir / "latency_vs_rate.png"), plot_memory(result, timelines, run_dir / "memory.png")]
    if result["meta"]["workload"] in ("parallel", "beam"):
        out.append(plot_sharing(result, run_dir / "sharing_by_width.png"))
    return out
