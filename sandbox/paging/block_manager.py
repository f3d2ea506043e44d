"""Paged KV-cache allocator: free blocks, reference counts, copy-on-write, a prefix cache.

A sequence owns a block table (logical block i -> physical block). Slot ``b * block_size + o``
is offset ``o`` of physical block ``b``. Blocks are shared by ``fork`` and, when a sequence is
allocated from token ids, by matching full blocks of an identical prefix in the prefix cache
(``sandbox.paging.prefix_cache``: chained content hashes verified against the stored ids and the
parent block, so a hash collision can never alias two prefixes).

- Only full blocks are registered, and a full block is never written again (appends go to a new
  block), so a registered block's content never changes.
- A block filled by ``append_slot(seq, token)`` is registered too, when every token of the
  sequence is known (it was allocated from ids and every append gave its token).
- ``allocate`` never takes the block holding the prompt's last token from the cache: that token
  must be computed to give the logits of the first output token (vLLM does the same).
- A registered block whose last user frees it stays cached; free blocks are handed out empty ones
  first, then by evicting the least recently freed cached block.
- ``free_outside_window`` releases the blocks a sliding window no longer reads (-1 in the table);
  ``swap_out`` / ``swap_in`` move whole sequences to and from a CPU pool (``sandbox.paging.swap``).

Every public mutator checks first and then acts: ``OutOfBlocks``, ``KeyError``, ``ValueError`` and
``TypeError`` (a token id that is not an integer >= 0, a bad count or window) leave all tables, counts,
free blocks and the cache exactly as they were (tests/paging/test_paging.py's stateful machine throws bad
requests at every step and compares the whole state).
"""
from __future__ import annotations

import operator
from collections import deque
from collections.abc import Hashable, Sequence

from sandbox.errors import RefusedRequest
from sandbox.paging.errors import OutOfBlocks
from sandbox.paging.prefix_cache import NO_BLOCK, PrefixCache
from sandbox.paging.swap import SwapMixin


# Block ids go into int32 block tables; and the allocator keeps ~60 bytes of Python objects per block (its reference
# count, its entry in the free deque), so a pool past MAX_BLOCKS is a typo, refused before a list is built.
MAX_BLOCKS = 2**27


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


class BlockManager(SwapMixin):
    """Hands out fixed-size KV blocks to sequences; see the module docstring."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = _int_at_least("num_blocks", num_blocks, 1)
        if self.num_blocks > MAX_BLOCKS:
            raise RefusedRequest(f"num_blocks must be at most {MAX_BLOCKS:,} (about {MAX_BLOCKS * 60 / 2**30:.0f} GiB "
                                 f"of allocator state), got {self.num_blocks:,}")
        self.block_size = _int_at_least("block_size", block_size, 1)
        self._ref = [0] * self.num_blocks
        self._free = deque(range(self.num_blocks))     # free blocks holding nothing cached
        self._cache = PrefixCache()
        # seq_id -> [num_tokens, block table, tail]; tail is None when some token id is unknown, else
        # [hash of the last full block, its registered block, ids of the partial last block]
        self._seqs: dict[Hashable, list] = {}
        self.num_shared_hits = 0                       # full blocks reused by allocate(ids)

    # ---- queries ----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take: empty ones plus cached ones nobody uses (evictable)."""
        return len(self._free) + len(self._cache)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_free_blocks(self) -> int:
        return len(self._cache)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def block_table(self, seq_id) -> list[int]:
        """A copy of the sequence's table: logical block i -> physical block (-1: released by a window)."""
        return list(self._entry(seq_id)[1])

    def num_tokens(self, seq_id) -> int:
        return self._entry(seq_id)[0]

    def ref_count(self, block: int) -> int:
        """Users of physical block `block` (0 for a free one); ValueError unless it is in 0..num_blocks-1."""
        block = _int_at_least("block", block, -(2**63))  # an integer; its range below
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"block must be a physical block index in 0..{self.num_blocks - 1}, got {block}")
        return self._ref[block]

    def blocks_needed(self, tokens) -> int:
        """Free blocks ``allocate(_, tokens)`` would take: new ones plus cached free ones it reuses."""
        ids = self._token_ids(tokens)
        if ids is None:
            return -(-tokens // self.block_size)
        hits, _ = self._match_prefix(ids)
        return -(-len(ids) // self.block_size) - sum(self._ref[b] > 0 for b in hits)

    def cached_tokens(self, tokens) -> int:
        """Leading tokens ``allocate`` would find in the cache (0 for a count)."""
        ids = self._token_ids(tokens)
        return 0 if ids is None else len(self._match_prefix(ids)[0]) * self.block_size

    def can_allocate(self, num_tokens) -> bool:
        """Whether ``allocate`` of this many tokens (or of these token ids) would succeed."""
        return self.blocks_needed(num_tokens) <= self.num_free_blocks

    def can_append(self, seq_id) -> bool:
        """Whether ``append_slot(seq_id)`` would succeed."""
        n, table, _ = self._entry(seq_id)
        needs_block = n % self.block_size == 0 or self._ref[table[-1]] > 1
        return not needs_block or self.num_free_blocks > 0

    # ---- mutators ---------------------------------------------------------------------------
    def allocate(self, seq_id, tokens) -> list[int]:
        """Give a new sequence blocks for ``tokens`` (an int count, or a sequence of token ids).

        Returns the slot of every token, -1 where the token sits in a cached (already written)
        block, so the result can be passed as a ``slot_mapping`` to write the prompt's KV.
        """
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} is already allocated")
        bs = self.block_size
        ids = self._token_ids(tokens)
        n = tokens if ids is None else len(ids)
        hits, keys = ([], []) if ids is None else self._match_prefix(ids)
        needed = -(-n // bs) - len(hits)
        revived = [b for b in hits if self._ref[b] == 0]
        if needed + len(revived) > self.num_free_blocks:
            raise OutOfBlocks(f"allocate({seq_id!r}, {n} tokens) needs {needed + len(revived)} blocks "
                              f"but only {self.num_free_blocks} are free")
        for b in revived:                  # before taking new blocks, so none of them is evicted
            self._cache.revive(b)
        for b in hits:
            self._ref[b] += 1
        table = hits + [self._take_block() for _ in range(needed)]
        parent = hits[-1] if hits else NO_BLOCK
        for i in range(len(hits), len(keys)):
            parent = self._cache.register(table[i], keys[i][0], parent, keys[i][1])
        self.num_shared_hits += len(hits)
        tail = None
        if ids is not None:
            h = keys[-1][0] if keys else NO_BLOCK
            tail = [h, parent, ids[len(keys) * bs:]]
        self._seqs[seq_id] = [n, table, tail]
        cached = len(hits) * bs
        return [-1] * cached + [table[t // bs] * bs + t % bs for t in range(cached, n)]

    def append_slot(self, seq_id, token=None) -> tuple[int, tuple[int, int] | None]:
        """Room for one more token: ``(slot, copy)``. ``token``: its id, so a block it fills can be cached.

        ``copy`` is None or ``(src_block, dst_block)``: the last block was shared, so the caller
        must copy src to dst BEFORE writing the new token's KV into ``slot`` (copy-on-write).
        """
        entry = self._entry(seq_id)
        if token is not None:  # checked before anything changes: a bad token leaves the sequence as it was
            token = _int_at_least("token", token, 0)
        n, table, tail = entry
        bs = self.block_size
        off = n % bs
        if off and self._ref[table[-1]] == 1:  # the common case: room in a private last block
            entry[0] = n + 1
            slot, copy = table[-1] * bs + off, None
        else:
            slot, copy = self._append_new_block(seq_id, entry, off)
        if tail is not None:
            if token is None:
                entry[2] = None            # an unknown token: this sequence's later blocks cannot be keyed
            else:
                tail[2].append(token)
                if off == bs - 1:
                    ids = tuple(tail[2])
                    h = hash((tail[0], ids))
                    tail[:] = [h, self._cache.register(table[-1], h, tail[1], ids), []]
        return slot, copy

    def fork(self, parent_id, child_id) -> None:
        """Make ``child_id`` a sequence that shares every block of ``parent_id``."""
        n, table, tail = self._entry(parent_id)
        if child_id in self._seqs:
            raise ValueError(f"sequence {child_id!r} is already allocated")
        ref = self._ref
        for b in table:
            if b != NO_BLOCK:
                ref[b] += 1
        self._seqs[child_id] = [n, list(table), None if tail is None else [tail[0], tail[1], list(tail[2])]]

    def free(self, seq_id) -> None:
        """Drop the sequence; a block nobody uses becomes free (cached if registered)."""
        _, table, _ = self._entry(seq_id)
        del self._seqs[seq_id]
        # last block first: among blocks freed together, the deepest are evicted first (a prefix
        # is only useful up to its first missing block)
        for b in reversed(table):
            if b != NO_BLOCK:
                self._unref(b)

    def free_outside_window(self, seq_id, window_left: int) -> int:
        """Release blocks no query reads again under a sliding window; returns how many were released.

        The next query sits at position ``num_tokens - 1`` or later and reads from ``window_left``
        tokens before it, so a block whose last position is below ``num_tokens - 1 - window_left``
        is never read again. Its table entry becomes -1 (as ``DecodeProblem`` tables show freed blocks).
        """
        n, table, _ = self._entry(seq_id)
        window_left = _int_at_least("window_left", window_left, 0)
        released = 0
        for i in range(max(0, n - 1 - window_left) // self.block_size):
            if table[i] != NO_BLOCK:
                self._unref(table[i])
                table[i] = NO_BLOCK
                released += 1
        return released

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
            return [_int_at_least(f"tokens[{i}]", t, 0) for i, t in enumerate(tokens)]
        except TypeError:
            raise TypeError("tokens must be an int count or a sequence of integer token ids (each >= 0)") from None

    def _match_prefix(self, ids: list[int]) -> tuple[list[int], list[tuple]]:
        """Cached blocks holding the leading full blocks of ``ids`` (never the one with the last
        token), and every full block's (hash, ids)."""
        bs = self.block_size
        h, parent, hits, keys = NO_BLOCK, NO_BLOCK, [], []
        last_hit_end = len(ids) - 1              # the last token is always computed
        for start in range(0, len(ids) - bs + 1, bs):
            chunk = tuple(ids[start:start + bs])
            h = hash((h, chunk))
            keys.append((h, chunk))
            if parent is not None and start + bs <= last_hit_end:
                b = self._cache.lookup(h, parent, chunk)
                parent = b if b != NO_BLOCK else None   # None: the chain broke, no later block hits
                if b != NO_BLOCK:
                    hits.append(b)
        return hits, keys

    def _take_block(self) -> int:
        b = self._free.popleft() if self._free else self._cache.evict()
        assert self._ref[b] == 0 and b not in self._cache.keys, f"block {b} is free but still in use"
        self._ref[b] = 1
        return b

    def _unref(self, b: int) -> None:
        self._ref[b] -= 1
        if self._ref[b] == 0 and not self._cache.park(b):
            self._free.append(b)

    def _append_new_block(self, seq_id, entry: list, off: int) -> tuple[int, tuple[int, int] | None]:
        """append_slot when the last block is full (or absent) or shared: take a fresh block."""
        if not self.num_free_blocks:
            raise OutOfBlocks(f"append_slot({seq_id!r}) needs 1 block but 0 are free")
        table = entry[1]
        b = self._take_block()
        entry[0] += 1
        if off == 0:
            table.append(b)
            return b * self.block_size, None
        old = table[-1]
        assert old not in self._cache.keys, "a partial block is never registered"
        self._ref[old] -= 1
        assert self._ref[old] > 0
        table[-1] = b
        return b * self.block_size + off, (old, b)

    def _state(self) -> tuple:
        """Deep snapshot of everything (for tests: a failed call must leave it unchanged)."""
        c = self._cache
        return (list(self._ref), list(self._free),
                {k: (n, list(t), None if tail is None else (tail[0], tail[1], list(tail[2])))
                 for k, (n, t, tail) in self._seqs.items()},
                dict(c.index), dict(c.keys), list(c.lru), self.num_shared_hits)
