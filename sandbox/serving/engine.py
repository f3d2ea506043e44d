"""The engine: a vLLM-like continuous-batching scheduler stepping simulated time on a KV allocator.

One ``step()``:
1. every decoding group grows one slot per sequence, first come first served; when the blocks are
   not there the latest-arrived running group is preempted (possibly the grower itself): swapped to
   the CPU pool (``--preemption swap``, and always for a group of several sequences while the pool
   has room, as vLLM v0 does) or freed for recompute (one sequence: re-prefill prompt + generated
   tokens, cached blocks reused; several: the group restarts);
2. running prefills take chunks of the step's token budget (``max_batched_tokens``, decode tokens
   first: chunked prefill);
3. if nobody was preempted this step, swapped groups come back first come first served, and only
   once none waits, waiting requests are admitted in arrival order while they fit (blocks beyond the
   watermark), ``max_num_seqs`` sequences are not exceeded and budget is left for a first chunk (an
   allocator with ``static`` set admits only when nothing runs: static batching, FasterTransformer's);
4. the step's time is the cost model's for its batch plus the swap traffic's (``cost.SwapCost``: a latency
   per copy and the bytes at the host link's bandwidth, per block moved); the clock
   advances, each decode sequence and each finished prefill emits a token, beams re-parent, finished
   groups free their memory, a chat turn schedules its follow-up.
Memory (``breakdown``) is sampled every ``sample_every`` steps, after growth and admission: what the
step computes with.
"""
from __future__ import annotations

import bisect
import heapq
import random
from collections import deque
from dataclasses import dataclass

from sandbox.memory import beam
from sandbox.serving.cost import StepBatch, SwapCost
from sandbox.serving.group import DECODE, DONE, PREFILL, SWAPPED, WAITING, Group
from sandbox.serving.metrics import Tally


@dataclass(frozen=True)
class EngineConfig:
    kv_bytes_per_token: int
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    preemption: str = "recompute"       # or "swap"
    swap: SwapCost | None = None        # None: 32 GB/s, no per-copy latency
    beam_survival: float = beam.SURVIVAL
    sample_every: int = 16
    max_steps: int = 10**7
    seed: int = 0


class Engine:
    def __init__(self, kv, cost, config: EngineConfig, requests):
        self.kv, self.cost, self.config = kv, cost, config
        self.swap = config.swap or SwapCost(config.kv_bytes_per_token, 32e9, 0.0, 1)
        self.rng = random.Random(config.seed)
        self.pending = [(r.arrival, r.rid, r) for r in requests]
        heapq.heapify(self.pending)
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []        # sorted by (arrival, rid): the last one is preempted first
        self.swapped: list[Group] = []        # sorted the same way: the first one comes back first
        self.done: list[Group] = []
        self.clock = 0.0
        self.seqs_running = 0
        self.tally = Tally(kv.budget_tokens)

    # ---- the loop -----------------------------------------------------------------------------
    def busy(self) -> bool:
        return bool(self.pending or self.waiting or self.running or self.swapped)

    def run(self):
        while self.busy():
            if self.tally.steps >= self.config.max_steps:
                raise RuntimeError(f"the engine ran {self.config.max_steps} steps without finishing")
            self.step()
        return self

    def step(self) -> None:
        while self.pending and self.pending[0][0] <= self.clock:
            _, _, req = heapq.heappop(self.pending)
            self.waiting.append(Group(req, req.arrival))
        if not (self.waiting or self.running or self.swapped):
            self.clock = self.pending[0][0]
            return
        t = self.tally
        self.step_blocks_moved, preempted = 0, False
        decoders = [g for g in self.running if g.phase == DECODE]
        i = 0
        while i < len(decoders):
            i = self.kv.grow_many(decoders, i)         # index of the first group that could not grow
            if i == len(decoders):
                break
            g = decoders[i]
            while True:                                # the latest arrival goes first, perhaps g itself
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is g or self.kv.grow(g):
                    break
            i += 1
        decoded = [g for g in decoders if g.phase == DECODE]
        decode_tokens = decode_context = 0
        for g in decoded:
            decode_tokens += g.width
            decode_context += g.width * (g.prompt_len + g.generated)
        budget = self.config.max_batched_tokens - decode_tokens
        chunks = []
        for g in self.running:
            if g.phase == PREFILL and budget > 0:
                budget -= self._chunk(g, budget, chunks)
        if not preempted:
            self._swap_in()
            if not self.swapped:
                budget = self._admit(budget, chunks)
        prefill = attended = 0
        for g, c in chunks:
            prefill += c
            attended += c * g.computed + c * (c + 1) // 2
        batch = StepBatch(decode_tokens, decode_context, prefill, attended, self.kv.block_size)
        swap_bytes = self.step_blocks_moved * max(self.kv.block_size, 1) * self.config.kv_bytes_per_token
        swap_s = self.swap.seconds(self.step_blocks_moved, max(self.kv.block_size, 1)) if swap_bytes else 0.0
        if not (decode_tokens or prefill or swap_bytes or preempted):
            raise RuntimeError("the engine is stuck: nothing can run (a request larger than the budget?)")
        if (t.steps + 1) % self.config.sample_every == 0:    # the memory this step computes with
            head = self.waiting[0] if self.waiting else None
            t.sample(self.clock, self.kv.breakdown(self.running, head), self.seqs_running)
        self.clock += (self.cost.step_time(batch) if decode_tokens or prefill else 0.0) + swap_s
        t.add_step(decode_tokens + prefill, self.seqs_running, swap_bytes, swap_s)
        self._emit(decoded, chunks)

    # ---- pieces -------------------------------------------------------------------------------
    def _chunk(self, g: Group, budget: int, chunks: list) -> int:
        c = min(g.context - g.computed, budget)
        chunks.append((g, c))
        return c

    def _insert(self, queue: list, g: Group) -> None:
        bisect.insort(queue, g, key=lambda x: (x.arrival, x.req.rid))

    def _admit(self, budget: int, chunks: list) -> int:
        if self.kv.static and self.running:      # static batching: the next batch once the last one has finished
            return budget
        while self.waiting and budget > 0 and self.seqs_running + self.waiting[0].width <= self.config.max_num_seqs:
            g = self.waiting[0]
            if not self.kv.admit(g, busy=bool(self.running)):
                break
            self.waiting.popleft()
            g.phase = PREFILL
            self._insert(self.running, g)
            self.seqs_running += g.width
            self.tally.admitted(g)
            budget -= self._chunk(g, budget, chunks)
        return budget

    def _swap_in(self) -> None:
        while self.swapped and self.seqs_running + self.swapped[0].width <= self.config.max_num_seqs:
            g = self.swapped[0]
            moved = self.kv.swap_in(g, busy=bool(self.running))
            if moved is None:
                return
            self.swapped.pop(0)
            g.phase = g.resume_phase
            self._insert(self.running, g)
            self.seqs_running += g.width
            self.step_blocks_moved += moved

    def _preempt(self, g: Group) -> None:
        assert self.running[-1] is g
        self.running.pop()
        self.seqs_running -= g.width
        g.preemptions += 1
        several = len(g.seqs) > 1
        if self.config.preemption == "swap" or several:
            moved = self.kv.swap_out(g) if self.kv.swap_capacity else None
            if moved is not None:
                g.resume_phase, g.phase = g.phase, SWAPPED
                self._insert(self.swapped, g)
                self.step_blocks_moved += moved
                self.tally.preempted("swap")
                return
        self.kv.release(g)
        if several or g.phase == PREFILL and g.generated == 0:
            self.tally.regenerated += g.width * max(0, g.generated - 1)
            g.discarded = g.computed if g.phase == PREFILL else g.prompt_len
            g.generated = 0
        else:
            g.discarded = g.prompt_len + g.generated - 1 if g.phase == DECODE else g.computed
        g.phase = WAITING
        self.waiting.appendleft(g)
        self.tally.preempted("recompute")

    def _emit(self, decoded: list, chunks: list) -> None:
        for g in decoded:
            g.generated += 1
        for g, c in chunks:
            g.computed += c
            if g.computed == g.context:
                g.generated += 1
                g.phase = DECODE
                if g.first_token is None:
                    g.first_token = self.clock
                if g.width > 1:
                    self.kv.start_decode(g)
        for g, _ in chunks:
            if g.phase == DECODE and g.generated >= g.output_len:
                self._finish(g)
        for g in decoded:
            if g.generated >= g.output_len:
                self._finish(g)
            elif g.req.mode == "beam":
                parents = beam.next_parents(g.width, self.config.beam_survival, self.rng)
                if parents is not None:
                    self.kv.reparent(g, parents)

    def _finish(self, g: Group) -> None:
        self.kv.release(g)
        self.running.remove(g)
        self.seqs_running -= g.width
        g.phase, g.finish = DONE, self.clock
        self.done.append(g)
        self.tally.finished(g)
        nxt = g.req.follow_up
        if nxt is not None:
            nxt.arrival = self.clock + g.req.think_time
            heapq.heappush(self.pending, (nxt.arrival, nxt.rid, nxt))
