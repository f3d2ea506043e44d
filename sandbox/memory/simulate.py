"""Decode-step simulation of one KV budget under contiguous reservation or paged allocation.

All requests arrive at step 0 (an offline batch) and are admitted first come, first served: the
head of the queue waits until it fits and nobody overtakes it. Every running request generates
one token per step; a finished request frees its memory at the end of that step.

Contiguous (pre-vLLM): a request reserves one range of ``reserve`` slots for its whole life, placed
first-fit in one arena (a sorted free list of address ranges, coalesced on free). ``reserve`` is
``max_len`` by default (the system cannot know the output length), ``pow2`` the next power of two
of the true length, ``oracle`` the true length (the Orca variants of the vLLM paper).

Paged: a ``BlockManager`` over ``budget_tokens // block_size`` blocks. Admission allocates the
prompt's blocks and keeps a watermark of 1% of the blocks free (as vLLM does) so that admitted
requests can grow. When a running request needs a block and none is free, the most recently
admitted running request is preempted: its blocks are freed and it returns to the head of the
queue to be recomputed later (its prompt becomes prompt + tokens generated so far).

Metrics, sampled once per step after the step's tokens are written (so every step weighs the same):
- utilization: slots holding real tokens / slots in use (reserved or allocated), as a ratio of
  sums over steps;
- internal_waste: in-use slots holding no token / slots in use (= 1 - utilization here);
- external_waste: free memory in pieces too small for the head of the queue (a hole smaller than
  its reservation; for paged, only the budget left over below one block), / budget, averaged over
  steps; 0 in steps where nobody waits;
- budget_utilization: real tokens / budget (the share of the whole KV memory holding tokens);
- max_concurrent_requests and mean_concurrent_requests: running requests per step.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

from sandbox.paging import BlockManager, OutOfBlocks

RESERVE_POLICIES = ("max", "pow2", "oracle")


@dataclass
class SimResult:
    """One configuration's figures (see the module docstring for their definitions)."""
    allocator: str
    block_size: int | None
    reserve: str | None
    utilization: float
    internal_waste: float
    external_waste: float
    budget_utilization: float
    max_concurrent_requests: int
    mean_concurrent_requests: float
    steps: int
    finished: int
    preemptions: int
    hit_step_cap: bool
    budget_tokens: int
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


class FirstFitArena:
    """Address ranges [0, size) handed out first-fit; free ranges kept sorted and coalesced."""

    def __init__(self, size: int):
        self.size = size
        self.starts = [0]
        self.lengths = [size]

    def alloc(self, length: int) -> int:
        """Start of the first free range that holds ``length``, or -1 (nothing changes then)."""
        for i, free in enumerate(self.lengths):
            if free >= length:
                start = self.starts[i]
                if free == length:
                    del self.starts[i], self.lengths[i]
                else:
                    self.starts[i] += length
                    self.lengths[i] -= length
                return start
        return -1

    def free(self, start: int, length: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        assert i == len(self.starts) or start + length <= self.starts[i], "double free or overlap"
        assert i == 0 or self.starts[i - 1] + self.lengths[i - 1] <= start, "double free or overlap"
        if i < len(self.starts) and start + length == self.starts[i]:
            self.starts[i] = start
            self.lengths[i] += length
        else:
            self.starts.insert(i, start)
            self.lengths.insert(i, length)
        if i > 0 and self.starts[i - 1] + self.lengths[i - 1] == start:
            self.lengths[i - 1] += self.lengths[i]
            del self.starts[i], self.lengths[i]

    def free_below(self, length: int) -> int:
        """Free slots in ranges shorter than ``length``."""
        return sum(f for f in self.lengths if f < length)


def reservation(prompt: int, output: int, max_len: int, policy: str) -> int:
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(max_len, 1 << (prompt + output - 1).bit_length())
    if policy == "oracle":
        return prompt + output
    raise ValueError(f"unknown reserve policy {policy!r}; choose one of {', '.join(RESERVE_POLICIES)}")


def _check(prompts, outputs, budget_tokens: int, max_len: int) -> None:
    if len(prompts) != len(outputs) or len(prompts) == 0:
        raise ValueError("prompts and outputs must be non-empty and of equal length")
    if budget_tokens < max_len:
        raise ValueError(f"budget_tokens ({budget_tokens}) must hold at least one max_len ({max_len}) request")
    if min(prompts) < 1 or min(outputs) < 1 or max(p + o for p, o in zip(prompts, outputs)) > max_len:
        raise ValueError(f"every request needs prompt >= 1, output >= 1 and prompt + output <= max_len ({max_len})")


def _result(allocator, block_size, reserve, acc, budget, **extra) -> SimResult:
    steps = acc["steps"]
    used = acc["used"]
    return SimResult(
        allocator=allocator, block_size=block_size, reserve=reserve,
        utilization=acc["real"] / used if used else 0.0,
        internal_waste=(used - acc["real"]) / used if used else 0.0,
        external_waste=acc["external"] / (steps * budget) if steps else 0.0,
        budget_utilization=acc["real"] / (steps * budget) if steps else 0.0,
        max_concurrent_requests=acc["max_running"],
        mean_concurrent_requests=acc["running"] / steps if steps else 0.0,
        steps=steps, budget_tokens=budget, **extra)


def simulate_contiguous(prompts, outputs, budget_tokens: int, max_len: int, reserve: str = "max",
                        max_steps: int = 10**6) -> SimResult:
    """Contiguous reservation placed first-fit in one arena; see the module docstring."""
    prompts, outputs = [int(p) for p in prompts], [int(o) for o in outputs]
    _check(prompts, outputs, budget_tokens, max_len)
    sizes = [reservation(p, o, max_len, reserve) for p, o in zip(prompts, outputs)]
    arena = FirstFitArena(budget_tokens)
    waiting = deque(range(len(prompts)))
    running: list[list[int]] = []      # [request, start, tokens left to generate]
    acc = dict(steps=0, real=0, used=0, external=0, running=0, max_running=0)
    real = used = finished = 0
    while (waiting or running) and acc["steps"] < max_steps:
        while waiting:
            r = waiting[0]
            start = arena.alloc(sizes[r])
            if start < 0:
                break
            waiting.popleft()
            running.append([r, start, outputs[r]])
            real += prompts[r]
            used += sizes[r]
        real += len(running)           # one token each, written this step
        acc["steps"] += 1
        acc["real"] += real
        acc["used"] += used
        acc["running"] += len(running)
        acc["max_running"] = max(acc["max_running"], len(running))
        if waiting:
            acc["external"] += arena.free_below(sizes[waiting[0]])
        done = False
        for entry in running:
            entry[2] -= 1
            if entry[2] == 0:
                r, start, _ = entry
                arena.free(start, sizes[r])
                real -= prompts[r] + outputs[r]
                used -= sizes[r]
                finished += 1
                done = True
        if done:
            running = [e for e in running if e[2]]
    assert waiting or running or arena.lengths == [budget_tokens], "arena leaked"
    return _result("contiguous", None, reserve, acc, budget_tokens, finished=finished, preemptions=0,
                   hit_step_cap=bool(waiting or running))


def simulate_paged(prompts, outputs, budget_tokens: int, block_size: int, max_len: int,
                   max_steps: int = 10**6, watermark: float = 0.01) -> SimResult:
    """Paged allocation with a real BlockManager; see the module docstring."""
    prompts, outputs = [int(p) for p in prompts], [int(o) for o in outputs]
    _check(prompts, outputs, budget_tokens, max_len)
    num_blocks = budget_tokens // block_size
    if num_blocks * block_size < max_len:
        raise ValueError(f"budget_tokens ({budget_tokens}) holds fewer than max_len ({max_len}) slots in "
                         f"blocks of {block_size}")
    bm = BlockManager(num_blocks, block_size)
    append, free, allocate = bm.append_slot, bm.free, bm.allocate
    keep_free = max(1, int(num_blocks * watermark))
    leftover = budget_tokens - num_blocks * block_size
    length = list(prompts)             # tokens held (prompt + generated) while running
    left = list(outputs)               # tokens still to generate
    waiting = deque(range(len(prompts)))
    running: list[int] = []            # admission order: the last one is preempted first
    acc = dict(steps=0, real=0, used=0, external=0, running=0, max_running=0)
    real = finished = preemptions = 0
    while (waiting or running) and acc["steps"] < max_steps:
        while waiting:
            r = waiting[0]
            need = -(-length[r] // block_size)
            if need > bm.num_free_blocks - (keep_free if running else 0):
                break
            waiting.popleft()
            allocate(r, length[r])
            running.append(r)
            real += length[r]
        i = 0
        while i < len(running):
            r = running[i]
            try:
                append(r)
            except OutOfBlocks:
                victim = running.pop()
                free(victim)
                real -= length[victim]
                waiting.appendleft(victim)
                preemptions += 1
                continue
            length[r] += 1
            left[r] -= 1
            real += 1
            i += 1
        acc["steps"] += 1
        acc["real"] += real
        acc["used"] += bm.num_used_blocks * block_size
        acc["running"] += len(running)
        acc["max_running"] = max(acc["max_running"], len(running))
        if waiting:
            acc["external"] += leftover
        done = False
        for r in running:
            if left[r] == 0:
                free(r)
                real -= length[r]
                finished += 1
                done = True
        if done:
            running = [r for r in running if left[r]]
    assert waiting or running or bm.num_free_blocks == num_blocks, "blocks leaked"
    return _result("paged", block_size, None, acc, budget_tokens, finished=finished, preemptions=preemptions,
                   hit_step_cap=bool(waiting or running))


def budget_from_model(gb: float, num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """KV tokens that fit in ``gb`` * 1e9 bytes: K and V per layer per kv head per dim."""
    per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    return int(gb * 1e9 // per_token)


def lengths_summary(prompts, outputs) -> dict:
    p, o = np.asarray(prompts), np.asarray(outputs)
    return dict(num_requests=int(p.size), prompt_mean=float(p.mean()), output_mean=float(o.mean()),
                prompt_max=int(p.max()), output_max=int(o.max()))
