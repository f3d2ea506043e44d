"""Block tables and sparse index sets for MLAProblem's constructors (sandbox/problem/mla.py).

    private_tables     tables as DecodeProblem.random draws them (shuffled, shared prefixes)
    allocator_tables   tables from sandbox.paging.BlockManager (fork with copy-on-write, or prefix caching)
    draw_indices       per query row, a sparse index set (slots, -1 invalid) of one of INDEX_KINDS
"""
from __future__ import annotations

import numpy as np

from .decode import shuffled_blocks
from .mla_validate import row_positions, token_slots
from ..errors import RefusedRequest

# Per-row kinds of a random sparse index set: every index invalid, a single valid one, as many as fit
# (min(topk, p + 1)), or any count in between.
INDEX_KINDS = ("none", "one", "full", "any", "any")


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
    from ..paging import BlockManager

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
