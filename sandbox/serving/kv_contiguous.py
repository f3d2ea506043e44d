"""Contiguous KV memory for the engine (Orca-style baselines): one first-fit range per sequence's lifetime.

A request reserves ``width * reservation`` slots at admission (``sandbox.memory.arena``: max_len, the
next power of two of its true length, or exactly it), one copy per sample or beam: without block
tables nothing can be shared, and a beam that takes over another's continuation copies its KV into
the other's range. The reservation covers every future token, so growth never fails and nothing is
ever preempted. ``static=True`` is the static-batching baseline (FasterTransformer, the paper's Sec. 2.3):
max-length reservations, and the engine forms the next batch only once every request of the last one has
finished.
"""
from __future__ import annotations

from sandbox.memory.arena import FirstFitArena, reservation
from sandbox.serving.group import PREFILL, Group


class ContiguousKV:
    def __init__(self, budget_tokens: int, max_len: int, policy: str, static: bool = False):
        self.static = static
        self.name = "static-max" if static else f"contiguous-{policy}"
        self.block_size = 0
        self.budget_tokens = budget_tokens
        self.policy = policy
        self.max_len = max_len
        self.arena = FirstFitArena(budget_tokens)
        self.ranges: dict[int, tuple[int, int]] = {}      # id(group) -> (start, length)
        self.swap_capacity = 0

    def size(self, g: Group) -> int:
        return g.width * reservation(g.prompt_len, g.output_len, self.max_len, self.policy)

    def fits_alone(self, g: Group) -> bool:
        return self.size(g) <= self.arena.size

    def admit(self, g: Group, busy: bool) -> bool:
        size = self.size(g)
        start = self.arena.alloc(size)
        if start < 0:
            return False
        self.ranges[id(g)] = (start, size)
        g.seqs = [(g.req.rid, j) for j in range(g.width)]
        g.context, g.cached, g.computed = len(g.known_ids()), 0, 0
        return True

    def start_decode(self, g: Group) -> None:
        g.next_beam = g.width

    def grow_many(self, groups: list, start: int) -> int:
        return len(groups)

    def grow(self, g: Group) -> bool:
        return True

    def reparent(self, g: Group, parents: list[int]) -> None:
        """A beam continued twice overwrites a dropped beam's range with a copy: no memory changes hands."""

    def release(self, g: Group) -> None:
        start, size = self.ranges.pop(id(g))
        self.arena.free(start, size)
        g.seqs = []

    def swap_out(self, g: Group):
        raise AssertionError("a contiguous reservation never needs preempting")

    def breakdown(self, groups, head: Group | None) -> dict:
        tokens = reserved = internal = 0
        for g in groups:
            # sampled after the step's growth: a decoding sequence already has the slot it writes
            n = g.computed if g.phase == PREFILL else g.prompt_len + g.generated
            start, size = self.ranges[id(g)]
            per_seq = size // g.width
            final = min(per_seq, g.final_len)
            tokens += g.width * n
            reserved += g.width * (final - n)
            internal += g.width * (per_seq - final)
        external = self.arena.free_below(self.size(head)) if head is not None else 0
        return dict(tokens=tokens, reserved=reserved, internal=internal, external=external,
                    blocks_with=0, blocks_without=0)

    def leaked(self) -> bool:
        return bool(self.ranges) or self.arena.lengths != [self.arena.size]
