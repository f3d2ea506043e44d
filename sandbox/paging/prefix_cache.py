"""The prefix cache: a content-hash index of full blocks and the LRU list of cached blocks nobody uses.

A full block is keyed by ``(h, parent, ids)``: ``h`` chains the previous block's hash with this
block's token ids, ``parent`` is the physical block registered for the previous full block (-1 for
the first) and ``ids`` the block's tokens. A lookup hits only when all three match, so two
prefixes whose hashes collide can never alias: a hit means the whole chain of blocks before it hit
too, each verified by content.

A registered block whose last user frees it stays in the index and joins the LRU list (it still
holds valid KV); it leaves the index only when it is evicted to make room. Eviction takes the
least recently freed block first (vLLM and nano-vllm do the same); a hit on a cached free block
takes it off the list again.
"""
from __future__ import annotations

from collections import OrderedDict

NO_BLOCK = -1


class PrefixCache:
    """Hash index (hash -> block, block -> key) and the LRU order of cached free blocks."""

    def __init__(self):
        self.index: dict[int, int] = {}                 # chained hash -> registered block
        self.keys: dict[int, tuple] = {}                # registered block -> (hash, parent, ids)
        self.lru: OrderedDict[int, None] = OrderedDict()   # cached free blocks, least recently freed first

    def __len__(self) -> int:
        return len(self.lru)

    def lookup(self, h: int, parent: int, ids: tuple) -> int:
        """The block registered for exactly this key, or NO_BLOCK."""
        b = self.index.get(h, NO_BLOCK)
        return b if b != NO_BLOCK and self.keys[b] == (h, parent, ids) else NO_BLOCK

    def register(self, b: int, h: int, parent: int, ids: tuple) -> int:
        """Index block ``b`` under its key; returns the block now registered for that content.

        When the hash is already taken (the same content computed twice, or a verified-away
        collision), the first block keeps the entry and ``b`` stays private; the caller chains its
        next block to the returned block so later lookups can follow the registered chain.
        """
        held = self.index.get(h, NO_BLOCK)
        if held == NO_BLOCK:
            self.index[h] = b
            self.keys[b] = (h, parent, ids)
            return b
        return held if self.keys[held] == (h, parent, ids) else b

    def park(self, b: int) -> bool:
        """Block ``b`` lost its last user: keep it cached (True) if registered, else False."""
        if b in self.keys:
            self.lru[b] = None
            return True
        return False

    def revive(self, b: int) -> None:
        """A hit on a cached free block: it is in use again."""
        del self.lru[b]

    def evict(self) -> int:
        """Drop the least recently freed cached block from the index and return it (now empty)."""
        b, _ = self.lru.popitem(last=False)
        self.forget(b)
        return b

    def forget(self, b: int) -> None:
        """Remove ``b`` from the index (its content is about to change or is unknown)."""
        h = self.keys.pop(b)[0]
        assert self.index[h] == b
        del self.index[h]
