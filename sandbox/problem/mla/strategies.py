"""The hypothesis strategy for MLA problems that every MLA property test draws from.

It reaches: context length 1, k*block_size and k*block_size + 1; block sizes 1..256 and two that are not
powers of two (3, 48); bfloat16 and float16 queries; caches of the query's dtype or fp8 records (codes
over every finite e4m3 code); shuffled and shared blocks (and groups forked or prefix-cached through
sandbox.paging.BlockManager), one sequence at full table capacity, NaN in every slot no query row reads,
extreme logits; several query rows per sequence (q_s = 1, block edges, q_s = L_s); sparse index sets of
several widths whose rows hold no valid index, one, as many as fit, or any count, favouring tokens 0, p
and block edges, in any order with -1s between them (the slots no index reads are NaN too).
The drawn seed is part of the falsifying example: a failure prints the call that rebuilds it.
"""
from __future__ import annotations

from hypothesis import assume, note
from hypothesis import strategies as st

from ..kinds import MLA
from .problem import MLAProblem
from .validate import MLA_QUERY_DTYPES
from ..strategies import context_lengths, query_lengths

MLA_BLOCK_SIZES = (1, 2, 3, 4, 8, 16, 32, 48, 64, 128, 256)


@st.composite
def mla_problems(draw, block_sizes=MLA_BLOCK_SIZES, dtypes=MLA_QUERY_DTYPES, kv_formats=("fp8_record",),
                 modes=("dense", "sparse"), max_query_len: int | None = None, max_num_seqs: int = 3,
                 max_heads: int = 4, max_tokens: int = 300, max_query_tokens: int = 8, max_topk: int = 64,
                 allow_extreme: bool = True, max_multiply_adds: int | None = None) -> MLAProblem:
    """An MLAProblem within the given limits, small enough for the simulator/executor (see the module docstring).

    max_multiply_adds (None: no bound) rejects the rare draw whose MLAProblem.multiply_adds() exceeds it
    (the Numba simulator pays microseconds per multiply-add and a latent row is 576 + 512 of them per head).
    """
    block_size = draw(st.sampled_from(block_sizes))
    num_seqs = draw(st.integers(1, max_num_seqs))
    lens = draw(context_lengths(block_size, num_seqs, max_tokens))
    q_lens = draw(query_lengths(lens, block_size, max_query_len))
    if q_lens is not None and sum(q_lens) > max_query_tokens:
        q_lens = [max(1, q * max_query_tokens // sum(q_lens)) for q in q_lens]
    topk = None
    if draw(st.sampled_from(modes)) == "sparse":
        widths = sorted({w for w in (1, 2, 7, block_size, block_size + 1, max(lens), max_topk) if w <= max_topk})
        topk = draw(st.sampled_from(widths))
    common = dict(seed=draw(st.integers(0, 2**31 - 1)), num_heads=draw(st.integers(1, max_heads)),
                  block_size=block_size, dtype=draw(st.sampled_from(dtypes)),
                  kv_format=draw(st.sampled_from((None,) + tuple(kv_formats))), topk=topk,
                  extreme_logits=allow_extreme and draw(st.booleans()))
    if draw(st.integers(0, 3)) == 0:  # sharing as the allocator makes it: fork (copy-on-write) or prefix caching
        groups = draw(st.integers(1, 2))
        size = draw(st.integers(2, max(2, (max_num_seqs + 1) // groups)))
        prefix = max(1, min(draw(st.sampled_from([block_size, block_size + 1, max_tokens // 2])), max_tokens))
        problem = MLAProblem.shared(num_groups=groups, group_size=size, prefix_len=prefix,
                                    max_suffix_len=max(0, min(max_tokens - prefix, 2 * block_size)),
                                    how=draw(st.sampled_from(["fork", "prefix"])),
                                    query_lens=None if q_lens is None else
                                    max(1, min(max(q_lens), max_query_tokens // (groups * size))), **common)
    else:
        problem = MLAProblem.random(num_seqs=num_seqs, context_lens=lens, share_prefix=draw(st.booleans()),
                                    query_lens=q_lens, **common)
    if max_multiply_adds is not None:
        assume(problem.multiply_adds() <= max_multiply_adds)
    note(problem.describe())
    return problem


def mla_problems_for(limits, **shapes):
    """mla_problems restricted to what `limits` (an MLALimits) declares."""
    block_sizes = tuple(b for b in MLA_BLOCK_SIZES if limits.block_sizes is None or b in limits.block_sizes)
    return mla_problems(block_sizes=block_sizes, dtypes=limits.dtypes, kv_formats=limits.kv_formats,
                        modes=limits.modes, max_query_len=limits.max_query_len, **shapes)


MLA.attach(strategies=mla_problems_for)  # kinds.MLA.strategies(limits, ...)
