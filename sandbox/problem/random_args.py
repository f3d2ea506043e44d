"""The arguments of DecodeProblem.random checked before anything is drawn or allocated.

Each is a ValueError naming the argument and its constraint; the problem's largest allocation is bounded too
(MAX_RANDOM_BYTES: its K and V caches, staged in float32, beside the tables and the query), so a slip such as
max_context_len=10**9 is refused at once with the size it would take instead of running out of memory later.
"""
from __future__ import annotations

import numpy as np
from ..errors import RefusedRequest

MAX_RANDOM_BYTES = 8 * 2**30  # a random problem beyond 8 GiB is a typo more often than a test


def _integer(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise RefusedRequest(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def check_random_arguments(seed, num_seqs, num_heads, num_kv_heads, head_dim, block_size: int, context_lens,
                           max_context_len, spare_blocks) -> None:
    """Raise ValueError for the first argument of DecodeProblem.random out of its range (block_size already
    checked); then for a problem whose K/V caches would exceed MAX_RANDOM_BYTES, with the size."""
    _integer("seed", seed, 0)
    num_seqs = _integer("num_seqs", num_seqs, 1)
    num_heads = _integer("num_heads", num_heads, 1)
    num_kv_heads = _integer("num_kv_heads", num_kv_heads, 1)
    head_dim = _integer("head_dim", head_dim, 1)
    if num_heads % num_kv_heads:
        raise RefusedRequest(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    if spare_blocks is not None:
        _integer("spare_blocks", spare_blocks, 0)
    if context_lens is None:
        longest = _integer("max_context_len", max_context_len, 1)
        source = f"max_context_len={longest:,}"
    else:
        try:
            lens = np.asarray(context_lens, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise RefusedRequest(f"context_lens must be integers >= 1, got {context_lens!r}") from None
        if lens.shape != (num_seqs,):
            raise RefusedRequest(f"context_lens must have num_seqs = {num_seqs} entries, got shape {lens.shape}")
        if (lens < 1).any():
            raise RefusedRequest(f"context_lens must all be >= 1, got {lens.tolist()}")
        longest = int(lens.max())
        source = f"context_lens (longest {longest:,})"
    blocks = num_seqs * -(-longest // block_size)
    blocks += max(1, blocks // 4) if spare_blocks is None else int(spare_blocks)
    nbytes = 2 * 4 * blocks * block_size * num_kv_heads * head_dim  # K and V, staged in float32
    if nbytes > MAX_RANDOM_BYTES:
        raise RefusedRequest(f"DecodeProblem.random would allocate {nbytes / 2**30:,.1f} GiB of K/V cache ({blocks:,} "
                             f"blocks of {block_size} tokens x {num_kv_heads} KV heads x head_dim {head_dim}, from "
                             f"num_seqs={num_seqs} and {source}); the bound is "
                             f"{MAX_RANDOM_BYTES / 2**30:g} GiB (sandbox.problem.random_args.MAX_RANDOM_BYTES): lower "
                             f"{'max_context_len' if context_lens is None else 'context_lens'} or num_seqs")


def rebuild_call(class_name: str, recipe: dict) -> str:
    """The call that rebuilds a problem from its recipe, e.g. "DecodeProblem.random(seed=0, ...)" (the recipe's
    `_constructor`, "random" by default): what a problem's repr prints, so hypothesis shows a pasteable call."""
    args = ", ".join(f"{k}={v!r}" for k, v in recipe.items() if k != "_constructor")
    return f"{class_name}.{recipe.get('_constructor', 'random')}({args})"
