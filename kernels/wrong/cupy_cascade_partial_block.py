"""wrong.cupy.cascade_partial_block: cupy.cascade whose plan also counts the partly shared block after the
shared full blocks as prefix.

Negative control: the property tests must reject it (tests/kernels/test_variants.py), and
tests/kernels/test_cupy_multi.py rejects it directly on forked groups. The bug: after the full blocks every
member shares, the plan counts the next block as a full shared block (prefix += block_size), as if the
prompt's partly full last block were shared by all; but copy-on-write has given each member that
appended a copy of it holding its own tokens (with prefix caching, or a donor sharing only some full
blocks, it is another block altogether). The prefix tiles read it through the first member's table, so
another member sees the first member's tokens (or unwritten NaN slots) where its own should be. A
group whose members all stop inside the shared partial block is still right (each row's causal mask
stops at its own position). Stays in bounds: the extra block is taken only where every member's table
holds a block at that index, and no row reads past the longest member's context.
Limits: as cupy.cascade.
"""
from __future__ import annotations

from kernels.cupy_raw import cascade

NAME = "wrong.cupy.cascade_partial_block"
LIMITS = cascade.LIMITS


def partial_block_prefixes(problem, groups) -> list[tuple[tuple[int, ...], int]]:
    """The real plan's groups with one more block of prefix where every member holds a block there."""
    bs = problem.block_size
    out = []
    for seqs, prefix in cascade.shared_prefixes(groups, bs):
        if len(seqs) > 1:
            index = prefix // bs
            if index < problem.max_blocks_per_seq and all(problem.block_tables[s, index] >= 0 for s in seqs):
                prefix = (index + 1) * bs  # BUG: the block at `index` is not full, nor the same for every member
        out.append((seqs, prefix))
    return out


def prepare(problem, backend: str, partition_size: int | None = None):
    groups = cascade.plan_for(problem)
    return cascade.prepare_with_prefixes(NAME, problem, backend, groups, partial_block_prefixes(problem, groups),
                                         partition_size)
