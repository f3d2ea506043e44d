"""The study's figure: utilization and concurrency against block size, contiguous as reference lines."""
from __future__ import annotations

from pathlib import Path


def plot_study(result: dict, path: Path) -> Path:
    """Two panels (log2 block-size axis) from a study result dict; written as PNG to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paged = result["paged"]
    contiguous = result["contiguous"]
    variants = result.get("contiguous_variants", [])
    sizes = [row["block_size"] for row in paged]
    fig, (ax_u, ax_c) = plt.subplots(1, 2, figsize=(12, 6))

    ax_u.plot(sizes, [100 * r["utilization"] for r in paged], "o-", color="C0", label="paged: utilization")
    ax_u.plot(sizes, [100 * r["budget_utilization"] for r in paged], "s--", color="C0", alpha=0.6,
              label="paged: share of budget holding tokens")
    ax_u.axhline(100 * contiguous["utilization"], color="C3",
                 label=f"contiguous ({contiguous['reserve']}): utilization")
    ax_u.axhline(100 * contiguous["budget_utilization"], color="C3", ls="--", alpha=0.6,
                 label=f"contiguous ({contiguous['reserve']}): share of budget")
    for i, v in enumerate(variants):
        ax_u.axhline(100 * v["utilization"], color=f"C{4 + i}", ls=":",
                     label=f"contiguous ({v['reserve']}): utilization")
    ax_u.set_ylim(0, 105)
    ax_u.set_ylabel("% of KV slots holding real tokens")
    ax_u.set_title("Memory utilization")

    ax_c.plot(sizes, [r["max_concurrent_requests"] for r in paged], "o-", color="C0", label="paged: peak")
    ax_c.plot(sizes, [r["mean_concurrent_requests"] for r in paged], "s--", color="C0", alpha=0.6,
              label="paged: mean")
    ax_c.axhline(contiguous["max_concurrent_requests"], color="C3",
                 label=f"contiguous ({contiguous['reserve']}): peak")
    ax_c.axhline(contiguous["mean_concurrent_requests"], color="C3", ls="--", alpha=0.6,
                 label=f"contiguous ({contiguous['reserve']}): mean")
    for i, v in enumerate(variants):
        ax_c.axhline(v["max_concurrent_requests"], color=f"C{4 + i}", ls=":",
                     label=f"contiguous ({v['reserve']}): peak")
    ax_c.set_ylim(0, None)
    ax_c.set_ylabel("concurrent requests")
    ax_c.set_title("Requests running at once")

    for ax in (ax_u, ax_c):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel("block size (tokens, log2 scale)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    meta = result["meta"]
    fig.suptitle(f"Paged vs contiguous KV cache: {meta['workload']}, budget {meta['budget_tokens']:,} tokens, "
                 f"max length {meta['max_len']}, {meta['lengths']['num_requests']} requests, seed {meta['seed']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
