"""Paged KV memory for the engine: the real BlockManager, a CPU swap pool, and the waste breakdown.

Admission allocates every block of the tokens to compute (prompt + anything generated before a
preemption), from token ids when the prefix cache is on (hits are shared and need no compute) or
by count when it is off, and keeps ``watermark`` of the blocks free while anything runs (vLLM's
1%). Growth appends one slot per sequence per step (copy-on-write where a block is shared); when
it cannot, the engine preempts. Swap moves a group's distinct blocks to a CPU pool of
``swap_blocks`` blocks and back (``BlockManager.swap_out`` / ``swap_in``: sharing survives).
"""
from __future__ import annotations

from sandbox.memory import sharing
from sandbox.paging import BlockManager, OutOfBlocks
from sandbox.serving.group import DECODE, PREFILL, Group


class PagedKV:
    """One paged allocator over ``budget_tokens // block_size`` blocks."""

    def __init__(self, budget_tokens: int, block_size: int, watermark: float = 0.01, prefix_cache: bool = True,
                 swap_blocks: int = 0):
        self.name = f"paged-{block_size}"
        self.static = False
        self.block_size = block_size
        self.budget_tokens = budget_tokens
        self.bm = BlockManager(budget_tokens // block_size, block_size)
        self.keep_free = max(1, int(self.bm.num_blocks * watermark))
        self.prefix_cache = prefix_cache
        self.leftover = budget_tokens - self.bm.num_blocks * block_size
        self.swap_capacity = swap_blocks
        self.swap_used = 0
        self.swapped: dict[int, object] = {}      # id(group) -> SwappedSequences

    def fits_alone(self, g: Group) -> bool:
        """Whether the request can ever run: every sequence's blocks at its final length in an empty pool."""
        return g.width * -(-(g.final_len + 1) // self.block_size) <= self.bm.num_blocks - self.keep_free

    def admit(self, g: Group, busy: bool) -> bool:
        ids = g.known_ids()
        tokens = ids if self.prefix_cache else len(ids)
        if self.bm.blocks_needed(tokens) > self.bm.num_free_blocks - (self.keep_free if busy else 0):
            return False
        seq = (g.req.rid, 0)
        slots = self.bm.allocate(seq, tokens)
        g.seqs = [seq]
        g.context = len(ids)
        g.cached = g.computed = slots.count(-1)
        return True

    def start_decode(self, g: Group) -> None:
        """After the prompt: fork the other samples or beams (they share every block)."""
        for j in range(len(g.seqs), g.width):
            self.bm.fork(g.seqs[0], (g.req.rid, j))
            g.seqs.append((g.req.rid, j))
        g.next_beam = max(g.next_beam, g.width)

    def grow_many(self, groups: list, start: int) -> int:
        """Grow groups[start:] that are decoding; the index of the first that could not (or len(groups))."""
        append, keyed = self.bm.append_slot, self.prefix_cache
        for i in range(start, len(groups)):
            g = groups[i]
            if g.phase != DECODE:                      # preempted by an earlier group of this step
                continue
            if len(g.seqs) == 1:
                try:
                    append(g.seqs[0], g.req.output[g.generated - 1] if keyed else None)
                except OutOfBlocks:
                    return i
            elif not self.grow(g):
                return i
        return len(groups)

    def grow(self, g: Group) -> bool:
        """One more slot for every sequence; False (nothing changed) when the blocks are not there."""
        bm = self.bm
        if len(g.seqs) == 1:
            try:
                bm.append_slot(g.seqs[0], g.token_to_write() if self.prefix_cache else None)
            except OutOfBlocks:
                return False
            return True
        if self._blocks_to_grow(g) > bm.num_free_blocks:
            return False
        for s in g.seqs:
            bm.append_slot(s)
        return True

    def _blocks_to_grow(self, g: Group) -> int:
        """New blocks one append per sequence takes: a full last block needs one; a partial one shared
        by m sequences needs m - 1 copies (the last sharer writes in place)."""
        bs, need, sharers = self.block_size, 0, {}
        for s in g.seqs:
            if self.bm.num_tokens(s) % bs == 0:
                need += 1
            else:
                last = self.bm.block_table(s)[-1]
                sharers[last] = sharers.get(last, 0) + 1
        return need + sum(m - 1 for m in sharers.values())

    def reparent(self, g: Group, parents: list[int]) -> None:
        """Beam search: free the beams nobody continues, fork the ones continued more than once."""
        def new_id():
            g.next_beam += 1
            return (g.req.rid, g.next_beam - 1)
        g.seqs = sharing.advance_beams(self.bm, g.seqs, parents, new_id)

    def release(self, g: Group) -> None:
        for s in g.seqs:
            self.bm.free(s)
        g.seqs = []

    def swap_out(self, g: Group) -> int | None:
        """Move the group's blocks to the CPU pool; blocks moved, or None when the pool is too full."""
        blocks = len({b for s in g.seqs for b in self.bm.block_table(s) if b >= 0})
        if self.swap_used + blocks > self.swap_capacity:
            return None
        self.swapped[id(g)] = self.bm.swap_out(g.seqs)
        self.swap_used += blocks
        return blocks

    def swap_in(self, g: Group, busy: bool) -> int | None:
        out = self.swapped[id(g)]
        if out.num_blocks > self.bm.num_free_blocks - (self.keep_free if busy else 0):
            return None
        self.bm.swap_in(out)
        del self.swapped[id(g)]
        self.swap_used -= out.num_blocks
        return out.num_blocks

    def breakdown(self, groups, head: Group | None) -> dict:
        """Slots per waste category (``sandbox.memory.waste``) and blocks with/without sharing, now."""
        bm, bs = self.bm, self.block_size
        fill: dict[int, int] = {}
        reserved = internal = pending = without = 0
        for g in groups:
            if g.phase == PREFILL:
                pending += g.context - g.computed
            for s in g.seqs:
                n, table = bm.num_tokens(s), bm.block_table(s)
                without += -(-n // bs)
                for b in table[:-1]:
                    if b >= 0:
                        fill[b] = bs
                last, used = table[-1], n - (len(table) - 1) * bs
                if last in fill and fill[last] >= used:
                    continue                      # a shared partial block: counted once
                fill[last] = used
                empty = bs - used
                future = min(empty, max(0, g.final_len - n))
                reserved += future
                internal += empty - future
        tokens = sum(fill.values()) - pending
        assert tokens + pending + reserved + internal == bm.num_used_blocks * bs, "breakdown misses a block"
        return dict(tokens=tokens, reserved=reserved + pending, internal=internal, external=self.leftover,
                    blocks_with=bm.num_used_blocks, blocks_without=without)

    def leaked(self) -> bool:
        return len(self.bm) > 0 or self.bm.num_free_blocks != self.bm.num_blocks or bool(self.swapped)
