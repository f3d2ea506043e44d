"""MLAProblem: multi-head latent attention (DeepSeek V2/V3-style MLA) over a paged latent cache, dense or top-k sparse.

Host NumPy arrays (C-contiguous):

    query         [total_q, num_heads, 576]            bfloat16 | float16 (absorbed query: 512 latent + 64 RoPE)
    latent_cache  [num_blocks, block_size, 576]        the query's dtype, or
                  uint8 [num_blocks, block_size, 656]  fp8 records (layout: sandbox/problem/mla/record.py, docs/mla.md)
    block_tables  [num_seqs, max_blocks_per_seq] int32
    context_lens  [num_seqs] int32, 1 <= L <= max_blocks_per_seq * block_size
    query_start   None (one query token per sequence) or int32 [num_seqs + 1], as for decode
    indices       None (dense) or int32 [total_q, topk]: cache slots block * block_size + offset, -1 = invalid
    scale         float, default 1 / sqrt(576)

One latent row per token serves every head: keys are the whole 576-wide row, values its first 512
dims. Query row j of sequence s sits at position p = L_s - q_s + j. Dense: it attends to tokens
t <= p through the block table. Sparse: it attends to exactly its valid indices (the rule for a
valid index is in sandbox/problem/mla/validate.py). A row with no valid index outputs 0 (lse -inf).
Output [total_q, num_heads, 512] in the query's dtype; lse [total_q, num_heads] float32 (natural log).
Every slot no query row reads is NaN (an fp8 record: all 0xFF bytes) in the problems built here.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import dtypes
from . import record as rec
from ..decode import EXTREME_QUERY_GAIN, _query_lengths, _uniform
from .paging import allocator_tables, draw_indices
from ..tables import private_tables
from ..random_args import rebuild_call
from .validate import row_positions, token_slots, validate_mla_inputs
from ...errors import RefusedRequest



@dataclasses.dataclass
class MLAProblem:
    """One MLA decode step (several query tokens allowed) over a paged latent cache; see the module docstring."""

    query: np.ndarray
    latent_cache: np.ndarray
    block_tables: np.ndarray
    context_lens: np.ndarray
    scale: float | None = None
    query_start: np.ndarray | None = None
    indices: np.ndarray | None = None
    seed: int | None = None
    recipe: dict | None = dataclasses.field(default=None, repr=False, compare=False)

    def validate(self) -> "MLAProblem":
        validate_mla_inputs(self.query, self.latent_cache, self.block_tables, self.context_lens, self.scale,
                            self.query_start, self.indices)
        return self

    num_seqs = property(lambda self: self.context_lens.shape[0])
    num_heads = property(lambda self: self.query.shape[1])
    num_blocks = property(lambda self: self.latent_cache.shape[0])
    block_size = property(lambda self: self.latent_cache.shape[1])
    max_blocks_per_seq = property(lambda self: self.block_tables.shape[1])
    dtype = property(lambda self: self.query.dtype, doc="The query's (and the output's) dtype.")
    fp8 = property(lambda self: self.latent_cache.dtype == np.uint8, doc="The cache holds fp8 records.")
    sparse = property(lambda self: self.indices is not None)
    topk = property(lambda self: 0 if self.indices is None else self.indices.shape[1])

    @property
    def kv_format(self) -> str:
        """'fp8_record', or the cache's dtype name (the query's)."""
        return rec.FORMAT if self.fp8 else self.latent_cache.dtype.name

    @property
    def query_lens(self) -> np.ndarray:
        """int64 [num_seqs]: query rows per sequence (all ones without query_start)."""
        if self.query_start is None:
            return np.ones(self.num_seqs, dtype=np.int64)
        return np.diff(self.query_start.astype(np.int64))

    @property
    def max_query_len(self) -> int:
        return int(self.query_lens.max())

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(rec.LATENT_DIMS) if self.scale is None else float(self.scale)

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence int64 [total_q], position int64 [total_q]) of every query row."""
        return row_positions(self.context_lens, self.query_lens)

    def tokens_per_row(self) -> np.ndarray:
        """int64 [total_q]: latent rows each query row attends to (p + 1 dense; its valid indices sparse)."""
        if self.sparse:
            return (self.indices >= 0).sum(axis=1).astype(np.int64)
        return self.rows()[1] + 1

    def read_slots(self) -> np.ndarray:
        """Sorted distinct int64 slots some query row reads."""
        if self.sparse:
            return np.unique(self.indices[self.indices >= 0].astype(np.int64))
        return np.unique(np.concatenate([token_slots(self.block_tables[s], int(self.context_lens[s]), self.block_size)
                                         for s in range(self.num_seqs)]))

    def arrays(self) -> tuple:
        """(query, latent_cache, block_tables, context_lens, scale): sandbox.run_mla's positional arguments."""
        return self.query, self.latent_cache, self.block_tables, self.context_lens, self.scale

    def kwargs(self) -> dict:
        return dict(query_start=self.query_start, indices=self.indices)

    def bytes_moved(self) -> int:
        """Bytes a step really needs: every latent row read once (distinct slots), query, output (and lse),
        the table entries and indices read."""
        row_bytes = self.latent_cache.shape[2] * self.latent_cache.dtype.itemsize
        out = self.query.shape[0] * self.num_heads * (rec.VALUE_DIMS * self.dtype.itemsize + 4)
        if self.sparse:
            meta = self.indices.nbytes
        else:
            meta = int(((self.context_lens.astype(np.int64) + self.block_size - 1) // self.block_size).sum()) * 4
        starts = 0 if self.query_start is None else self.query_start.nbytes
        return len(self.read_slots()) * row_bytes + self.query.nbytes + out + meta + self.context_lens.nbytes + starts

    def ideal_bytes(self) -> int:
        """The least a step must move to and from DRAM (the traffic profiler's ideal): bytes_moved(), whose
        latent rows are distinct slots already."""
        return self.bytes_moved()

    def flops(self) -> int:
        """2 x (Q.K over 576 dims + P.V over 512) per (query row, head, token attended); causal rows counted exactly."""
        return 2 * self.num_heads * (rec.LATENT_DIMS + rec.VALUE_DIMS) * int(self.tokens_per_row().sum())

    def multiply_adds(self) -> int:
        """flops() / 2: what the Numba simulator's time grows with."""
        return self.flops() // 2

    def describe(self) -> str:
        lens = self.context_lens.tolist()
        shown = lens if len(lens) <= 8 else lens[:8] + ["..."]
        q = "" if self.query_start is None else f", query_lens={self.query_lens.tolist()[:8]}"
        sparse = "" if not self.sparse else f", topk={self.topk}"
        return (f"MLAProblem(seed={self.seed}, seqs={self.num_seqs}, heads={self.num_heads}, block_size="
                f"{self.block_size}, blocks={self.num_blocks}, table={self.max_blocks_per_seq}, dtype={self.dtype.name}, "
                f"kv={self.kv_format}, context_lens={shown}{q}{sparse})")

    __str__ = describe

    def __repr__(self) -> str:
        """The call that rebuilds this exact problem (hypothesis prints it for a falsifying example)."""
        return self.describe() if self.recipe is None else rebuild_call("MLAProblem", self.recipe)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))

    @classmethod
    def random(cls, seed: int, num_seqs: int = 3, num_heads: int = 4, block_size: int = 64, context_lens=None,
               max_context_len: int = 200, dtype="bfloat16", kv_format=None, query_lens=None, topk=None,
               valid_counts=None, share_prefix: bool = True, full_capacity: bool = True,
               extreme_logits: bool = False, spare_blocks: int | None = None, nan_fill: bool = True) -> "MLAProblem":
        """A seeded random problem with the traps of DecodeProblem.random: shuffled physical blocks (never
        increasing), later sequences sharing an earlier one's full prefix blocks, one sequence at full table
        capacity, NaN in every slot no query row reads.

        kv_format: None (the query's dtype) or "fp8_record" (codes over every finite e4m3 code, power-of-two
        scales). query_lens as DecodeProblem.random (None, an int, a list). topk: None (dense), or the
        indices' width: each row draws a kind from paging.INDEX_KINDS (or takes valid_counts[row]: how many valid
        indices, clipped to min(topk, p + 1)), its tokens favouring 0, p and block edges (k*bs - 1, k*bs), in
        a random order with -1 at random columns.
        """
        rng = np.random.default_rng(seed)
        if context_lens is None:
            if max_context_len < 1:
                raise RefusedRequest(f"max_context_len must be >= 1, got {max_context_len}")
            lens = rng.integers(1, max_context_len + 1, size=num_seqs)
            if full_capacity:
                lens[rng.integers(num_seqs)] = -(-max_context_len // block_size) * block_size
        else:
            lens = np.asarray(context_lens, dtype=np.int64)
            if lens.shape != (num_seqs,) or (lens < 1).any():
                raise RefusedRequest(f"context_lens must give num_seqs = {num_seqs} lengths >= 1, got {lens.tolist()}")
        blocks_per_seq = -(-lens // block_size)
        tables, physical, num_blocks = private_tables(rng, lens, blocks_per_seq, block_size, share_prefix, spare_blocks)
        recipe = dict(seed=seed, num_seqs=num_seqs, num_heads=num_heads, block_size=block_size,
                      context_lens=None if context_lens is None else [int(n) for n in context_lens],
                      max_context_len=max_context_len)
        cache = _draw_cache(rng, (num_blocks, block_size), dtype, kv_format, physical)
        return cls._finish(rng, "random", recipe, tables, lens, cache, dtype=dtype, kv_format=kv_format,
                           query_lens=query_lens, topk=topk, valid_counts=valid_counts,
                           extreme_logits=extreme_logits, nan_fill=nan_fill,
                           extra=dict(share_prefix=share_prefix, full_capacity=full_capacity, spare_blocks=spare_blocks))

    @classmethod
    def shared(cls, seed: int, num_groups: int = 2, group_size: int = 2, prefix_len: int = 40, suffix_lens=None,
               max_suffix_len: int = 20, how: str = "fork", num_heads: int = 4, block_size: int = 64,
               dtype="bfloat16", kv_format=None, query_lens=None, topk=None, valid_counts=None,
               extreme_logits: bool = False, nan_fill: bool = True) -> "MLAProblem":
        """Groups sharing a prompt, with the block tables sandbox.paging.BlockManager produces (as
        DecodeProblem.shared): how="fork" (copy-on-write splits a shared partial block on append) or "prefix"
        (prefix caching shares the prompt's full blocks). The rest as random()."""
        rng = np.random.default_rng(seed)
        if how not in ("fork", "prefix"):
            raise RefusedRequest(f"how must be 'fork' or 'prefix', got {how!r}")
        if prefix_len < 1 or num_groups < 1 or group_size < 1:
            raise RefusedRequest(f"prefix_len, num_groups and group_size must be >= 1, got {prefix_len}, {num_groups}, "
                                 f"{group_size}")
        num_seqs = num_groups * group_size
        suffix = (rng.integers(0, max_suffix_len + 1, size=num_seqs) if suffix_lens is None
                  else np.asarray(suffix_lens, dtype=np.int64))
        if suffix.shape != (num_seqs,) or (suffix < 0).any():
            raise RefusedRequest(f"suffix_lens must give num_groups * group_size = {num_seqs} lengths >= 0, "
                                 f"got {suffix.tolist()}")
        lens = prefix_len + suffix
        tables, num_blocks, copies = allocator_tables(rng, lens, block_size, prefix_len, group_size, how)
        cache = _draw_cache(rng, (num_blocks, block_size), dtype, kv_format, np.arange(num_blocks))
        shared_tokens = prefix_len % block_size  # what a copy-on-write destination inherits from its source
        for src, dst in copies:
            cache[dst, :shared_tokens] = cache[src, :shared_tokens]
        recipe = dict(seed=seed, num_groups=num_groups, group_size=group_size, prefix_len=prefix_len,
                      suffix_lens=None if suffix_lens is None else [int(n) for n in suffix_lens],
                      max_suffix_len=max_suffix_len, how=how, num_heads=num_heads, block_size=block_size)
        return cls._finish(rng, "shared", recipe, tables, lens, cache, dtype=dtype, kv_format=kv_format,
                           query_lens=query_lens, topk=topk, valid_counts=valid_counts,
                           extreme_logits=extreme_logits, nan_fill=nan_fill, extra={})

    @classmethod
    def _finish(cls, rng, constructor, recipe, tables, lens, cache, *, dtype, kv_format, query_lens, topk,
                valid_counts, extreme_logits, nan_fill, extra) -> "MLAProblem":
        """What random() and shared() share once tables and the cache exist: query, indices, NaN, the recipe."""
        dt = dtypes.dtype(dtype)
        block_size = cache.shape[1]
        q_lens = _query_lengths(query_lens, lens)
        query_start = None if query_lens is None else np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        lens = lens.astype(np.int32)
        query = rng.uniform(-1, 1, size=(int(q_lens.sum()), recipe["num_heads"], rec.LATENT_DIMS))
        if extreme_logits:
            query *= EXTREME_QUERY_GAIN
        indices = None
        if topk is not None:
            indices = draw_indices(rng, tables, lens, q_lens, block_size, int(topk), valid_counts)
        problem = cls(query=query.astype(dt), latent_cache=cache, block_tables=tables, context_lens=lens,
                      query_start=query_start, indices=indices, seed=recipe["seed"])
        if nan_fill:
            unread = np.ones(cache.shape[0] * block_size, bool)
            unread[problem.read_slots()] = False
            flat = cache.reshape(-1, cache.shape[2])
            if problem.fp8:
                flat[unread] = 0xFF
            else:
                flat[unread] = np.nan
        options = dict(dtype=dt.name, kv_format=kv_format, query_lens=query_lens, topk=topk, valid_counts=valid_counts,
                       extreme_logits=extreme_logits, nan_fill=nan_fill, **extra)
        defaults = dict(dtype="bfloat16", kv_format=None, query_lens=None, topk=None, valid_counts=None,
                        extreme_logits=False, nan_fill=True, share_prefix=True, full_capacity=True, spare_blocks=None)
        recipe = dict(recipe, **{k: v for k, v in options.items() if v != defaults[k]}, _constructor=constructor)
        problem.recipe = recipe
        return problem.validate()


def _draw_cache(rng, lead: tuple, dtype, kv_format, physical) -> np.ndarray:
    """The latent cache [num_blocks, block_size, 576] (or 656-byte records) with random rows in `physical` blocks."""
    if kv_format not in (None, rec.FORMAT):
        raise RefusedRequest(f"kv_format must be None (the query's dtype) or {rec.FORMAT!r}, got {kv_format!r}")
    if kv_format == rec.FORMAT:
        cache = np.zeros(lead + (rec.RECORD_BYTES,), np.uint8)
        cache[physical] = rec.spanning_records(rng, (len(physical), lead[1]))
        return cache
    cache = np.zeros(lead + (rec.LATENT_DIMS,), np.float32)
    cache[physical] = _uniform(rng, (len(physical), lead[1], rec.LATENT_DIMS))
    return cache.astype(dtypes.dtype(dtype))
