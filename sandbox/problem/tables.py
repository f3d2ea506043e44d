"""Random block tables, shared by every problem kind's constructors (DecodeProblem, MLAProblem).

    shuffled_blocks     distinct physical blocks in a seeded order that is never increasing
    private_tables      tables as DecodeProblem.random draws them (shuffled, shared prefixes)
    grouped_allocation  groups sharing a prompt, allocated on a real sandbox.paging.BlockManager
"""
from __future__ import annotations

import numpy as np

from ..paging import BlockManager


def shuffled_blocks(rng: np.random.Generator, num_blocks: int, needed: int) -> np.ndarray:
    """`needed` distinct physical blocks out of `num_blocks`, in a seeded order that is never increasing.

    An increasing order would let a kernel that walks blocks 0, 1, 2, ... instead of reading the
    table miss everywhere but at the order's gaps (a thorough run once drew [0, 1, 2, 4]); a single
    block is never block 0 when there is another.
    """
    physical = rng.permutation(num_blocks)[:needed]
    if needed > 1 and (np.diff(physical) > 0).all():
        physical = np.roll(physical, 1)
    elif needed == 1 and physical[0] == 0 and num_blocks > 1:
        physical[0] = 1
    return physical


def private_tables(rng, lens, blocks_per_seq, block_size: int, share_prefix: bool, spare_blocks):
    """Tables as DecodeProblem.random draws them: (tables int32, physical blocks in use, num_blocks)."""
    num_seqs = len(lens)
    logical, shared_from = [], {}
    full_blocks = lens // block_size
    for s in range(num_seqs):
        n_share = 0
        if share_prefix and s > 0 and rng.random() < 0.5:
            donor = int(rng.integers(s))
            n_share = int(rng.integers(0, min(full_blocks[s], full_blocks[donor]) + 1))
            for i in range(n_share):
                shared_from[(s, i)] = shared_from.get((donor, i), (donor, i))
        logical.extend((s, i) for i in range(n_share, int(blocks_per_seq[s])))
    needed = len(logical)
    num_blocks = needed + (max(1, needed // 4) if spare_blocks is None else spare_blocks)
    physical = shuffled_blocks(rng, num_blocks, needed)
    tables = np.full((num_seqs, int(blocks_per_seq.max())), -1, dtype=np.int32)
    for (s, i), block in zip(logical, physical):
        tables[s, i] = block
    for (s, i), (s0, i0) in shared_from.items():
        tables[s, i] = tables[s0, i0]
    return tables, physical, num_blocks


def grouped_allocation(rng, lens, block_size: int, prefix_len: int, group_size: int, how: str):
    """Groups of group_size sequences sharing a prefix_len-token prompt, allocated on a real BlockManager:
    "prefix" (prefix caching: each allocates prompt + its own tokens) or "fork" (the first allocates the
    prompt, the others fork it, then each appends its own tokens, copy-on-write as an engine runs it).
    Returns (manager, copy-on-write orders (src, dst) in the manager's blocks, in the order they ran)."""
    suffix = lens - prefix_len
    blocks_per_seq = -(-lens // block_size)
    manager = BlockManager(int(blocks_per_seq.sum()) + len(lens) + 2, block_size)
    copies = []
    for g in range(len(lens) // group_size):
        seqs = range(g * group_size, (g + 1) * group_size)
        prompt = [int(x) for x in rng.integers(0, 50_000, size=prefix_len)]
        for s in seqs:
            if how == "prefix":
                manager.allocate(s, prompt + [int(x) for x in rng.integers(0, 50_000, size=int(suffix[s]))])
            elif s == seqs[0]:
                manager.allocate(s, prompt)
            else:
                manager.fork(seqs[0], s)
        for s in seqs if how == "fork" else ():
            for _ in range(int(suffix[s])):
                _, copy = manager.append_slot(s)
                if copy is not None:
                    copies.append(copy)
    return manager, copies
