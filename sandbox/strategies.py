"""The hypothesis strategy for decode problems that every kernel test reuses.

It reaches: context length 1, k*block_size and k*block_size + 1; GQA ratios 1, 2, 4, 8; every
power-of-two block size 1..256; float32 and float16; shuffled and shared blocks, NaN in every
unused slot, extreme logits, one sequence at full table capacity. The drawn seed is part of the
falsifying example, so a failure prints how to rebuild the exact problem.
"""
from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st

from .problem import DecodeProblem
from .variant import DTYPES, POW2_BLOCK_SIZES


@st.composite
def context_lengths(draw, block_size: int, num_seqs: int, max_tokens: int):
    """Per-sequence lengths mixing the traps (1, k*bs, k*bs+1) with arbitrary ones, all <= max_tokens."""
    max_tokens = max(max_tokens, 1)
    k_max = max(1, max_tokens // block_size)

    def one(kind):
        if kind == "one":
            return 1
        k = draw(st.integers(1, k_max))
        if kind == "k_block":
            return min(k * block_size, max_tokens)
        if kind == "k_block_plus_1":
            return min(k * block_size + 1, max_tokens) if k * block_size + 1 <= max_tokens else min(block_size + 1, max_tokens)
        return draw(st.integers(1, max_tokens))

    kinds = st.sampled_from(["one", "k_block", "k_block_plus_1", "any"])
    return [one(draw(kinds)) for _ in range(num_seqs)]


@st.composite
def decode_problems(draw, block_sizes=POW2_BLOCK_SIZES, head_dims=(32, 64, 128), dtypes=DTYPES,
                    gqa_ratios=(1, 2, 4, 8), max_num_seqs: int = 3, max_kv_heads: int = 2, max_tokens: int = 520,
                    allow_extreme: bool = True) -> DecodeProblem:
    """A DecodeProblem small enough for the simulator/executor yet reaching every edge case above.

    max_tokens bounds each context length (block size 256 still gets 256 and 257 tokens when >= 257).
    """
    block_size = draw(st.sampled_from(block_sizes))
    num_seqs = draw(st.integers(1, max_num_seqs))
    num_kv_heads = draw(st.integers(1, max_kv_heads))
    ratio = draw(st.sampled_from(gqa_ratios))
    lens = draw(context_lengths(block_size, num_seqs, max_tokens))
    problem = DecodeProblem.random(
        seed=draw(st.integers(0, 2**31 - 1)),
        num_seqs=num_seqs,
        num_heads=num_kv_heads * ratio,
        num_kv_heads=num_kv_heads,
        head_dim=draw(st.sampled_from(head_dims)),
        block_size=block_size,
        context_lens=lens,
        dtype=draw(st.sampled_from(dtypes)),
        share_prefix=draw(st.booleans()),
        extreme_logits=allow_extreme and draw(st.booleans()),
    )
    note(problem.describe())
    return problem
