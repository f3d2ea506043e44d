"""The beam model: which beams survive each step of a beam search, calibrated on the vLLM paper's Fig. 15.

A beam search of width k keeps k sequences. After every decode step each beam survives (has at
least one of the k best continuations) independently with probability ``survival``; if none does,
one (drawn uniformly) is kept. The beams that did not survive are replaced by forks of survivors
drawn uniformly with replacement. This is a Moran-type genealogy: beams coalesce towards a common
ancestor, whose KV blocks all beams share.

Survival statistics (stated, not hidden in a random language model): per step a beam survives with
probability ``survival``, so about k * (1 - survival) beams are replaced per step and a beam's own
line ends after 1 / (1 - survival) steps on average; ``lineage_stats`` measures the replacements and
the mean depth of the beams' most recent common ancestor.

Two survival models. Constant (``survival``, the same every step): ``SURVIVAL`` fits the paper's
Alpaca range but overshoots ShareGPT's, because its common ancestor stays a fixed number of steps
back however long the output, so long outputs share more. Per output (the default): a beam is
replaced ``replacements`` times over a request's output on average, so the per-step survival is
1 - replacements / output length and the genealogy stretches with the output (beams diverge over
longer outputs). ``REPLACEMENTS`` is fitted on Alpaca-like lengths and validated on ShareGPT-like
ones (``python -m sandbox memory --validate-beam``: ``sharing.cross_validate``; the tables are in
docs/memory-and-serving.md). The earlier model (a random 64-token language model,
logits ~ N(0, 2^2), top-k of k * 64 candidates) collapsed onto one beam almost every step and saved
63.6% at width 4.
"""
from __future__ import annotations

import random

from sandbox.errors import RefusedRequest

SURVIVAL = 0.95          # the constant model, fitted on Alpaca-like lengths
REPLACEMENTS = 9.0      # the per-output model: a beam's expected replacements over the output, fitted on Alpaca


def survival_for(output_len: int, replacements: float) -> float:
    """Per-step survival of the per-output model for a request of ``output_len`` tokens (0 when the
    output is shorter than ``replacements``: every step then keeps one beam and forks it)."""
    if not replacements > 0:
        raise RefusedRequest(f"beam replacements must be > 0, got {replacements}")
    return max(0.0, 1.0 - replacements / max(int(output_len), 1))


def validate_survival(survival: float) -> float:
    if not 0.0 < survival <= 1.0:
        raise RefusedRequest(f"beam survival must lie in (0, 1], got {survival}")
    return float(survival)


def next_parents(width: int, survival: float, rng: random.Random) -> list[int] | None:
    """For each of the ``width`` new beams, the index of its parent among the current beams, sorted;
    None when every beam survived (each simply continues: the common case, kept cheap)."""
    draw = rng.random
    alive = [i for i in range(width) if draw() < survival]
    if len(alive) == width:
        return None
    if not alive:
        alive = [rng.randrange(width)]
    extra = [alive[rng.randrange(len(alive))] for _ in range(width - len(alive))]
    return sorted(alive + extra)


def lineage_stats(width: int, survival: float, steps: int, seed: int = 0) -> dict:
    """Mean beams replaced per step and mean depth (steps back) of the beams' most recent common ancestor."""
    rng = random.Random(seed)
    ancestry = [[0] for _ in range(width)]       # per beam: lineage ids, root first
    next_id, replaced, depth = 1, 0, 0
    for step in range(1, steps + 1):
        parents = next_parents(width, survival, rng) or range(width)
        replaced += width - len(set(parents))
        ancestry = [ancestry[p] + [next_id + i] for i, p in enumerate(parents)]
        next_id += width
        common = 0
        while common < len(ancestry[0]) and all(a[common] == ancestry[0][common] for a in ancestry):
            common += 1
        depth += step + 1 - common
    return dict(width=width, survival=survival, replaced_per_step=replaced / steps,
                mrca_depth=depth / steps)
