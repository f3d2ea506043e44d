"""Paged KV-cache bookkeeping: which physical block holds which tokens of which sequence."""
from sandbox.paging.block_manager import BlockManager, OutOfBlocks
from sandbox.paging.swap import SwappedSequences

__all__ = ["BlockManager", "OutOfBlocks", "SwappedSequences"]
