"""One simulated point's figures (``Tally`` while it runs, ``summarize`` after).

Latency figures are per request, over the requests that arrive after the warm-up (the first ``WARMUP``
fraction of arrivals, which meet an empty system, are dropped from them): normalized latency =
(finish - arrival) / output tokens (the paper's Fig. 12 metric, seconds per token); time to first
token = first emission - arrival. Throughput = finished requests / (last finish - first arrival). Memory shares as
``sandbox.memory.waste``, averaged over the sampled steps; ``sharing_saved`` = 1 - blocks in use /
blocks the same sequences would hold unshared (the paper's Fig. 15 metric, here inside the budget
and over time); ``prefix_hit_rate`` = prompt tokens found in the cache / prompt tokens admitted
(re-admissions after preemption included).
"""
from __future__ import annotations

import numpy as np

from sandbox.memory.waste import CATEGORIES, WasteAccumulator

WARMUP = 0.1


class Tally:
    """Counters the engine updates as it steps."""

    def __init__(self, budget: int):
        self.waste = WasteAccumulator(budget)
        self.steps = self.batched_tokens = self.seq_steps = self.peak_seqs = 0
        self.swap_bytes, self.swap_seconds = 0, 0.0
        self.preemptions = {"recompute": 0, "swap": 0}
        self.recomputed = self.regenerated = 0
        self.prompt_tokens = self.hit_tokens = 0
        self.blocks_with = self.blocks_without = 0
        self.timeline: list[tuple] = []          # (clock s, tokens, reserved, internal, external, running seqs)
        self.finished_groups = 0

    def add_step(self, tokens: int, seqs: int, swap_bytes: int, swap_s: float) -> None:
        self.steps += 1
        self.batched_tokens += tokens
        self.seq_steps += seqs
        self.peak_seqs = max(self.peak_seqs, seqs)
        self.swap_bytes += swap_bytes
        self.swap_seconds += swap_s

    def sample(self, clock: float, b: dict, seqs: int) -> None:
        self.waste.add(b["tokens"], b["reserved"], b["internal"], b["external"])
        self.blocks_with += b["blocks_with"]
        self.blocks_without += b["blocks_without"]
        self.timeline.append((clock, b["tokens"], b["reserved"], b["internal"], b["external"], seqs))

    def admitted(self, g) -> None:
        self.prompt_tokens += g.context
        self.hit_tokens += g.cached
        if g.discarded:
            self.recomputed += max(0, min(g.discarded, g.context) - g.cached)
            g.discarded = 0

    def preempted(self, kind: str) -> None:
        self.preemptions[kind] += 1

    def finished(self, g) -> None:
        self.finished_groups += 1


def _pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def measured(done: list, warmup: float) -> list:
    """The groups that arrived after the first `warmup` fraction of arrivals (all of them when that is none)."""
    arrivals = sorted(g.arrival for g in done)
    skip = int(warmup * len(arrivals))
    if skip >= len(arrivals):
        return list(done)
    cut = arrivals[skip]
    return [g for g in done if g.arrival >= cut]


def summarize(engine, rate: float, wall_s: float, warmup: float = WARMUP) -> dict:
    """The point's figures as a flat dict (the CSV row and the JSON point)."""
    t, done = engine.tally, engine.done
    kept = measured(done, warmup)
    norm = [(g.finish - g.arrival) / g.req.output_len for g in kept]
    ttft = [g.first_token - g.arrival for g in kept]
    start = min((g.arrival for g in done), default=0.0)
    span = max((g.finish for g in done), default=0.0) - start
    shares = t.waste.shares()
    out_tokens = sum(g.width * g.req.output_len for g in done)
    return dict(
        allocator=engine.kv.name, rate=rate, requests=len(done), measured_requests=len(kept),
        throughput=len(done) / span if span > 0 else 0.0, output_tokens_per_s=out_tokens / span if span > 0 else 0.0,
        normalized_latency=float(np.mean(norm)) if norm else float("nan"),
        normalized_latency_p50=_pct(norm, 50), normalized_latency_p99=_pct(norm, 99),
        ttft=float(np.mean(ttft)) if ttft else float("nan"), ttft_p50=_pct(ttft, 50), ttft_p99=_pct(ttft, 99),
        **{f"{c}_share": shares[c] for c in CATEGORIES},
        mean_running_seqs=t.seq_steps / t.steps if t.steps else 0.0, peak_running_seqs=t.peak_seqs,
        preemptions=sum(t.preemptions.values()), recompute_preemptions=t.preemptions["recompute"],
        swap_preemptions=t.preemptions["swap"], recomputed_tokens=t.recomputed + t.regenerated,
        recompute_seconds=(t.recomputed + t.regenerated) * engine.cost.prefill_token_time(),
        swapped_bytes=t.swap_bytes, swap_seconds=t.swap_seconds,
        prefix_hit_rate=t.hit_tokens / t.prompt_tokens if t.prompt_tokens else 0.0,
        sharing_saved=1.0 - t.blocks_with / t.blocks_without if t.blocks_without else 0.0,
        steps=t.steps, simulated_s=engine.clock, wall_s=wall_s)
