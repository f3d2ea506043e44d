"""Requests for the serving simulator: lengths, token ids, sharing structure and arrival times.

Workloads (``WORKLOADS``: name -> ``Workload``, the one table the command and the run read):
- ``sharegpt`` / ``alpaca``: one sample per request, lengths as ``sandbox.memory.distributions``;
- ``parallel``: n samples per request, each running to the request's output length (Alpaca-like
  lengths by default, as the paper's Fig. 14/15);
- ``beam``: beam search of width k (Alpaca-like lengths by default), beams decided by
  ``sandbox.memory.beam``;
- ``shared-prompt``: every prompt starts with the same system prompt of ``prefix_len`` tokens
  (the paper's Sec. 6.4 shares a few-shot translation prefix);
- ``chat``: conversations of ``turns`` turns; a turn's user message and response have one request's
  prompt and output lengths, its prompt is the whole history (earlier messages and responses) plus
  the new message, and it arrives ``think_time`` seconds (exponential mean) after the previous
  response ends; a conversation stops before a turn that would pass ``max_len``.

Token ids are random in a 32,000-token vocabulary (so unrelated prompts never share a block), except
where the workload shares them on purpose. Arrivals: a Poisson process at ``rate`` requests/s (the
gaps of one seeded draw, divided by the rate, so every rate serves the same requests), or a trace's
``arrival`` column (scaled to ``rate`` when one is given). Chat conversations start at rate / turns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sandbox.memory import distributions

VOCAB = 32_000


@dataclass(frozen=True)
class Workload:
    """A workload's defaults: its length distribution, how its requests decode, the rates the knee search
    starts from (req/s, bracketing the contiguous baselines' and paged's limits on the default cost model)
    and the requests per point of the quick run (about the same decode tokens for every workload)."""
    name: str
    lengths: str
    mode: str                     # "single", "parallel" or "beam"
    rates: tuple[float, ...]
    requests: int


WORKLOADS = {w.name: w for w in (
    Workload("sharegpt", "sharegpt", "single", (2, 3, 4, 6, 8), 1000),
    Workload("alpaca", "alpaca", "single", (10, 20, 40, 80, 160, 320), 4000),
    Workload("parallel", "alpaca", "parallel", (4, 8, 16, 32, 64), 1500),
    Workload("beam", "alpaca", "beam", (4, 8, 16, 32, 64), 1500),
    Workload("shared-prompt", "alpaca", "single", (10, 20, 40, 80, 160, 320), 4000),
    Workload("chat", "sharegpt", "single", (2, 3, 4, 6, 8), 1000),
)}


@dataclass
class Request:
    """One request (a sequence group). Token ids are lists of ints; times are seconds."""
    rid: int
    arrival: float
    prompt: list[int]
    output: list[int]              # the tokens it generates (len = output_len; every sample/beam runs to it)
    mode: str = "single"           # "single", "parallel" or "beam"
    width: int = 1                 # samples (parallel) or beams (beam)
    follow_up: "Request | None" = None   # chat: the next turn, arriving think_time after this one ends
    think_time: float = 0.0

    @property
    def output_len(self) -> int:
        return len(self.output)


@dataclass(frozen=True)
class WorkloadSpec:
    name: str = "sharegpt"
    num_requests: int = 400
    max_len: int = 2048
    lengths: str | None = None     # length distribution; None: WORKLOADS[name].lengths
    width: int = 1                 # parallel n / beam k
    prefix_len: int = 341          # shared-prompt: tokens of the shared prefix (the paper's five-shot prompt)
    turns: int = 4                 # chat: turns per conversation
    think_time: float = 5.0        # chat: mean seconds between a response and the next user message
    trace: tuple | None = field(default=None, repr=False)   # (prompts, outputs, arrivals or None)


def _ids(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, VOCAB, size=int(n)).tolist()


def _lengths(spec: WorkloadSpec, rng, n: int, max_len: int):
    if spec.trace is not None:
        return spec.trace[0][:n], spec.trace[1][:n]
    return distributions.sample_lengths(spec.lengths or WORKLOADS[spec.name].lengths, n, max_len, rng)


def build_requests(spec: WorkloadSpec, seed: int) -> list[Request]:
    """The workload's requests with unit-rate arrival times (``with_rate`` scales them); see the module docstring."""
    rng = np.random.default_rng([seed, 7])
    n = spec.num_requests if spec.trace is None else min(spec.num_requests, len(spec.trace[0]))
    if spec.name == "chat":
        return _chat(spec, rng, n)
    prefix_len = spec.prefix_len if spec.name == "shared-prompt" else 0
    prompts, outputs = _lengths(spec, rng, n, spec.max_len - prefix_len)
    system = _ids(rng, prefix_len)
    mode = WORKLOADS[spec.name].mode
    width = spec.width if mode != "single" else 1
    gaps = rng.exponential(1.0, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]
    if spec.trace is not None and spec.trace[2] is not None:
        arrivals = _unit_rate(np.asarray(spec.trace[2][:n], dtype=np.float64))
    out = [Request(i, float(arrivals[i]), system + _ids(rng, prompts[i]), _ids(rng, outputs[i]), mode, width)
           for i in range(n)]
    return sorted(out, key=lambda r: (r.arrival, r.rid))


def _unit_rate(arrivals: np.ndarray) -> np.ndarray:
    """Trace arrivals shifted to start at 0 and scaled to a mean rate of 1 request/s (with_rate rescales)."""
    a = arrivals - arrivals.min()
    span = a.max()
    return a * ((len(a) - 1) / span) if span > 0 else a


def _chat(spec: WorkloadSpec, rng, n: int) -> list[Request]:
    """Conversations of up to spec.turns turns; n requests in all; starts at 1 / turns conversations per second."""
    user, reply = _lengths(spec, rng, n, spec.max_len)
    firsts, rid, t = [], 0, 0.0
    while rid < n:
        history: list[int] = []
        previous = None
        for turn in range(spec.turns):
            if rid >= n:
                break
            message = _ids(rng, user[rid])
            prompt = history + message
            output = _ids(rng, reply[rid])
            if len(prompt) + len(output) > spec.max_len:
                break
            req = Request(rid, t if turn == 0 else 0.0, prompt, output,
                          think_time=float(rng.exponential(spec.think_time)))
            rid += 1
            if previous is None:
                firsts.append(req)
            else:
                previous.follow_up = req
            previous, history = req, prompt + output
        t += float(rng.exponential(spec.turns))
    return firsts


def with_rate(requests: list[Request], rate: float) -> list[Request]:
    """Copies whose first-arrival times are divided by ``rate`` (requests/s); chat follow-ups keep their think times."""
    def scaled(r: Request | None) -> Request | None:
        if r is None:
            return None
        return Request(r.rid, r.arrival / rate, r.prompt, r.output, r.mode, r.width, scaled(r.follow_up), r.think_time)
    return [scaled(r) for r in requests]


def count_requests(requests: list[Request]) -> int:
    """Requests including chat follow-ups."""
    total = 0
    for r in requests:
        while r is not None:
            total += 1
            r = r.follow_up
    return total
