"""Cascade plans: which sequences share a prefix of full blocks, so attention over it is computed once.

A group is a set of sequences whose block tables start with the same physical blocks, each of
them full (all block_size tokens are the sequence's own context) for every member. That is what
BlockManager.fork and prefix sharing produce. A last prompt block that is only partly full is not
shared (its tail differs per sequence once written), nor is one that copy-on-write has split (the
tables then differ). Blocks a sliding window has freed (-1) end the shared prefix.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Group:
    seqs: tuple[int, ...]      # sequence indices, increasing
    prefix_blocks: int         # leading table entries shared by every member (0: no sharing)

    def prefix_tokens(self, block_size: int) -> int:
        return self.prefix_blocks * block_size


def shared_full_blocks(block_tables: np.ndarray, context_lens: np.ndarray, block_size: int, seqs) -> int:
    """Leading blocks that every sequence of `seqs` has in common, valid and full for each of them."""
    seqs = list(seqs)
    full = int(min(int(context_lens[s]) for s in seqs) // block_size)
    rows = block_tables[seqs, :full]
    same = (rows == rows[0]).all(axis=0) & (rows[0] >= 0)
    return int(np.argmin(same)) if not same.all() else full


def plan(block_tables: np.ndarray, context_lens: np.ndarray, block_size: int) -> list[Group]:
    """Groups covering every sequence once, in order of their first member.

    Sequences are grouped by their first physical block (when it is full for them); a group's
    prefix is what all its members share. A sequence that shares nothing is a group of one with
    prefix 0. block_tables [num_seqs, max_blocks] int32, context_lens [num_seqs].
    """
    by_first: dict[int, list[int]] = {}
    alone = []
    for s in range(len(context_lens)):
        first = int(block_tables[s, 0])
        if first >= 0 and context_lens[s] >= block_size:
            by_first.setdefault(first, []).append(s)
        else:
            alone.append(s)
    groups = []
    for members in by_first.values():
        if len(members) == 1:
            alone.extend(members)
            continue
        groups.append(Group(tuple(members), shared_full_blocks(block_tables, context_lens, block_size, members)))
    groups += [Group((s,), 0) for s in alone]
    return sorted(groups, key=lambda g: g.seqs[0])


def prefix_bytes_saved(groups: list[Group], block_size: int, bytes_per_token: int) -> int:
    """K/V bytes a cascade does not read again: (members - 1) x prefix per group."""
    return sum((len(g.seqs) - 1) * g.prefix_tokens(block_size) * bytes_per_token for g in groups)
