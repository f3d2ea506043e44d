"""The serving run's figures, one per paper figure it reproduces; every allocator keeps one colour
(``sandbox.memory.plot.ALLOCATOR_COLORS``), max rates carry their seeds' 95% interval, censored rates are
drawn as right-pointing triangles (a lower bound), an allocator with no sustained rate is named, not drawn.

    latency_vs_rate.png    normalized latency against rate, every seed (Fig. 12 / 16)
    memory.png             the KV budget's split over time at each allocator's knee (Fig. 2)
    sharing_by_width.png   parallel / beam: sharing saved beside the paper's range; max rate by width (Fig. 14/15)
    block_size.png         max rate against block size, when the run has several (Fig. 18)
    swap.png               swap vs recompute time of one preempted sequence by block size (Fig. 19)
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from sandbox.memory import paper
from sandbox.memory.plot import COLORS, allocator_color
from sandbox.memory.waste import CATEGORIES
from sandbox.serving.search import knee_point


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _style(name: str) -> dict:
    return dict(color=allocator_color(name), marker="o" if name.startswith("paged") else "s",
                ls="-" if name.startswith("paged") else "--")


def rate_label(entry: dict) -> str:
    """The max rate as the summary prints it: mean, 95% interval, '>=' when censored, 'none'."""
    if entry["max_rate"] is None:
        return "no sustained rate"
    ci = entry.get("max_rate_ci")
    text = (">= " if entry["max_rate_censored"] else "") + f"{entry['max_rate']:.2f}"
    return text + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + " req/s"


def _knee(ax, entry: dict, y: float, color: str) -> None:
    """The max rate at height y: a point with its interval, a triangle when censored."""
    if entry["max_rate"] is None:
        return
    ci = entry.get("max_rate_ci")
    xerr = [[entry["max_rate"] - ci[0]], [ci[1] - entry["max_rate"]]] if ci else None
    ax.errorbar([entry["max_rate"]], [y], xerr=xerr, fmt=">" if entry["max_rate_censored"] else "D", color=color,
                ms=8, capsize=4, mec="k")


def plot_latency(result: dict, path: Path) -> Path:
    """Mean normalized latency (s/token) against request rate: one colour per allocator, one thin line per seed,
    the max rate with its interval on the bound; one panel per width."""
    plt = _plt()
    meta, allocators = result["meta"], result["allocators"]
    widths = meta["widths"]
    bound = meta["latency_bound"]
    fig, axes = plt.subplots(1, len(widths), figsize=(6.5 * len(widths), 5), squeeze=False)
    for ax, width in zip(axes[0], widths):
        for name, entry in allocators.items():
            if entry["width"] != width:
                continue
            style = _style(name)
            for seed in sorted({p["seed"] for p in entry["points"]}):
                pts = sorted((p for p in entry["points"] if p["seed"] == seed), key=lambda p: p["rate"])
                first = seed == meta["seed"]
                ax.plot([p["rate"] for p in pts], [p["normalized_latency"] for p in pts], lw=1.5 if first else 0.7,
                        alpha=1 if first else 0.4, ms=4 if first else 2,
                        label=f"{entry['allocator']}: {rate_label(entry)}" if first else None, **style)
            _knee(ax, entry, bound, style["color"])
        ax.axhline(bound, color="k", lw=0.8, ls=":", label=f"bound {bound:g} s/token")
        ax.set_ylim(0, 4 * bound)
        ax.set_xscale("log")
        ax.set_xlabel("request rate (req/s, log scale)")
        ax.set_ylabel("normalized latency (s/token), clipped at 4x the bound")
        ax.set_title(f"{meta['workload']}" + (f", width {width}" if width > 1 else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    source = textwrap.fill(f"step time: {meta['step_cost']}", width=95 * len(widths))
    title = (f"Normalized latency vs request rate ({meta['requests']} requests, {meta['seeds']} seed(s) from "
             f"{meta['seed']}; diamonds: max rate with its 95% interval, triangles: censored)")
    fig.suptitle(textwrap.fill(title, width=95 * len(widths)) + "\n" + source, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_memory(result: dict, timelines: dict, path: Path) -> Path:
    """Stacked shares of the KV budget over simulated time, one panel per allocator (first width), each at its
    own knee of the first seed."""
    plt = _plt()
    meta = result["meta"]
    budget = meta["budget_tokens"]
    names = [n for n, e in result["allocators"].items() if e["width"] == meta["widths"][0]]
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 2.2 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        point = knee_point(result["allocators"][name], meta["seed"])
        samples = timelines.get((name, point["rate"]), [])
        t = [s[0] for s in samples]
        parts = [[100 * s[i] / budget for s in samples] for i in range(1, 5)]
        parts.append([100 - sum(p[k] for p in parts) for k in range(len(samples))])
        ax.stackplot(t, *parts, labels=CATEGORIES, colors=[COLORS[c] for c in CATEGORIES])
        ax.set_title(f"{name} at {point['rate']:.3g} req/s (seed {meta['seed']}'s knee): tokens "
                     f"{100 * point['tokens_share']:.1f}%, {point['mean_running_seqs']:.1f} sequences running on "
                     f"average, {point['preemptions']} preemptions", fontsize=9, color=allocator_color(name))
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of budget")
        ax.set_xlabel("simulated time (s)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=5, loc="upper right", bbox_to_anchor=(0.99, 0.995), frameon=False)
    fig.suptitle(f"Where the KV budget goes over time ({budget:,} tokens; the paper's Fig. 2 split)", fontsize=10,
                 x=0.02, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_sharing(result: dict, path: Path) -> Path:
    """Paged sharing saved by width (mean over the points that met the bound) beside the paper's range; max rate
    by width with intervals."""
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
    allocs = sorted({e["allocator"] for e in result["allocators"].values()})
    for alloc in allocs:
        entries = sorted((e for e in result["allocators"].values() if e["allocator"] == alloc),
                         key=lambda e: e["width"])
        style = _style(alloc)
        shown = [e for e in entries if e["max_rate"] is not None]
        ax_r.plot([e["width"] for e in shown], [e["max_rate"] for e in shown], label=alloc, **style)
        for e in shown:
            ci = e.get("max_rate_ci")
            yerr = [[e["max_rate"] - ci[0]], [ci[1] - e["max_rate"]]] if ci else None
            ax_r.errorbar([e["width"]], [e["max_rate"]], yerr=yerr, fmt="^" if e["max_rate_censored"] else "none",
                          color=style["color"], capsize=4)
        for e in entries:
            if e["max_rate"] is None:
                ax_r.annotate(f"{alloc}: none", (e["width"], 0), fontsize=7, color=style["color"], rotation=90)
        if alloc.startswith("paged"):
            saved = []
            for e in entries:
                ok = [p for p in e["points"] if p["normalized_latency"] <= meta["latency_bound"]] or e["points"]
                saved.append(100 * sum(p["sharing_saved"] for p in ok) / len(ok))
            ax_s.plot([e["width"] for e in entries], saved, label=f"{alloc} (this run, inside the budget)", **style)
    ax_s.set_xlabel("parallel samples n" if kind == "parallel" else "beam width k")
    ax_s.set_ylabel("memory saved by sharing (%)")
    ax_s.set_title("Sharing saved: blocks saved / blocks without sharing")
    ax_r.set_xlabel(ax_s.get_xlabel())
    ax_r.set_ylabel(f"max rate under {meta['latency_bound']:g} s/token (req/s)")
    ax_r.set_yscale("log")
    ax_r.set_title("Highest sustained rate by width (95% interval; triangles: censored)")
    for ax in (ax_s, ax_r):
        ax.set_xticks(widths)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_block_size(result: dict, path: Path) -> Path:
    """Max rate against paged block size (the paper's Fig. 18), contiguous baselines as bands; beside it each
    seed's knee over its knee at block size 16 (paired: the seeds' common luck cancels). One curve per
    --kernel curve (solid: the run's kernel; dashed, then dotted: the others)."""
    plt = _plt()
    meta = result["meta"]
    fig, (ax, ax_r) = plt.subplots(1, 2, figsize=(13, 5))
    curves: dict = {}
    for e in result["allocators"].values():
        if e["allocator"].startswith("paged") and e["width"] == meta["widths"][0]:
            curves.setdefault(e.get("kernel"), []).append((int(e["allocator"].split("-")[1]), e))
    color = allocator_color("paged")
    all_sizes = sorted({bs for paged in curves.values() for bs, _ in paged})
    for k, (kernel, paged) in enumerate(curves.items()):
        paged.sort(key=lambda x: x[0])
        style = ("-", "--", ":", "-.")[k % 4]
        label = kernel or meta.get("kernel") or "paged"
        shown = [(bs, e) for bs, e in paged if e["max_rate"] is not None]
        shift = 2 ** (0.08 * k)                  # a curve's error bars beside, not on, the previous curve's
        ax.plot([bs * shift for bs, _ in shown], [e["max_rate"] for _, e in shown], color=color, marker="o", ls=style,
                label=f"paged, kernel {label}: mean over seeds (95% interval, clipped at 0; triangles: censored)")
        for bs, e in shown:
            ci = e.get("max_rate_ci")
            yerr = [[e["max_rate"] - max(ci[0], 0.0)], [ci[1] - e["max_rate"]]] if ci else None
            ax.errorbar([bs * shift], [e["max_rate"]], yerr=yerr, fmt="^" if e["max_rate_censored"] else "none",
                        color=color, capsize=4, ls=style)
        for bs, e in paged:
            if e["max_rate"] is None:
                ax.annotate("none", (bs, 0), fontsize=7, color=color)
        reference = dict(paged).get(16) or (paged[0][1] if paged else None)
        if reference is None:
            continue
        ref_bs = next(bs for bs, e in paged if e is reference)
        for i, seed in enumerate(range(meta["seed"], meta["seed"] + meta["seeds"])):
            pts = [(bs, e["max_rate_by_seed"][i] / reference["max_rate_by_seed"][i]) for bs, e in paged
                   if e["max_rate_by_seed"][i] is not None and reference["max_rate_by_seed"][i]]
            ax_r.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker="o", ls=style,
                      alpha=0.5 + 0.5 / (i + 1), label=f"{label}, seed {seed}")
        ax_r.set_ylabel(f"knee over the knee at block size {ref_bs} (same seed, same kernel)")
    for name, e in result["allocators"].items():
        if e["allocator"].startswith(("contiguous", "static")) and e["width"] == meta["widths"][0] \
                and e["max_rate"] is not None:
            ci = e.get("max_rate_ci") or [e["max_rate"]] * 2
            c = allocator_color(name)
            ax.axhline(e["max_rate"], color=c, ls="--", lw=1, label=f"{e['allocator']}: {rate_label(e)}")
            ax.axhspan(max(ci[0], 0.0), ci[1], color=c, alpha=0.12)
    ax_r.axhline(1.0, color="k", lw=0.8, ls=":")
    ax_r.set_title(f"Seed by seed: the block size's effect without the seeds' common luck "
                   f"({100 * meta['rel_tol']:g}% search resolution)", fontsize=8)
    for a in (ax, ax_r):
        a.set_xscale("log", base=2)
        a.set_xticks(all_sizes, [str(bs) for bs in all_sizes])
        a.set_xlabel("block size (tokens)")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"max rate under {meta['latency_bound']:g} s/token (req/s)")
    ax.set_title(textwrap.fill(f"Max rate by block size ({meta['workload']}); step time: {meta['step_cost']}", 100),
                 fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_swap(result: dict, path: Path) -> Path:
    """Swap out + in against recompute for one preempted sequence, by block size (the paper's Fig. 19a)."""
    plt = _plt()
    study = result["swap_vs_recompute"]
    rows = study["rows"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    sizes = [r["block_size"] for r in rows]
    ax.plot(sizes, [1e3 * r["swap_s"] for r in rows], marker="o", color="#17becf", label="swap out + swap in")
    ax.plot(sizes, [1e3 * r["swap_latency_s"] for r in rows], ls=":", color="#17becf",
            label="of which per-copy latency")
    ax.plot(sizes, [1e3 * r["recompute_s"] for r in rows], marker="s", color="#8c564b", label="recompute (prefill)")
    crossing = study["crossing"]
    if crossing is not None:
        ax.axvline(crossing, color="k", lw=0.8, ls="--", label=f"crossing: block size {crossing:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel(f"time to preempt and restore {study['tokens']} tokens (ms)")
    ax.set_title(textwrap.fill(f"Swap vs recompute ({study['swap']}; recompute at the step-time source's prefill "
                               "cost per token)", 100), fontsize=8)
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
    if len(result["meta"]["block_sizes"]) > 1:
        out.append(plot_block_size(result, run_dir / "block_size.png"))
    out.append(plot_swap(result, run_dir / "swap.png"))
    return out
