"""Paged KV-cache allocator: a free deque of physical blocks, reference counts, copy-on-write.

A sequence owns a block table (logical block i -> physical block). Slot ``b * block_size + o``
is offset ``o`` of physical block ``b``. Blocks are shared by ``fork`` and, when a sequence is
allocated from token ids, by matching full blocks of an identical prefix (a chained hash of
(previous block's hash, this block's token ids), verified against the stored ids and the
parent block, so a hash collision can never alias two prefixes). Only full blocks are ever
registered for sharing, and a full block is never written again (appends go to a new block),
so a registered block's content never changes. A block leaves the hash index when its last
user frees it: the index holds live blocks only (no prefix cache across frees).

Every public mutator checks first and then acts: ``OutOfBlocks``, ``KeyError`` and ``ValueError``
leave all tables, counts, the free deque and the index exactly as they were.
"""
from __future__ import annotations

import operator
from collections import deque
from collections.abc import Hashable, Sequence

_NO_HASH = -1


class OutOfBlocks(RuntimeError):
    """Too few free blocks for the request; the manager is unchanged."""


def _int_at_least(name: str, value, low: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    return value


class BlockManager:
    """Hands out fixed-size KV blocks to sequences; see the module docstring."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = _int_at_least("num_blocks", num_blocks, 1)
        self.block_size = _int_at_least("block_size", block_size, 1)
        self._ref = [0] * self.num_blocks
        self._free = deque(range(self.num_blocks))
        self._seqs: dict[Hashable, list] = {}          # seq_id -> [num_tokens, block table]
        self._index: dict[int, int] = {}               # chained hash -> registered full block
        self._key: dict[int, tuple] = {}               # registered block -> (hash, parent block, ids)
        self.num_shared_hits = 0                       # full blocks reused by allocate(ids)

    # ---- queries ----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def block_table(self, seq_id) -> list[int]:
        """A copy of the sequence's table: logical block i -> physical block."""
        return list(self._entry(seq_id)[1])

    def num_tokens(self, seq_id) -> int:
        return self._entry(seq_id)[0]

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def blocks_needed(self, tokens) -> int:
        """New blocks ``allocate(_, tokens)`` would take (a count never shares; ids may)."""
        ids = self._token_ids(tokens)
        if ids is None:
            return -(-tokens // self.block_size)
        hits, _ = self._match_prefix(ids)
        return -(-len(ids) // self.block_size) - len(hits)

    def can_allocate(self, num_tokens) -> bool:
        """Whether ``allocate`` of this many tokens (or of these token ids) would succeed."""
        return self.blocks_needed(num_tokens) <= len(self._free)

    def can_append(self, seq_id) -> bool:
        """Whether ``append_slot(seq_id)`` would succeed."""
        n, table = self._entry(seq_id)
        off = n % self.block_size
        needs_block = off == 0 or self._ref[table[-1]] > 1
        return not needs_block or len(self._free) > 0

    # ---- mutators ---------------------------------------------------------------------------
    def allocate(self, seq_id, tokens) -> list[int]:
        """Give a new sequence blocks for ``tokens`` (an int count, or a sequence of token ids).

        Returns the slot of every token, -1 where the token sits in a shared (already written)
        block, so the result can be passed as a ``slot_mapping`` to write the prompt's KV.
        """
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} is already allocated")
        bs = self.block_size
        ids = self._token_ids(tokens)
        n = tokens if ids is None else len(ids)
        hits, keys = ([], []) if ids is None else self._match_prefix(ids)
        nblocks = -(-n // bs)
        needed = nblocks - len(hits)
        if needed > len(self._free):
            raise OutOfBlocks(f"allocate({seq_id!r}, {n} tokens) needs {needed} blocks "
                              f"but only {len(self._free)} are free")
        table = list(hits)
        for b in hits:
            self._ref[b] += 1
        for _ in range(needed):
            table.append(self._take_block())
        for i in range(len(hits), len(keys)):
            self._register(table[i], keys[i], table[i - 1] if i else _NO_HASH)
        self.num_shared_hits += len(hits)
        self._seqs[seq_id] = [n, table]
        cached = len(hits) * bs
        return [-1] * cached + [table[t // bs] * bs + t % bs for t in range(cached, n)]

    def append_slot(self, seq_id) -> tuple[int, tuple[int, int] | None]:
        """Room for one more token: ``(slot, copy)``.

        ``copy`` is None or ``(src_block, dst_block)``: the last block was shared, so the caller
        must copy src to dst BEFORE writing the new token's KV into ``slot`` (copy-on-write).
        """
        try:
            entry = self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None
        n = entry[0]
        bs = self.block_size
        off = n % bs
        if off:
            last = entry[1][-1]
            if self._ref[last] == 1:  # the common case: room in a private last block
                entry[0] = n + 1
                return last * bs + off, None
        return self._append_new_block(seq_id, entry, off)

    def fork(self, parent_id, child_id) -> None:
        """Make ``child_id`` a sequence that shares every block of ``parent_id``."""
        n, table = self._entry(parent_id)
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id!r} is already allocated")
        ref = self._ref
        for b in table:
            ref[b] += 1
        self._seqs[child_id] = [n, list(table)]

    def free(self, seq_id) -> None:
        """Drop the sequence; a block returns to the free deque when no table points at it."""
        _, table = self._entry(seq_id)
        del self._seqs[seq_id]
        ref = self._ref
        for b in table:
            ref[b] -= 1
            if ref[b] == 0:
                self._release_block(b)

    # ---- private helpers --------------------------------------------------------------------
    def _entry(self, seq_id) -> list:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r}") from None

    def _token_ids(self, tokens) -> list[int] | None:
        """None for a count (validated), else the token ids as a list of ints."""
        if isinstance(tokens, (str, bytes)) or not (isinstance(tokens, Sequence) or hasattr(tokens, "__len__")):
            try:
                _int_at_least("tokens", tokens, 0)
            except TypeError:
                raise TypeError("tokens must be an int count or a sequence of integer token ids, "
                                f"got {type(tokens).__name__}") from None
            return None
        try:
            return [operator.index(t) for t in tokens]
        except TypeError:
            raise TypeError("tokens must be an int count or a sequence of integer token ids") from None

    def _match_prefix(self, ids: list[int]) -> tuple[list[int], list[tuple]]:
        """Registered blocks holding the leading full blocks of ``ids``, and every full block's key."""
        bs = self.block_size
        h, parent, hits, keys = _NO_HASH, _NO_HASH, [], []
        matching = True
        for start in range(0, len(ids) - bs + 1, bs):
            chunk = tuple(ids[start:start + bs])
            h = hash((h, chunk))
            keys.append((h, chunk))
            if matching:
                b = self._index.get(h, _NO_HASH)
                matching = b != _NO_HASH and self._key[b] == (h, parent, chunk)
                if matching:
                    hits.append(b)
                    parent = b
        return hits, keys

    def _take_block(self) -> int:
        b = self._free.popleft()
        assert self._ref[b] == 0 and b not in self._key, f"block {b} is free but still in use"
        self._ref[b] = 1
        return b

    def _release_block(self, b: int) -> None:
        assert self._ref[b] == 0
        key = self._key.pop(b, None)
        if key is not None:
            assert self._index[key[0]] == b
            del self._index[key[0]]
        self._free.append(b)

    def _register(self, b: int, key: tuple, parent: int) -> None:
        h, chunk = key
        if h not in self._index:  # on a (verified-away) collision the first block keeps the entry
            self._index[h] = b
            self._key[b] = (h, parent, chunk)

    def _append_new_block(self, seq_id, entry: list, off: int) -> tuple[int, tuple[int, int] | None]:
        """append_slot when the last block is full (or absent) or shared: take a fresh block."""
        if not self._free:
            raise OutOfBlocks(f"append_slot({seq_id!r}) needs 1 block but 0 are free")
        table = entry[1]
        b = self._take_block()
        entry[0] += 1
        if off == 0:
            table.append(b)
            return b * self.block_size, None
        old = table[-1]
        assert old not in self._key, "a partial block is never registered"
        self._ref[old] -= 1
        assert self._ref[old] > 0
        table[-1] = b
        return b * self.block_size + off, (old, b)

    def _state(self) -> tuple:
        """Deep snapshot of everything (for tests: a failed call must leave it unchanged)."""
        return (list(self._ref), list(self._free),
                {k: (n, list(t)) for k, (n, t) in self._seqs.items()},
                dict(self._index), dict(self._key), self.num_shared_hits)
