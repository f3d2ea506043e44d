"""The engine on the real BlockManager under hypothesis stateful testing: requests of every mode arrive
while it steps, with tiny budgets so that preemption (recompute and swap) and eviction happen often.

Checked after every step: no over-commit (tables use exactly the blocks in use, running sequences and
step tokens within their caps, the CPU pool within its size), tokens conserved (every sequence holds
exactly prompt + generated - 1 tokens, or its admission's context while prefilling, swapped ones
included), cached blocks never freed while referenced, and evictions in LRU order. At the end every
request has finished with all of its tokens and nothing leaked.
"""
from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sandbox.serving.engine import Engine, EngineConfig
from sandbox.serving.group import DECODE, PREFILL
from sandbox.serving.kv_paged import PagedKV
from sandbox.serving.workloads import Request


class Flat:
    source = "flat"

    def step_time(self, batch):
        return 0.01

    def prefill_token_time(self):
        return 0.0


class EngineMachine(RuleBasedStateMachine):
    @initialize(block_size=st.integers(1, 4), num_blocks=st.integers(10, 24), swap_blocks=st.integers(0, 12),
                preemption=st.sampled_from(["recompute", "swap"]), cache=st.booleans(), budget=st.integers(4, 12))
    def setup(self, block_size, num_blocks, swap_blocks, preemption, cache, budget):
        self.kv = PagedKV(num_blocks * block_size, block_size, prefix_cache=cache, swap_blocks=swap_blocks)
        self.config = EngineConfig(kv_bytes_per_token=10, max_num_seqs=4, max_batched_tokens=budget,
                                   preemption=preemption, sample_every=1)
        self.engine = Engine(self.kv, Flat(), self.config, [])
        self.requests: list[Request] = []
        self.max_tokens = (num_blocks - self.kv.keep_free) * block_size   # a request must fit alone
        self._watch_the_lru()

    def _watch_the_lru(self):
        """Mirror the cache's free list in an independent model: a block joins at the back when its last
        user frees it, leaves on a hit, and an eviction must take the model's front (least recently freed)."""
        cache, model = self.kv.bm._cache, []
        park, revive, evict = cache.park, cache.revive, cache.evict

        def parked(b):
            kept = park(b)
            if kept:
                assert b not in model
                model.append(b)
            return kept

        def revived(b):
            model.remove(b)
            revive(b)

        def evicted():
            b = evict()
            assert model and b == model.pop(0), "eviction out of LRU order"
            return b
        cache.park, cache.revive, cache.evict = parked, revived, evicted
        self.lru_model = model

    @rule(prompt=st.lists(st.integers(0, 2), min_size=1, max_size=9), out=st.integers(1, 8),
          mode=st.sampled_from(["single", "single", "parallel", "beam"]), width=st.integers(2, 3),
          delay=st.sampled_from([0.0, 0.0, 0.015, 0.05]))
    def arrive(self, prompt, out, mode, width, delay):
        width = 1 if mode == "single" else width
        bs = self.kv.block_size
        if width * -(-(len(prompt) + out) // bs) > self.max_tokens // bs:
            return
        rid = len(self.requests)
        # prompts from a 3-token alphabet: unrelated requests share blocks through the prefix cache
        req = Request(rid, self.engine.clock + delay, prompt, [7] * out, mode, width)
        self.requests.append(req)
        self.engine.pending.append((req.arrival, rid, req))
        self.engine.pending.sort()

    @rule(steps=st.integers(1, 6))
    def step(self, steps):
        for _ in range(steps):
            if not self.engine.busy():
                return
            self.engine.step()
        assert list(self.kv.bm._cache.lru) == self.lru_model

    @invariant()
    def nothing_over_committed(self):
        if not hasattr(self, "engine"):
            return
        e, bm = self.engine, self.kv.bm
        live = [g for g in e.running]
        used = {b for g in live for s in g.seqs for b in bm.block_table(s) if b >= 0}
        assert len(used) == bm.num_used_blocks <= bm.num_blocks
        assert sum(g.width for g in live) == e.seqs_running <= self.config.max_num_seqs
        assert self.kv.swap_used == sum(self.kv.swapped[id(g)].num_blocks for g in e.swapped) <= self.kv.swap_capacity
        refs = {}
        for g in live:
            for s in g.seqs:
                for b in bm.block_table(s):
                    refs[b] = refs.get(b, 0) + 1
        assert all(bm.ref_count(b) == n for b, n in refs.items())
        assert not set(refs) & (set(bm._free) | set(bm._cache.lru)), "a referenced block is free or evictable"

    @invariant()
    def tokens_conserved(self):
        if not hasattr(self, "engine"):
            return
        for g in self.engine.running:
            assert 0 <= g.generated <= g.output_len
            if g.phase == DECODE:
                assert len(g.seqs) == g.width
                assert all(self.kv.bm.num_tokens(s) == g.prompt_len + g.generated - 1 for s in g.seqs)
            else:
                assert g.phase == PREFILL and [self.kv.bm.num_tokens(s) for s in g.seqs] == [g.context]
                assert g.context == g.prompt_len + g.generated and g.cached <= g.computed < g.context
        for g in self.engine.swapped:
            layout = self.kv.swapped[id(g)].layout
            want = g.prompt_len + g.generated - 1 if g.resume_phase == DECODE else g.context
            assert all(n == want for n, _ in layout.values())

    def teardown(self):
        if not hasattr(self, "engine"):
            return
        self.engine.run()
        done = {g.req.rid: g for g in self.engine.done}
        assert sorted(done) == list(range(len(self.requests))), "an admitted request never finished"
        assert all(g.generated == g.output_len and g.finish >= g.arrival for g in done.values())
        assert not self.kv.leaked()


TestEngineMachine = EngineMachine.TestCase
TestEngineMachine.settings = settings(settings.default, max_examples=3 * settings.default.max_examples,
                                      stateful_step_count=30)
