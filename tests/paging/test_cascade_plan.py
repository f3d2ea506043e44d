"""Cascade plans against a brute-force grouping of tables the allocator really produces."""
import itertools

import numpy as np
from hypothesis import given, strategies as st

from sandbox.paging.cascade_plan import plan
from sandbox.problem import DecodeProblem


def brute_force_common_prefix(p, seqs) -> int:
    """Longest k such that blocks 0..k-1 are the same valid physical block in every member and full for each."""
    k = 0
    while True:
        if any(int(p.context_lens[s]) < (k + 1) * p.block_size for s in seqs):
            return k
        column = {int(p.block_tables[s, k]) for s in seqs}
        if len(column) != 1 or min(column) < 0:
            return k
        k += 1


def check_plan(p):
    groups = plan(p.block_tables, p.context_lens, p.block_size)
    members = sorted(itertools.chain.from_iterable(g.seqs for g in groups))
    assert members == list(range(p.num_seqs)), "every sequence in exactly one group"
    for g in groups:
        assert g.prefix_blocks == brute_force_common_prefix(p, g.seqs) if len(g.seqs) > 1 else g.prefix_blocks == 0
    # Maximal: two sequences in different groups share no full first block.
    for a, b in itertools.combinations(groups, 2):
        for s, t in itertools.product(a.seqs, b.seqs):
            assert brute_force_common_prefix(p, (s, t)) == 0
    return groups


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 60), st.sampled_from(["fork", "prefix"]),
       st.integers(1, 3), st.integers(1, 4), st.integers(0, 20))
def test_plan_equals_brute_force_on_allocator_tables(seed, block_size, prefix_len, how, groups, size, max_suffix):
    p = DecodeProblem.shared(seed, num_groups=groups, group_size=size, prefix_len=prefix_len, max_suffix_len=max_suffix,
                             how=how, num_heads=2, num_kv_heads=1, head_dim=8, block_size=block_size)
    check_plan(p)


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 4, 16]))
def test_plan_equals_brute_force_on_random_sharing(seed, block_size):
    check_plan(DecodeProblem.random(seed, num_seqs=5, head_dim=8, num_heads=2, num_kv_heads=1, block_size=block_size,
                                    max_context_len=60))


def test_fork_shares_the_full_prompt_blocks_not_the_split_partial_one():
    p = DecodeProblem.shared(0, num_groups=1, group_size=4, prefix_len=37, suffix_lens=[3, 5, 1, 9], block_size=8,
                             num_heads=2, num_kv_heads=1, head_dim=8)
    (group,) = plan(p.block_tables, p.context_lens, p.block_size)
    assert group.seqs == (0, 1, 2, 3) and group.prefix_blocks == 4      # 37 tokens: 4 full blocks + 5 split by CoW


def test_a_partly_full_shared_last_block_is_not_shared():
    """Forked children that never appended still point at the parent's partial block: not part of the prefix."""
    p = DecodeProblem.shared(0, num_groups=1, group_size=3, prefix_len=20, suffix_lens=[0, 0, 0], block_size=8,
                             num_heads=2, num_kv_heads=1, head_dim=8)
    assert (p.block_tables[:, 2] == p.block_tables[0, 2]).all()          # the partial block is in every table
    (group,) = plan(p.block_tables, p.context_lens, p.block_size)
    assert group.prefix_blocks == 2


def test_freed_blocks_before_a_window_end_the_prefix():
    p = DecodeProblem.shared(0, num_groups=1, group_size=2, prefix_len=64, suffix_lens=[4, 4], block_size=8,
                             num_heads=2, num_kv_heads=1, head_dim=8, window_left=20)
    assert (p.block_tables[:, 0] == -1).all()
    assert plan(p.block_tables, p.context_lens, p.block_size)[0].prefix_blocks == 0
