"""Block tables and sparse index sets for MLAProblem's constructors (sandbox/problem/mla/problem.py).

    allocator_tables   tables from sandbox.paging.BlockManager (fork with copy-on-write, or prefix caching)
    draw_indices       per query row, a sparse index set (slots, -1 invalid) of one of INDEX_KINDS
"""
from __future__ import annotations

import numpy as np

from ..tables import grouped_allocation, shuffled_blocks
from .validate import row_positions, token_slots
from ...errors import RefusedRequest

# Per-row kinds of a random sparse index set: every index invalid, a single valid one, as many as fit
# (min(topk, p + 1)), or any count in between.
INDEX_KINDS = ("none", "one", "full", "any", "any")


def allocator_tables(rng, lens, block_size: int, prefix_len: int, group_size: int, how: str):
    """Tables from sandbox.paging.BlockManager, blocks relabelled in a seeded order: (tables, num_blocks,
    copy-on-write orders (src, dst) in relabelled blocks)."""
    num_seqs = len(lens)
    blocks_per_seq = -(-lens // block_size)
    manager, copies = grouped_allocation(rng, lens, block_size, prefix_len, group_size, how)
    relabel = shuffled_blocks(rng, manager.num_blocks, manager.num_blocks)
    tables = np.full((num_seqs, int(blocks_per_seq.max())), -1, dtype=np.int32)
    for s in range(num_seqs):
        table = manager.block_table(s)
        tables[s, : len(table)] = relabel[table]
    return tables, manager.num_blocks, [(int(relabel[a]), int(relabel[b])) for a, b in copies]


def draw_indices(rng, tables, lens, q_lens, block_size: int, topk: int, valid_counts=None) -> np.ndarray:
    """int32 [total_q, topk] sparse indices (slots, -1 invalid) for every query row; see MLAProblem.random."""
    if topk < 1:
        raise RefusedRequest(f"topk must be >= 1, got {topk}")
    seqs, positions = row_positions(lens, q_lens)
    if valid_counts is not None and len(valid_counts) != len(seqs):
        raise RefusedRequest(f"valid_counts must give one count per query row ({len(seqs)}), got {len(valid_counts)}")
    out = np.full((len(seqs), topk), -1, np.int32)
    for r, (s, p) in enumerate(zip(seqs.tolist(), positions.tolist())):
        most = min(topk, p + 1)
        if valid_counts is None:
            kind = INDEX_KINDS[rng.integers(len(INDEX_KINDS))]
            n = {"none": 0, "one": 1, "full": most}.get(kind)
            n = int(rng.integers(0, most + 1)) if n is None else n
        else:
            n = max(0, min(int(valid_counts[r]), most))
        edges = [t for k in range(p // block_size + 1) for t in (k * block_size - 1, k * block_size)]
        favoured = np.unique([t for t in [0, p, *edges] if 0 <= t <= p])
        rest = np.setdiff1d(np.arange(p + 1), favoured)
        order = np.concatenate([rng.permutation(favoured), rng.permutation(rest)])
        picked = order[:n] if rng.random() < 0.5 else rng.permutation(order)[:n]
        slots = token_slots(tables[s], p + 1, block_size)[picked]
        columns = rng.permutation(topk)[:n]
        out[r, columns] = slots
    return out
