"""Request lengths for the memory study: named synthetic distributions or a CSV trace.

Each request is ``(prompt_len, output_len)`` with both >= 1 and ``prompt_len + output_len <= max_len``.

- ``sharegpt``: long-tailed lognormals whose means, after clipping, are about 161 prompt and 338
  output tokens (the ShareGPT means reported in the vLLM paper). sigma 1.0 for both.
- ``alpaca``: the same for about 19 / 58 tokens (Alpaca); sigma 0.7 prompt, 1.0 output.
- ``uniform``: prompt uniform on 1..321 and output on 1..675 (the ShareGPT means, no tail).
- a trace: a CSV with a header holding ``prompt_len`` and ``output_len`` columns and, optionally,
  ``arrival`` (seconds from the start, finite and >= 0; any order).

A prompt is clipped to ``[1, max_len - 1]``, then its output to ``[1, max_len - prompt]``. The
lognormal's mu is solved so that the clipped continuous mean hits the target.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from sandbox.errors import RefusedRequest

# name -> ((prompt mean, prompt sigma), (output mean, output sigma))
LOGNORMAL = {
    "sharegpt": ((161.0, 1.0), (338.0, 1.0)),
    "alpaca": ((19.0, 0.7), (58.0, 1.0)),
}
UNIFORM_MEANS = (161, 338)
DISTRIBUTIONS = (*LOGNORMAL, "uniform")


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def clipped_lognormal_mean(mu: float, sigma: float, low: float, high: float) -> float:
    """E[clip(X, low, high)] for X = exp(N(mu, sigma^2))."""
    a, b = math.log(low), math.log(high)
    middle = math.exp(mu + sigma * sigma / 2) * (_phi((b - mu - sigma * sigma) / sigma)
                                                  - _phi((a - mu - sigma * sigma) / sigma))
    return low * _phi((a - mu) / sigma) + middle + high * (1.0 - _phi((b - mu) / sigma))


def fit_mu(mean: float, sigma: float, low: float, high: float) -> float:
    """The mu whose lognormal, clipped to [low, high], has this mean (bisection; the mean grows with mu)."""
    if not low < mean < high:
        raise RefusedRequest(f"mean {mean} must lie strictly between {low} and {high}")
    lo, hi = math.log(low) - 10 * sigma, math.log(high) + 10 * sigma
    for _ in range(200):
        mid = (lo + hi) / 2
        if clipped_lognormal_mean(mid, sigma, low, high) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sample_lengths(name: str, num_requests: int, max_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(prompt_lens, output_lens), int64 arrays [num_requests], from a named distribution."""
    if name not in DISTRIBUTIONS:
        raise RefusedRequest(f"unknown distribution {name!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    if max_len < 2:
        raise RefusedRequest(f"max_len must be >= 2 (one prompt and one output token), got {max_len}")
    if name != "uniform" and max_len < 3:
        raise RefusedRequest(f"--max-len must be >= 3 for {name}-like lengths (their lognormal means are fitted "
                             f"between 1 token and half of --max-len), got {max_len}")
    if name == "uniform":
        prompt = rng.integers(1, 2 * UNIFORM_MEANS[0], size=num_requests)
        output = rng.integers(1, 2 * UNIFORM_MEANS[1], size=num_requests)
    else:
        (pm, ps), (om, os_) = LOGNORMAL[name]
        high = float(max_len)
        prompt = rng.lognormal(fit_mu(min(pm, high / 2), ps, 1.0, high), ps, size=num_requests)
        output = rng.lognormal(fit_mu(min(om, high / 2), os_, 1.0, high), os_, size=num_requests)
    prompt = np.clip(np.rint(prompt), 1, max_len - 1).astype(np.int64)
    output = np.clip(np.rint(output), 1, max_len - prompt).astype(np.int64)
    return prompt, output


def load_trace(path, max_len: int, num_requests: int | None = None):
    """(prompt_lens, output_lens, arrivals or None) from a CSV trace (first num_requests rows).

    prompt_lens and output_lens are int64 [R]; arrivals float64 [R] seconds when the trace has an
    ``arrival`` column, else None.
    """
    path = Path(path)
    if not path.is_file():
        raise RefusedRequest(f"trace {str(path)!r} is not a readable file")
    try:
        return _read_trace(path, max_len, num_requests)
    except UnicodeDecodeError as exc:
        raise RefusedRequest(f"trace {str(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _read_trace(path: Path, max_len: int, num_requests: int | None):
    prompts, outputs, arrivals = [], [], []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = set(reader.fieldnames or ())
        missing = {"prompt_len", "output_len"} - fields
        if missing:
            raise RefusedRequest(f"trace {str(path)!r} needs a header with columns prompt_len,output_len "
                                 f"(missing {', '.join(sorted(missing))})")
        timed = "arrival" in fields
        for line, row in enumerate(reader, start=2):
            if num_requests is not None and len(prompts) >= num_requests:
                break
            try:
                p, o = int(row["prompt_len"]), int(row["output_len"])
            except (TypeError, ValueError):
                raise RefusedRequest(f"trace {str(path)!r} line {line}: prompt_len and output_len must be "
                                     f"integers, got {row['prompt_len']!r}, {row['output_len']!r}") from None
            if p < 1 or o < 1 or p + o > max_len:
                raise RefusedRequest(f"trace {str(path)!r} line {line}: need prompt_len >= 1, output_len >= 1 and "
                                     f"prompt_len + output_len <= max_len ({max_len}), got {p} + {o}")
            if timed:
                arrivals.append(_arrival(path, line, row["arrival"]))
            prompts.append(p)
            outputs.append(o)
    if not prompts:
        raise RefusedRequest(f"trace {str(path)!r} has no requests")
    return (np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64),
            np.array(arrivals, dtype=np.float64) if timed else None)


def _arrival(path: Path, line: int, text) -> float:
    try:
        t = float(text)
    except (TypeError, ValueError):
        t = math.nan
    if not (math.isfinite(t) and t >= 0):
        raise RefusedRequest(f"trace {str(path)!r} line {line}: arrival must be a finite number of seconds >= 0, "
                             f"got {text!r}")
    return t
