"""DecodeProblem: the canonical paged decode inputs, and a seeded generator of nasty ones."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .validate import validate_decode_inputs

# Extreme logits: q is scaled so that scale * q.k has a standard deviation of about 40,
# so logits reach +-120: exp() without subtracting the max overflows in float32 (88.7).
EXTREME_QUERY_GAIN = 120.0


def _uniform(rng: np.random.Generator, shape) -> np.ndarray:
    """Uniform in [-1, 1), drawn directly in float32 (large caches would double in float64)."""
    out = rng.random(shape, dtype=np.float32)
    out *= 2
    out -= 1
    return out


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


@dataclasses.dataclass
class DecodeProblem:
    """One decode step over a paged KV cache (host NumPy arrays, layout as in DESIGN.md).

    query         [num_seqs, num_heads, head_dim]                  float32 | float16
    key_cache     [num_blocks, block_size, num_kv_heads, head_dim] same dtype
    value_cache   [num_blocks, block_size, num_kv_heads, head_dim] same dtype
    block_tables  [num_seqs, max_blocks_per_seq] int32 (-1 past a sequence's last block)
    context_lens  [num_seqs] int32
    """

    query: np.ndarray
    key_cache: np.ndarray
    value_cache: np.ndarray
    block_tables: np.ndarray
    context_lens: np.ndarray
    scale: float | None = None
    seed: int | None = None
    recipe: dict | None = dataclasses.field(default=None, repr=False, compare=False)  # random()'s arguments

    def validate(self) -> "DecodeProblem":
        validate_decode_inputs(self.query, self.key_cache, self.value_cache,
                               self.block_tables, self.context_lens, self.scale)
        return self

    @property
    def num_seqs(self) -> int:
        return self.query.shape[0]

    @property
    def num_heads(self) -> int:
        return self.query.shape[1]

    @property
    def head_dim(self) -> int:
        return self.query.shape[2]

    @property
    def num_blocks(self) -> int:
        return self.key_cache.shape[0]

    @property
    def block_size(self) -> int:
        return self.key_cache.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.key_cache.shape[2]

    @property
    def max_blocks_per_seq(self) -> int:
        return self.block_tables.shape[1]

    @property
    def dtype(self) -> np.dtype:
        return self.query.dtype

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else float(self.scale)

    def arrays(self) -> tuple:
        """(query, key_cache, value_cache, block_tables, context_lens, scale), as sandbox.run takes them."""
        return self.query, self.key_cache, self.value_cache, self.block_tables, self.context_lens, self.scale

    def bytes_moved(self) -> int:
        """Bytes a decode step really needs: K/V of real tokens, query, output, table entries read."""
        item = self.query.dtype.itemsize
        tokens = int(self.context_lens.astype(np.int64).sum())
        kv = 2 * tokens * self.num_kv_heads * self.head_dim * item
        q_and_out = 2 * self.query.size * item
        table = int(((self.context_lens.astype(np.int64) + self.block_size - 1) // self.block_size).sum()) * 4
        return kv + q_and_out + table + self.context_lens.nbytes

    def describe(self) -> str:
        lens = self.context_lens.tolist()
        shown = lens if len(lens) <= 8 else lens[:8] + ["..."]
        return (f"DecodeProblem(seed={self.seed}, seqs={self.num_seqs}, heads={self.num_heads}/{self.num_kv_heads}, "
                f"head_dim={self.head_dim}, block_size={self.block_size}, blocks={self.num_blocks}, "
                f"table={self.max_blocks_per_seq}, dtype={self.dtype.name}, context_lens={shown})")

    __str__ = describe

    def __repr__(self) -> str:
        """The call that rebuilds this exact problem (hypothesis prints it for a falsifying example)."""
        if self.recipe is None:
            return self.describe()
        args = ", ".join(f"{k}={v!r}" for k, v in self.recipe.items())
        return f"DecodeProblem.random({args})"

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis/IPython pretty printers: same compact call
        printer.text(repr(self))

    @classmethod
    def random(cls, seed: int, num_seqs: int = 4, num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64,
               block_size: int = 16, context_lens=None, max_context_len: int = 256, dtype="float32",
               share_prefix: bool = True, full_capacity: bool = True, extreme_logits: bool = False,
               spare_blocks: int | None = None, nan_fill: bool = True) -> "DecodeProblem":
        """A seeded random problem with the traps real serving produces.

        Physical blocks are shuffled (never in increasing order); with share_prefix, later
        sequences may point their first full blocks at an earlier sequence's blocks; with
        full_capacity (and drawn lengths), one sequence fills its whole table; every slot no
        sequence reads (including the tail of each last block, and spare blocks) is NaN.
        """
        rng = np.random.default_rng(seed)
        dtype = np.dtype(dtype)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
        if context_lens is None:
            if max_context_len < 1:
                raise ValueError(f"max_context_len must be >= 1, got {max_context_len}")
            lens = rng.integers(1, max_context_len + 1, size=num_seqs)
            if full_capacity:
                capacity = -(-max_context_len // block_size) * block_size
                lens[rng.integers(num_seqs)] = capacity
        else:
            lens = np.asarray(context_lens, dtype=np.int64)
            if lens.shape != (num_seqs,):
                raise ValueError(f"context_lens must have num_seqs = {num_seqs} entries, got shape {lens.shape}")
            if (lens < 1).any():
                raise ValueError(f"context_lens must all be >= 1, got {lens.tolist()}")
        blocks_per_seq = -(-lens // block_size)
        max_blocks = int(blocks_per_seq.max())

        # Logical blocks -> owner; sharing maps a later sequence's full prefix blocks onto an earlier one's.
        logical = []  # (seq, logical_index) that need their own physical block
        shared_from = {}  # (seq, i) -> (seq0, i)
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
        spare = max(1, needed // 4) if spare_blocks is None else spare_blocks
        num_blocks = needed + spare
        physical = shuffled_blocks(rng, num_blocks, needed)

        tables = np.full((num_seqs, max_blocks), -1, dtype=np.int32)
        for (s, i), block in zip(logical, physical):
            tables[s, i] = block
        for (s, i), (s0, i0) in shared_from.items():
            tables[s, i] = tables[s0, i0]

        cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
        fill = np.nan if nan_fill else 0.0
        key_cache = np.full(cache_shape, fill, dtype=np.float32)
        value_cache = np.full(cache_shape, fill, dtype=np.float32)
        block_shape = (needed, block_size, num_kv_heads, head_dim)
        key_cache[physical] = _uniform(rng, block_shape)
        value_cache[physical] = _uniform(rng, block_shape)
        # Shared blocks are always full, so every partial last block is private: poison its tail.
        for s in range(num_seqs):
            used_in_last = int(lens[s]) - (int(blocks_per_seq[s]) - 1) * block_size
            last = tables[s, int(blocks_per_seq[s]) - 1]
            key_cache[last, used_in_last:] = fill
            value_cache[last, used_in_last:] = fill
        query = rng.uniform(-1, 1, size=(num_seqs, num_heads, head_dim))
        if extreme_logits:
            query *= EXTREME_QUERY_GAIN
        recipe = dict(seed=seed, num_seqs=num_seqs, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                      block_size=block_size, context_lens=None if context_lens is None else [int(n) for n in context_lens],
                      max_context_len=max_context_len, dtype=dtype.name, share_prefix=share_prefix,
                      full_capacity=full_capacity, extreme_logits=extreme_logits, spare_blocks=spare_blocks,
                      nan_fill=nan_fill)
        return cls(query=query.astype(dtype), key_cache=key_cache.astype(dtype), value_cache=value_cache.astype(dtype),
                   block_tables=tables, context_lens=lens.astype(np.int32), scale=None, seed=seed,
                   recipe=recipe).validate()
