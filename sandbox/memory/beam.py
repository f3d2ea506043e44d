"""The beam model: which beams survive each step of a beam search, calibrated on the vLLM paper's Fig. 15.

A beam search of width k keeps k sequences. After every decode step each beam survives (has at
least one of the k best continuations) independently with probability ``survival``; if none does,
one (drawn uniformly) is kept. The beams that did not survive are replaced by forks of survivors
drawn uniformly with replacement. This is a Moran-type genealogy: beams coalesce towards a common
ancestor, whose KV blocks all beams share.

Survival statistics (stated, not hidden in a random language model): per step a beam survives with
probability ``survival``, so about k * (1 - survival) beams are replaced per step and a beam's own
line ends after 1 / (1 - survival) steps on average; ``lineage_stats`` measures the replacements and
the mean depth of the beams' most recent common ancestor. ``SURVIVAL`` is what
``python -m sandbox memory --calibrate-beam --distribution alpaca --sharing-requests 1000`` picks
(``sharing.calibrate_survival``: block size 16, widths 2 and 6 against the paper's 37.6% and 55.2%;
the table is in docs/memory-and-serving.md). The earlier model (a random 64-token language model,
logits ~ N(0, 2^2), top-k of k * 64 candidates) collapsed onto one beam almost every step and saved
63.6% at width 4.
"""
from __future__ import annotations

import random

from sandbox.errors import RefusedRequest

SURVIVAL = 0.95


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
