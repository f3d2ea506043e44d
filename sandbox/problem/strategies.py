"""The hypothesis strategy for problems that every kernel test reuses.

It reaches: context length 1, k*block_size and k*block_size + 1; GQA ratios 1, 2, 4, 8; every
power-of-two block size 1..256 and as often sizes that are not (3, 19, 61, 69, 528, 2112, ...), within
what a variant declares; float32, float16 and bfloat16 queries; caches of the query's
dtype or fp8 (e4m3fn, e5m2; values over the whole finite range, subnormals included); shuffled
and shared blocks, NaN in every unused slot, extreme logits, one sequence at full table
capacity; groups sharing a prompt as sandbox.paging.BlockManager makes them (fork with
copy-on-write splits, prefix caching); each option on and off: k/v scales, sliding windows shorter and longer than the
context with their start at k*block_size and k*block_size + 1 and the blocks before them freed
(-1, NaN-poisoned), soft-caps small enough to bite on extreme logits, ALiBi slopes as the
paper's geometric sequence or random; several query tokens per sequence where the variant
takes them. The drawn seed is part of the falsifying example, so a failure prints how to
rebuild the exact problem.
"""
from __future__ import annotations

from hypothesis import assume, note
from hypothesis import strategies as st

from .dtypes import BASE_DTYPES, NVFP4
from .option_schema import Context
from .options import OPTIONS
from .validate import ANY_BLOCK_SIZES
from .decode import DecodeProblem


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
def query_lengths(draw, context_lens: list[int], block_size: int, max_query_len: int | None):
    """None (decode) or per-sequence query lengths: 1, block edges, longer than a block, q_s = L_s."""
    if max_query_len == 1 or not draw(st.booleans()):
        return None
    cap = max_query_len or 10**9

    def one(length):
        kind = draw(st.sampled_from(["one", "block", "block_plus_1", "all", "any"]))
        q = {"one": 1, "block": block_size, "block_plus_1": block_size + 1, "all": length}.get(kind)
        if q is None:
            q = draw(st.integers(1, length))
        return max(1, min(q, length, cap))

    return [one(n) for n in context_lens]


def block_size_draws(block_sizes):
    """A strategy over `block_sizes` that draws its powers of two and its other sizes equally often."""
    pow2 = [b for b in block_sizes if b & (b - 1) == 0]
    other = [b for b in block_sizes if b & (b - 1)]
    return st.one_of(*(st.sampled_from(group) for group in (pow2, other) if group))


@st.composite
def decode_problems(draw, block_sizes=ANY_BLOCK_SIZES, head_dims=(32, 64, 128), dtypes=BASE_DTYPES,
                    gqa_ratios=(1, 2, 4, 8), max_num_seqs: int = 3, max_kv_heads: int = 2, max_tokens: int = 520,
                    allow_extreme: bool = True, kv_dtypes=(), options=(), max_query_len: int | None = 1,
                    max_query_tokens: int = 64, max_multiply_adds: int | None = None) -> DecodeProblem:
    """A DecodeProblem small enough for the simulator/executor yet reaching every edge case above.

    kv_dtypes: cache formats that may be drawn (besides the query's dtype: fp8, and nvfp4 where the
    head dim is a multiple of 16); options:
    the FEATURES that may be switched on (each drawn by its row of the option table); max_query_len: 1 (decode), an int, or None (any), with
    at most max_query_tokens query tokens in all. max_tokens bounds each context length (block
    size 256 still gets 256 and 257 tokens when >= 257). max_multiply_adds (None: no bound) rejects
    the rare draw whose DecodeProblem.multiply_adds() exceeds it (the Numba simulator pays 5-20 us per
    multiply-add: one 16-head draw over 3 full contexts would cost a minute).
    """
    block_size = draw(block_size_draws(block_sizes))
    num_seqs = draw(st.integers(1, max_num_seqs))
    num_kv_heads = draw(st.integers(1, max_kv_heads))
    ratio = draw(st.sampled_from(gqa_ratios))
    num_heads = num_kv_heads * ratio
    lens = draw(context_lengths(block_size, num_seqs, max_tokens))
    dtype = draw(st.sampled_from(dtypes))
    head_dim = draw(st.sampled_from(head_dims))
    kv_choices = [k for k in kv_dtypes if k != NVFP4 or head_dim % 16 == 0]  # NVFP4: one scale per 16 values
    kv_dtype = draw(st.sampled_from([None] + kv_choices)) if kv_choices else None
    q_lens = draw(query_lengths(lens, block_size, max_query_len))
    if q_lens is not None and sum(q_lens) > max_query_tokens:
        q_lens = [max(1, q * max_query_tokens // sum(q_lens)) for q in q_lens]
    extreme = allow_extreme and draw(st.booleans())
    kw = draw_options(draw, options, Context(num_heads=num_heads, block_size=block_size, context_lens=tuple(lens),
                                             kv_format=kv_dtype or dtype))
    common = dict(seed=draw(st.integers(0, 2**31 - 1)), num_heads=num_heads, num_kv_heads=num_kv_heads,
                  head_dim=head_dim, block_size=block_size, dtype=dtype, kv_dtype=kv_dtype,
                  extreme_logits=extreme, **kw)
    if draw(st.integers(0, 3)) == 0:  # sharing as the allocator makes it: fork (copy-on-write) or prefix caching
        groups = draw(st.integers(1, 2))
        size = draw(st.integers(2, max(2, (max_num_seqs + 1) // groups)))  # a group of one shares nothing
        prefix = draw(st.sampled_from([block_size, block_size + 1, max(1, max_tokens // 2), max(1, max_tokens - 2)]))
        prefix = max(1, min(prefix, max_tokens))
        problem = DecodeProblem.shared(num_groups=groups, group_size=size, prefix_len=prefix,
                                       max_suffix_len=max(0, min(max_tokens - prefix, 2 * block_size)),
                                       how=draw(st.sampled_from(["fork", "prefix"])),
                                       query_lens=None if q_lens is None else
                                       max(1, min(max(q_lens), max_query_tokens // (groups * size))), **common)
    else:
        problem = DecodeProblem.random(num_seqs=num_seqs, context_lens=lens, share_prefix=draw(st.booleans()),
                                       query_lens=q_lens, **common)
    if max_multiply_adds is not None:
        assume(problem.multiply_adds() <= max_multiply_adds)
    note(problem.describe())
    return problem


def draw_options(draw, features, context: Context) -> dict:
    """DecodeProblem keywords: each row of the option table whose feature is in `features` (and that applies
    to the problem, and is not excluded by one already on) switched on with probability 1/2, drawn its way."""
    keywords, on = {}, set()
    for option in OPTIONS:
        if (option.feature not in features or option.draw is None or not option.applies(context)
                or on & set(option.excludes) or not draw(st.booleans())):
            continue
        on.add(option.feature)
        keywords.update(option.draw(draw, st, context))
    return keywords


def problems_for(limits, **shapes):
    """decode_problems restricted to what `limits` (a variant's Limits) declares (block_sizes None: any)."""
    block_sizes = ANY_BLOCK_SIZES if limits.block_sizes is None else tuple(limits.block_sizes)
    if limits.head_dims is not None and "head_dims" in shapes:
        shapes["head_dims"] = tuple(d for d in shapes["head_dims"] if d in limits.head_dims) or limits.head_dims[:1]
    return decode_problems(block_sizes=block_sizes, dtypes=limits.dtypes, kv_dtypes=limits.kv_dtypes,
                           options=limits.options, max_query_len=limits.max_query_len, **shapes)
