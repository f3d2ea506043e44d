"""Swapping whole sequences out of the GPU block pool and back (preemption by swap, vLLM's first mode).

``swap_out(seq_ids)`` removes the sequences and returns their layout: the distinct physical blocks
they used (in order of first use) and each table rewritten in positions of that list, so blocks the
sequences shared stay shared after ``swap_in`` (one copy each way, as vLLM swaps a whole sequence
group). The caller copies those blocks to its CPU pool before allocating anything else, and back
into the blocks ``swap_in`` returns. Swapped sequences come back with unknown token ids: their
later blocks are not registered in the prefix cache.
"""
from __future__ import annotations

from dataclasses import dataclass

from sandbox.paging.errors import OutOfBlocks
from sandbox.paging.prefix_cache import NO_BLOCK


@dataclass(frozen=True)
class SwappedSequences:
    """layout: seq_id -> (num_tokens, table of positions in ``blocks``, -1 kept); blocks: GPU blocks vacated."""
    layout: dict
    blocks: tuple[int, ...]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)


class SwapMixin:
    """swap_out / can_swap_in / swap_in for BlockManager (kept apart to keep the allocator small)."""

    def swap_out(self, seq_ids) -> SwappedSequences:
        seq_ids = list(seq_ids)
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"swap_out got a sequence twice: {seq_ids!r}")
        entries = [self._entry(s) for s in seq_ids]          # KeyError before anything changes
        position: dict[int, int] = {}
        layout = {}
        for s, (n, table, _) in zip(seq_ids, entries):
            layout[s] = (n, [NO_BLOCK if b == NO_BLOCK else position.setdefault(b, len(position)) for b in table])
        for s in seq_ids:
            self.free(s)
        return SwappedSequences(layout, tuple(position))

    def can_swap_in(self, swapped: SwappedSequences) -> bool:
        return swapped.num_blocks <= self.num_free_blocks and not any(s in self._seqs for s in swapped.layout)

    def swap_in(self, swapped: SwappedSequences) -> list[int]:
        """Recreate the sequences in fresh blocks; returns the block for each position (copy CPU -> these)."""
        taken = [s for s in swapped.layout if s in self._seqs]
        if taken:
            raise ValueError(f"sequence {taken[0]!r} is already allocated")
        if swapped.num_blocks > self.num_free_blocks:
            raise OutOfBlocks(f"swap_in of {len(swapped.layout)} sequences needs {swapped.num_blocks} blocks "
                              f"but only {self.num_free_blocks} are free")
        blocks = [self._take_block() for _ in range(swapped.num_blocks)]
        for s, (n, local) in swapped.layout.items():
            table = [NO_BLOCK if i == NO_BLOCK else blocks[i] for i in local]
            self._seqs[s] = [n, table, None]
        for local_count, b in zip(self._count_users(swapped), blocks):
            self._ref[b] = local_count
        return blocks

    @staticmethod
    def _count_users(swapped: SwappedSequences) -> list[int]:
        users = [0] * swapped.num_blocks
        for _, local in swapped.layout.values():
            for i in local:
                if i != NO_BLOCK:
                    users[i] += 1
        return users
