"""The highest rate an allocator sustains: a bracketing scan, the search extended past the top, bisection
for the knee, and a confidence interval over seeds.

One seed's knee (``find_knee``): rates of the grid are served from the top down until one meets the
latency bound; if even the grid's top meets it, the search doubles the rate up to ``max_extend`` times;
then bisection between the last rate that met the bound and the first that missed it until they lie within
``rel_tol`` of each other. The knee is the highest rate measured to meet the bound. It is *censored*
(a lower bound, not a measurement) when the extended search never found a rate that misses the bound, and
``None`` when the lowest rate tried (the grid's bottom, halved up to ``max_extend`` times) misses it.

Over seeds (``combine``): the mean knee, a two-sided 95% Student-t interval of the mean, and the
censoring carried over (any censored seed makes the mean a lower bound). ``paired_ratio``: one allocator's
knee over another's seed by seed (both served the same requests), mean and interval: the seeds' common
luck (an easy draw of lengths lifts every allocator) cancels, so the ratio is known far better than either rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import mean, stdev
from typing import Callable

# Two-sided 95% Student-t quantiles by degrees of freedom (1..30); beyond, the normal 1.96.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)
REL_TOL = 0.05
MAX_EXTEND = 6


@dataclass
class Knee:
    """One seed's search: the knee (None: no rate tried meets the bound), censoring and every rate tried."""
    rate: float | None
    censored: bool
    tried: dict = field(default_factory=dict)     # rate -> mean normalized latency (s/token)


def find_knee(latency: Callable[[float], float], grid, bound: float, rel_tol: float = REL_TOL,
              max_extend: int = MAX_EXTEND) -> Knee:
    """latency(rate) -> the measured mean normalized latency; see the module docstring."""
    tried: dict[float, float] = {}

    def meets(rate: float) -> bool:
        if rate not in tried:
            tried[rate] = latency(rate)
        return tried[rate] <= bound        # NaN (nothing finished) misses

    grid = sorted(grid, reverse=True)       # past the knee a point is cheap (big batches, few steps)
    low = high = None
    for rate in grid:
        if not meets(rate):
            high = rate
        else:
            low = rate
            break
    if high is None:                        # the top met the bound: look above it
        rate = grid[0]
        for _ in range(max_extend):
            rate *= 2
            if not meets(rate):
                high = rate
                break
            low = rate
        if high is None:
            return Knee(low, True, tried)
    if low is None:                         # even the bottom misses: look below it
        rate = grid[-1]
        for _ in range(max_extend):
            rate /= 2
            if meets(rate):
                low = rate
                break
            high = rate
        if low is None:
            return Knee(None, False, tried)
    while (high - low) > rel_tol * high:
        mid = (low + high) / 2
        if meets(mid):
            low = mid
        else:
            high = mid
    return Knee(low, False, tried)


def t95(samples: int) -> float:
    """The two-sided 95% Student-t quantile for a mean of `samples` values (samples - 1 degrees of freedom)."""
    df = samples - 1
    return _T95[df - 1] if df <= len(_T95) else 1.96


def combine(knees: list[Knee]) -> dict:
    """max_rate (mean over seeds), max_rate_ci [low, high] (None with one seed), max_rate_censored, per seed.

    A seed with no sustained rate makes the whole allocator's max_rate None: a mean cannot include "none"."""
    rates = [k.rate for k in knees]
    out = dict(max_rate_by_seed=rates, max_rate_censored=any(k.censored for k in knees))
    if any(r is None for r in rates):
        return dict(out, max_rate=None, max_rate_ci=None)
    m, ci = _mean_ci(rates)
    return dict(out, max_rate=m, max_rate_ci=ci)


def _mean_ci(values: list[float]) -> tuple[float, list[float] | None]:
    m = mean(values)
    if len(values) < 2:
        return m, None
    half = t95(len(values)) * stdev(values) / math.sqrt(len(values))
    return m, [m - half, m + half]


def paired_ratio(top: dict, base: dict) -> dict | None:
    """top's knee / base's knee per seed (entries as combine() returns them); None when a seed has no knee.
    censored: top's knee was censored (the ratio is a lower bound) or base's (an upper bound)."""
    pairs = list(zip(top["max_rate_by_seed"], base["max_rate_by_seed"]))
    if not pairs or any(a is None or b is None for a, b in pairs):
        return None
    by_seed = [a / b for a, b in pairs]
    m, ci = _mean_ci(by_seed)
    return dict(ratio=m, ratio_ci=ci, ratio_by_seed=by_seed,
                censored=bool(top["max_rate_censored"] or base["max_rate_censored"]))


def knee_point(entry: dict, seed: int) -> dict:
    """The point at `seed`'s knee (the highest rate it met the bound at), else its lowest rate tried."""
    points = sorted((p for p in entry["points"] if p["seed"] == seed), key=lambda p: p["rate"])
    knee = entry["max_rate_by_seed"][0] if entry.get("max_rate_by_seed") else None
    return next((p for p in points if p["rate"] == knee), points[0])
