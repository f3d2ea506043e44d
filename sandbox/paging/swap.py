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


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SwappedSequences:
    """layout: seq_id -> (num_tokens, table of positions in ``blocks``, -1 kept); blocks: GPU blocks vacated.

    Checked on construction (ValueError/TypeError naming the field): ``blocks`` distinct integers >= 0; each
    table entry -1 or a position in 0..len(blocks)-1 (no negative position wraps); every position used.
    """
    layout: dict
    blocks: tuple[int, ...]

    def __post_init__(self):
        if not isinstance(self.layout, dict):
            raise TypeError(f"layout must be a dict seq_id -> (num_tokens, table), got {type(self.layout).__name__}")
        if not isinstance(self.blocks, tuple) or not all(_is_int(b) and b >= 0 for b in self.blocks):
            raise ValueError(f"blocks must be a tuple of block indices >= 0, got {self.blocks!r}")
        if len(set(self.blocks)) != len(self.blocks):
            raise ValueError(f"blocks must be distinct, got {self.blocks!r}")
        used = set()
        for seq_id, value in self.layout.items():
            if not (isinstance(value, (tuple, list)) and len(value) == 2):
                raise ValueError(f"layout[{seq_id!r}] must be (num_tokens, table), got {value!r}")
            n, table = value
            if not _is_int(n) or n < 0:
                raise ValueError(f"layout[{seq_id!r}] num_tokens must be an integer >= 0, got {n!r}")
            if not isinstance(table, (tuple, list)):
                raise ValueError(f"layout[{seq_id!r}] table must be a list of positions, got {table!r}")
            for i, position in enumerate(table):
                if not _is_int(position) or not (position == NO_BLOCK or 0 <= position < len(self.blocks)):
                    raise ValueError(f"layout[{seq_id!r}] table[{i}] = {position!r} must be -1 or a position in "
                                     f"0..{len(self.blocks) - 1}")
                used.add(position)
        unused = set(range(len(self.blocks))) - used
        if unused:
            raise ValueError(f"blocks position {min(unused)} is used by no table")

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
        for s, (n, local) in swapped.layout.items():
            if len(local) != -(-n // self.block_size):
                raise ValueError(f"swap_in: sequence {s!r} has {n} tokens but a table of {len(local)} blocks "
                                 f"(block size {self.block_size})")
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
