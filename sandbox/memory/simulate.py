"""Decode-step simulation of one KV budget under contiguous reservation or paged allocation (offline).

All requests arrive at step 0 (an offline batch; a trace's ``arrival`` column only orders the queue)
and are admitted first come, first served: the head of the queue waits until it fits and nobody
overtakes it; at most ``max_num_seqs`` run at once (vLLM's default 256). Every running request
generates one token per step; a finished request frees its memory at the end of that step. A
request's final length is prompt + output slots. ``python -m sandbox serving`` adds time, arrivals,
prefill budgets and the cost of preemption.

Contiguous (pre-vLLM): a request reserves one range of ``reserve`` slots for its whole life, placed
first-fit in one arena (``sandbox.memory.arena``): ``max_len`` by default, ``pow2`` the next power of
two of the true length, ``oracle`` the true length (the Orca variants of the vLLM paper).

Paged: a ``BlockManager`` over ``budget_tokens // block_size`` blocks. Admission allocates the
prompt's blocks and keeps a watermark of 1% of the blocks free (as vLLM does). When a running
request needs a block and none is free, the most recently admitted running request is preempted: its
blocks are freed and it returns to the head of the queue to be recomputed (its prompt becomes prompt
+ tokens generated so far; those tokens are counted in ``recomputed_tokens``).

Figures: the five shares of ``sandbox.memory.waste`` (tokens, reserved, internal, external, free of
the whole budget, averaged over steps), ``utilization`` (tokens / allocated slots), and running
requests per step (peak and mean).
"""
from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

from sandbox.memory.arena import FirstFitArena, reservation
from sandbox.memory.waste import WasteAccumulator
from sandbox.paging import BlockManager, OutOfBlocks
from sandbox.errors import RefusedRequest

DEFAULT_MAX_NUM_SEQS = 256


@dataclass
class SimResult:
    """One configuration's figures (see the module docstring for their definitions)."""
    allocator: str
    block_size: int | None
    reserve: str | None
    tokens: float
    reserved: float
    internal: float
    external: float
    free: float
    utilization: float
    max_concurrent_requests: int
    mean_concurrent_requests: float
    steps: int
    finished: int
    preemptions: int
    recomputed_tokens: int
    hit_step_cap: bool
    budget_tokens: int
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _check(prompts, outputs, budget_tokens: int, max_len: int, max_num_seqs: int) -> None:
    if len(prompts) != len(outputs) or len(prompts) == 0:
        raise RefusedRequest("prompts and outputs must be non-empty and of equal length")
    if budget_tokens < max_len:
        raise RefusedRequest(f"budget_tokens ({budget_tokens}) must hold at least one max_len ({max_len}) request")
    if min(prompts) < 1 or min(outputs) < 1 or max(p + o for p, o in zip(prompts, outputs)) > max_len:
        raise RefusedRequest(f"every request needs prompt >= 1, output >= 1 and prompt + output <= max_len ({max_len})")
    if max_num_seqs < 1:
        raise RefusedRequest(f"max_num_seqs must be >= 1, got {max_num_seqs}")


def _result(allocator, block_size, reserve, waste: WasteAccumulator, acc: dict, **extra) -> SimResult:
    steps = waste.steps
    return SimResult(allocator=allocator, block_size=block_size, reserve=reserve, **waste.shares(),
                     utilization=waste.utilization, max_concurrent_requests=acc["max_running"],
                     mean_concurrent_requests=acc["running"] / steps if steps else 0.0, steps=steps,
                     budget_tokens=waste.budget, **extra)


def simulate_contiguous(prompts, outputs, budget_tokens: int, max_len: int, reserve: str = "max",
                        max_steps: int = 10**6, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> SimResult:
    """Contiguous reservation placed first-fit in one arena; see the module docstring."""
    prompts, outputs = [int(p) for p in prompts], [int(o) for o in outputs]
    _check(prompts, outputs, budget_tokens, max_len, max_num_seqs)
    sizes = [reservation(p, o, max_len, reserve) for p, o in zip(prompts, outputs)]
    arena = FirstFitArena(budget_tokens)
    waiting = deque(range(len(prompts)))
    running: list[list[int]] = []      # [request, start, tokens left to generate]
    waste, acc = WasteAccumulator(budget_tokens), dict(running=0, max_running=0)
    real = used = internal = finished = 0
    while (waiting or running) and waste.steps < max_steps:
        while waiting and len(running) < max_num_seqs:
            r = waiting[0]
            start = arena.alloc(sizes[r])
            if start < 0:
                break
            waiting.popleft()
            running.append([r, start, outputs[r]])
            real += prompts[r]
            used += sizes[r]
            internal += sizes[r] - min(sizes[r], prompts[r] + outputs[r])
        real += len(running)           # one token each, written this step
        external = arena.free_below(sizes[waiting[0]]) if waiting else 0
        waste.add(real, used - real - internal, internal, external)
        acc["running"] += len(running)
        acc["max_running"] = max(acc["max_running"], len(running))
        done = False
        for entry in running:
            entry[2] -= 1
            if entry[2] == 0:
                r, start, _ = entry
                arena.free(start, sizes[r])
                real -= prompts[r] + outputs[r]
                used -= sizes[r]
                internal -= sizes[r] - min(sizes[r], prompts[r] + outputs[r])
                finished += 1
                done = True
        if done:
            running = [e for e in running if e[2]]
    assert waiting or running or arena.lengths == [budget_tokens], "arena leaked"
    return _result("contiguous", None, reserve, waste, acc, finished=finished, preemptions=0, recomputed_tokens=0,
                   hit_step_cap=bool(waiting or running))


def simulate_paged(prompts, outputs, budget_tokens: int, block_size: int, max_len: int,
                   max_steps: int = 10**6, watermark: float = 0.01,
                   max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> SimResult:
    """Paged allocation with a real BlockManager; see the module docstring."""
    prompts, outputs = [int(p) for p in prompts], [int(o) for o in outputs]
    _check(prompts, outputs, budget_tokens, max_len, max_num_seqs)
    bs = block_size
    num_blocks = budget_tokens // bs
    if num_blocks * bs < max_len:
        raise RefusedRequest(f"budget_tokens ({budget_tokens}) holds fewer than max_len ({max_len}) slots in "
                             f"blocks of {bs}")
    bm = BlockManager(num_blocks, bs)
    append, free, allocate = bm.append_slot, bm.free, bm.allocate
    keep_free = max(1, int(num_blocks * watermark))
    leftover = budget_tokens - num_blocks * bs
    length = list(prompts)             # tokens held (prompt + generated) while running
    left = list(outputs)               # tokens still to generate
    # The last block of a request's final length holds `tail` never-filled slots (internal waste) once
    # its length passes `last_start`; `above` marks the requests whose last block is allocated.
    final = [p + o for p, o in zip(prompts, outputs)]
    last_start = [(-(-f // bs) - 1) * bs for f in final]
    tail = [-(-f // bs) * bs - f for f in final]
    above = [False] * len(prompts)
    waiting = deque(range(len(prompts)))
    running: list[int] = []            # admission order: the last one is preempted first
    waste, acc = WasteAccumulator(budget_tokens), dict(running=0, max_running=0)
    real = internal = finished = preemptions = recomputed = 0
    while (waiting or running) and waste.steps < max_steps:
        while waiting and len(running) < max_num_seqs:
            r = waiting[0]
            if -(-length[r] // bs) > bm.num_free_blocks - (keep_free if running else 0):
                break
            waiting.popleft()
            allocate(r, length[r])
            running.append(r)
            real += length[r]
            if length[r] > last_start[r]:
                above[r] = True
                internal += tail[r]
        i = 0
        while i < len(running):
            r = running[i]
            try:
                append(r)
            except OutOfBlocks:
                victim = running.pop()
                free(victim)
                real -= length[victim]
                recomputed += length[victim]
                if above[victim]:
                    above[victim] = False
                    internal -= tail[victim]
                waiting.appendleft(victim)
                preemptions += 1
                continue
            length[r] += 1
            left[r] -= 1
            real += 1
            if length[r] > last_start[r] and not above[r]:
                above[r] = True
                internal += tail[r]
            i += 1
        used = bm.num_used_blocks * bs
        waste.add(real, used - real - internal, internal, leftover)
        acc["running"] += len(running)
        acc["max_running"] = max(acc["max_running"], len(running))
        done = False
        for r in running:
            if left[r] == 0:
                free(r)
                real -= length[r]
                internal -= tail[r]
                finished += 1
                done = True
        if done:
            running = [r for r in running if left[r]]
    assert waiting or running or bm.num_free_blocks == num_blocks, "blocks leaked"
    return _result("paged", bs, None, waste, acc, finished=finished, preemptions=preemptions,
                   recomputed_tokens=recomputed, hit_step_cap=bool(waiting or running))


def budget_from_model(gb: float, num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """KV tokens that fit in ``gb`` * 1e9 bytes: K and V per layer per kv head per dim."""
    per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    return int(gb * 1e9 // per_token)


def lengths_summary(prompts, outputs) -> dict:
    p, o = np.asarray(prompts), np.asarray(outputs)
    return dict(num_requests=int(p.size), prompt_mean=float(p.mean()), output_mean=float(o.mean()),
                prompt_max=int(p.max()), output_max=int(o.max()))
