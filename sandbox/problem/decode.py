"""DecodeProblem: the canonical paged attention inputs, and a seeded generator of nasty ones."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import dtypes
from .option_schema import Context
from .options import FIELDS, OPTIONS, PLAIN, PROBLEM_KEYWORDS, AttentionOptions
from .tables import grouped_allocation, private_tables, shuffled_blocks  # noqa: F401 (shuffled_blocks: re-exported)
from .random_args import check_random_arguments, rebuild_call
from .validate import check_block_size, first_read_tokens, validate_decode_inputs
from ..errors import RefusedRequest

# Extreme logits: q is scaled so that scale * q.k has a standard deviation of about 40,
# so logits reach +-120: exp() without subtracting the max overflows in float32 (88.7).
EXTREME_QUERY_GAIN = 120.0


def _uniform(rng: np.random.Generator, shape) -> np.ndarray:
    """Uniform in [-1, 1), drawn directly in float32 (large caches would double in float64)."""
    out = rng.random(shape, dtype=np.float32)
    out *= 2
    out -= 1
    return out


@dataclasses.dataclass
class DecodeProblem:
    """One attention step over a paged KV cache (host NumPy arrays, layout as in docs/design.md).

    query         [num_seqs, num_heads, head_dim] (decode), or [total_q, num_heads, head_dim] with
                  query_start; float32 | float16 | bfloat16
    key_cache     [num_blocks, block_size, num_kv_heads, head_dim] query's dtype, or float8_e4m3fn |
    value_cache   [num_blocks, block_size, num_kv_heads, head_dim] float8_e5m2 (both the same)
    block_tables  [num_seqs, max_blocks_per_seq] int32 (-1 past a sequence's last block, and for
                  blocks wholly before a sliding window)
    context_lens  [num_seqs] int32
    options       AttentionOptions: the option table's fields (option_table.py)
    query_start   None (decode: one query token per sequence) or int32 [num_seqs + 1]
    """

    query: np.ndarray
    key_cache: np.ndarray
    value_cache: np.ndarray
    block_tables: np.ndarray
    context_lens: np.ndarray
    scale: float | None = None
    options: AttentionOptions = PLAIN
    query_start: np.ndarray | None = None
    seed: int | None = None
    recipe: dict | None = dataclasses.field(default=None, repr=False, compare=False)  # random()'s arguments

    def validate(self) -> "DecodeProblem":
        validate_decode_inputs(self.query, self.key_cache, self.value_cache, self.block_tables,
                               self.context_lens, self.scale, self.options, self.query_start)
        return self

    @property
    def num_seqs(self) -> int:
        return self.context_lens.shape[0]

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
        """The query's (and the output's) dtype."""
        return self.query.dtype

    @property
    def kv_dtype(self) -> np.dtype:
        """The cache's dtype: the query's, an fp8 format, or uint8 (NVFP4's packed codes)."""
        return self.key_cache.dtype

    @property
    def kv_format(self) -> str:
        """The cache's format (what Limits.kv_dtypes names): the dtype's name, or "nvfp4"."""
        return dtypes.kv_format(self.key_cache.dtype)

    @property
    def query_lens(self) -> np.ndarray:
        """int64 [num_seqs]: query tokens per sequence (all ones for decode)."""
        if self.query_start is None:
            return np.ones(self.num_seqs, dtype=np.int64)
        return np.diff(self.query_start.astype(np.int64))

    @property
    def max_query_len(self) -> int:
        return 1 if self.query_start is None else int(self.query_lens.max())

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else float(self.scale)

    def first_read_tokens(self) -> np.ndarray:
        """int64 [num_seqs]: the first token any query token of each sequence reads (the window's start)."""
        return first_read_tokens(self.context_lens, self.query_lens, self.options.window_left)

    def arrays(self) -> tuple:
        """(query, key_cache, value_cache, block_tables, context_lens, scale), sandbox.run's positional arguments."""
        return self.query, self.key_cache, self.value_cache, self.block_tables, self.context_lens, self.scale

    def kwargs(self) -> dict:
        """sandbox.run's / reference.paged_attention's keyword arguments: the options and query_start."""
        return dict(self.options.kwargs(), query_start=self.query_start)

    def bytes_moved(self, shared_once: bool = False) -> int:
        """Bytes a step really needs: K/V of the tokens read (each once, as stored: NVFP4's packed codes), the
        arrays beside the cache for those slots (per-token scales, NVFP4 block scales), query, output and the
        table entries read.

        shared_once: count a physical cache slot once however many sequences read it (prefix blocks shared
        through the tables): the least any kernel must bring from DRAM, the traffic profiler's ideal. False:
        once per sequence reading it, what a kernel that knows nothing of sharing is credited with."""
        first = self.first_read_tokens()
        tokens_read = self.context_lens.astype(np.int64) - first
        row_bytes = self.key_cache.shape[3] * self.kv_dtype.itemsize  # one (token, KV head) row of K or of V
        slots = self.num_blocks * self.block_size * self.num_kv_heads
        beside = sum(getattr(self.options, f.name).nbytes // slots for f in FIELDS
                     if f.per_slot and getattr(self.options, f.name) is not None)
        rows = self.distinct_slots_read() if shared_once else int(tokens_read.sum())
        kv = rows * self.num_kv_heads * (2 * row_bytes + beside)
        q_and_out = 2 * self.query.size * self.query.dtype.itemsize
        first_block = first // self.block_size
        end_block = (self.context_lens.astype(np.int64) + self.block_size - 1) // self.block_size
        table = int((end_block - first_block).sum()) * 4
        starts = 0 if self.query_start is None else self.query_start.nbytes
        return kv + q_and_out + table + self.context_lens.nbytes + starts

    def ideal_bytes(self) -> int:
        """The least a step must move to and from DRAM (the traffic profiler's ideal): bytes_moved() with each
        physical cache slot counted once."""
        return self.bytes_moved(shared_once=True)

    def distinct_slots_read(self) -> int:
        """How many physical cache slots (block, offset) the sequences read, each counted once."""
        return int(_read_slots(self.block_tables, self.context_lens, self.first_read_tokens(), self.num_blocks,
                               self.block_size).sum())

    def multiply_adds(self) -> int:
        """Multiply-adds of Q.K and P.V: every query head's tokens times the tokens they read (a bound:
        a causal query row reads fewer). The simulator's cost grows with it."""
        tokens_read = self.context_lens.astype(np.int64) - self.first_read_tokens()
        return 2 * self.num_heads * self.head_dim * int((self.query_lens * tokens_read).sum())

    def describe(self) -> str:
        lens = self.context_lens.tolist()
        shown = lens if len(lens) <= 8 else lens[:8] + ["..."]
        kv = "" if self.kv_dtype == self.dtype else f", kv_dtype={self.kv_format}"
        opts = "" if self.options is PLAIN or self.options.describe() == "plain" else f", {self.options.describe()}"
        q = "" if self.query_start is None else f", query_lens={self.query_lens.tolist()[:8]}"
        return (f"DecodeProblem(seed={self.seed}, seqs={self.num_seqs}, heads={self.num_heads}/{self.num_kv_heads}, "
                f"head_dim={self.head_dim}, block_size={self.block_size}, blocks={self.num_blocks}, "
                f"table={self.max_blocks_per_seq}, dtype={self.dtype.name}{kv}, context_lens={shown}{q}{opts})")

    __str__ = describe

    def __repr__(self) -> str:
        """The call that rebuilds this exact problem (hypothesis prints it for a falsifying example)."""
        return self.describe() if self.recipe is None else rebuild_call("DecodeProblem", self.recipe)

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis/IPython pretty printers: same compact call
        printer.text(repr(self))

    @classmethod
    def random(cls, seed: int, num_seqs: int = 4, num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64,
               block_size: int = 16, context_lens=None, max_context_len: int = 256, dtype="float32",
               share_prefix: bool = True, full_capacity: bool = True, extreme_logits: bool = False,
               spare_blocks: int | None = None, nan_fill: bool = True, kv_dtype=None, query_lens=None,
               **options) -> "DecodeProblem":
        """A seeded random problem with the traps real serving produces (block_size: any integer in 1..4096).

        Physical blocks are shuffled (never in increasing order); with share_prefix, later
        sequences may point their first full blocks at an earlier sequence's blocks; with
        full_capacity (and drawn lengths), one sequence fills its whole table; every slot no
        query token reads (the tail of each last block, spare blocks, blocks before a window) is NaN.

        kv_dtype: None (the query's), an fp8 format, whose values are drawn over the format's whole
        finite range, subnormals included, or "nvfp4" (random e2m1 codes; head_dim a multiple of 16). query_lens: None (decode), an int q (each sequence
        gets min(q, L) query tokens) or a list of per-sequence lengths. options: the option table's
        keywords (options.PROBLEM_KEYWORDS; docs/options.md): k_scale/v_scale None means 1.0, or
        1/max_finite for fp8 (dequantized values then lie in [-1, 1]); window_left, with
        free_outside_window (blocks wholly before a window are freed: -1 in the table);
        logits_soft_cap; alibi_slopes None, "paper" (the ALiBi paper's geometric slopes), "random",
        or a list of floats.
        """
        _check_option_keywords("random", options)
        block_size = check_block_size(block_size)
        check_random_arguments(seed, num_seqs, num_heads, num_kv_heads, head_dim, block_size, context_lens,
                               max_context_len, spare_blocks)  # before anything is drawn or allocated
        rng = np.random.default_rng(seed)
        dtype = dtypes.dtype(dtype)
        kv_dt = dtype if kv_dtype is None else dtypes.dtype(kv_dtype)
        _check_nvfp4_head_dim(kv_dt, head_dim)
        if context_lens is None:
            lens = rng.integers(1, max_context_len + 1, size=num_seqs)
            if full_capacity:
                capacity = -(-max_context_len // block_size) * block_size
                lens[rng.integers(num_seqs)] = capacity
        else:
            lens = np.asarray(context_lens, dtype=np.int64)
            if lens.shape != (num_seqs,):
                raise RefusedRequest(f"context_lens must have num_seqs = {num_seqs} entries, got shape {lens.shape}")
            if (lens < 1).any():
                raise RefusedRequest(f"context_lens must all be >= 1, got {lens.tolist()}")
        q_lens = _query_lengths(query_lens, lens)
        blocks_per_seq = -(-lens // block_size)
        # Shuffled physical blocks; sharing maps a later sequence's full prefix blocks onto an earlier one's.
        tables, physical, num_blocks = private_tables(rng, lens, blocks_per_seq, block_size, share_prefix, spare_blocks)
        needed = len(physical)

        cache_shape = (num_blocks, block_size, num_kv_heads, _stored_dim(kv_dt, head_dim))
        block_shape = (needed,) + cache_shape[1:]
        key_cache = np.zeros(cache_shape, dtype=np.float32)
        value_cache = np.zeros(cache_shape, dtype=np.float32)
        if dtypes.kv_format(kv_dt) == dtypes.NVFP4:  # two e2m1 codes per byte, every code drawn
            key_cache, value_cache = key_cache.astype(np.uint8), value_cache.astype(np.uint8)
            key_cache[physical] = rng.integers(0, 256, size=block_shape, dtype=np.uint8)
            value_cache[physical] = rng.integers(0, 256, size=block_shape, dtype=np.uint8)
        elif dtypes.is_fp8(kv_dt):
            key_cache, value_cache = key_cache.astype(kv_dt), value_cache.astype(kv_dt)
            key_cache[physical] = _fp8_spanning(rng, block_shape, kv_dt)
            value_cache[physical] = _fp8_spanning(rng, block_shape, kv_dt)
        else:
            key_cache[physical] = _uniform(rng, block_shape)
            value_cache[physical] = _uniform(rng, block_shape)

        recipe = dict(seed=seed, num_seqs=num_seqs, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                      block_size=block_size, context_lens=None if context_lens is None else [int(n) for n in context_lens],
                      max_context_len=max_context_len, dtype=dtype.name, share_prefix=share_prefix,
                      full_capacity=full_capacity, extreme_logits=extreme_logits, spare_blocks=spare_blocks,
                      nan_fill=nan_fill)
        return cls._finish(rng, "random", recipe, tables, lens, q_lens, key_cache, value_cache, dtype, kv_dtype,
                           options, query_lens=query_lens, extreme_logits=extreme_logits, nan_fill=nan_fill)

    @classmethod
    def shared(cls, seed: int, num_groups: int = 2, group_size: int = 3, prefix_len: int = 40, suffix_lens=None,
               max_suffix_len: int = 20, how: str = "fork", num_heads: int = 8, num_kv_heads: int = 2,
               head_dim: int = 64, block_size: int = 16, dtype="float32", extreme_logits: bool = False,
               nan_fill: bool = True, kv_dtype=None, query_lens=None, **options) -> "DecodeProblem":
        """Groups of sequences sharing a prompt, with the block tables sandbox.paging.BlockManager produces.

        Each of num_groups groups has a prompt of prefix_len tokens and group_size sequences that
        go on with suffix_lens[s] tokens of their own (drawn in 0..max_suffix_len when None).
        how="fork": the first sequence allocates the prompt and the others fork it (parallel
        sampling, beams): a partly full last prompt block stays shared until an append splits it by
        copy-on-write (the copy is done here, as a serving engine would). how="prefix": every
        sequence allocates prompt + its own tokens from token ids, so only the prompt's full blocks
        are shared (prefix caching). Physical blocks are then relabelled in a seeded order. The rest
        (dtypes, options, NaN in unread slots, query_lens) is as in random().
        """
        _check_option_keywords("shared", options)
        block_size = check_block_size(block_size)
        rng = np.random.default_rng(seed)
        dtype = dtypes.dtype(dtype)
        kv_dt = dtype if kv_dtype is None else dtypes.dtype(kv_dtype)
        _check_nvfp4_head_dim(kv_dt, head_dim)
        if how not in ("fork", "prefix"):
            raise RefusedRequest(f"how must be 'fork' or 'prefix', got {how!r}")
        if num_heads % num_kv_heads:
            raise RefusedRequest(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
        if prefix_len < 1 or num_groups < 1 or group_size < 1:
            raise RefusedRequest(f"prefix_len, num_groups and group_size must be >= 1, got {prefix_len}, {num_groups}, {group_size}")
        num_seqs = num_groups * group_size
        suffix = (rng.integers(0, max_suffix_len + 1, size=num_seqs) if suffix_lens is None
                  else np.asarray(suffix_lens, dtype=np.int64))
        if suffix.shape != (num_seqs,) or (suffix < 0).any():
            raise RefusedRequest(f"suffix_lens must give num_groups * group_size = {num_seqs} lengths >= 0, got {suffix.tolist()}")
        lens = prefix_len + suffix
        blocks_per_seq = -(-lens // block_size)
        manager, copies = grouped_allocation(rng, lens, block_size, prefix_len, group_size, how)
        num_blocks = manager.num_blocks
        relabel = shuffled_blocks(rng, num_blocks, num_blocks)  # physical block b becomes relabel[b]
        tables = np.full((num_seqs, int(blocks_per_seq.max())), -1, dtype=np.int32)
        for s in range(num_seqs):
            table = manager.block_table(s)
            tables[s, : len(table)] = relabel[table]
        cache_shape = (num_blocks, block_size, num_kv_heads, _stored_dim(kv_dt, head_dim))
        if dtypes.kv_format(kv_dt) == dtypes.NVFP4:
            draw = lambda: rng.integers(0, 256, size=cache_shape, dtype=np.uint8)  # noqa: E731
        elif dtypes.is_fp8(kv_dt):
            draw = lambda: _fp8_spanning(rng, cache_shape, kv_dt)  # noqa: E731
        else:
            draw = lambda: _uniform(rng, cache_shape)  # noqa: E731
        key_cache, value_cache = draw(), draw()
        shared_tokens = prefix_len % block_size  # what a copy-on-write destination inherits from its source
        copies = [(int(relabel[src]), int(relabel[dst]), shared_tokens) for src, dst in copies]
        for src, dst, tokens in copies:
            for cache in (key_cache, value_cache):
                cache[dst, :tokens] = cache[src, :tokens]
        recipe = dict(seed=seed, num_groups=num_groups, group_size=group_size, prefix_len=prefix_len,
                      suffix_lens=None if suffix_lens is None else [int(n) for n in suffix_lens],
                      max_suffix_len=max_suffix_len, how=how, num_heads=num_heads, num_kv_heads=num_kv_heads,
                      head_dim=head_dim, block_size=block_size, dtype=dtype.name, extreme_logits=extreme_logits,
                      nan_fill=nan_fill)
        return cls._finish(rng, "shared", recipe, tables, lens, _query_lengths(query_lens, lens), key_cache,
                           value_cache, dtype, kv_dtype, options, query_lens=query_lens, extreme_logits=extreme_logits,
                           nan_fill=nan_fill, copies=copies)

    @classmethod
    def _finish(cls, rng, constructor: str, recipe: dict, tables, lens, q_lens, key_cache, value_cache, dtype,
                kv_dtype, option_keywords: dict, *, query_lens, extreme_logits, nan_fill, copies=()) -> "DecodeProblem":
        """What random() and shared() share once tables and cache values exist: the options (each row of the
        table builds its fields from the keywords; arrays beside the cache follow its copy-on-write copies
        (src, dst, tokens)), freeing the blocks before a window, NaN in every unread slot (NVFP4's codes
        cannot hold NaN: its block scales do), the query, and the recipe that rebuilds it."""
        num_blocks, block_size, num_kv_heads, stored_dim = key_cache.shape
        num_heads, head_dim = recipe["num_heads"], recipe["head_dim"]
        kv_format = dtypes.kv_format(key_cache.dtype)
        quantized = dtypes.is_quantized(kv_format)
        keywords = dict(PROBLEM_KEYWORDS, **option_keywords)
        context = Context(num_heads=num_heads, head_dim=head_dim, kv_format=kv_format,
                          cache_slots=(num_blocks, block_size, num_kv_heads), block_size=block_size)
        values = {}
        for option in OPTIONS:
            values.update(option.build(keywords, context, rng))
        beside = [values[f.name] for f in FIELDS if f.per_slot and values.get(f.name) is not None]
        for src, dst, tokens in copies:
            for array in beside:
                array[dst, :tokens] = array[src, :tokens]
        first_read = first_read_tokens(lens, q_lens, values["window_left"])
        if keywords["free_outside_window"]:
            for s in range(len(lens)):  # the allocator freed every block wholly before the window
                tables[s, : int(first_read[s] // block_size)] = -1
        if nan_fill or quantized:
            fill = np.nan if nan_fill else 0.0
            unread = ~_read_slots(tables, lens, first_read, num_blocks, block_size)
            if kv_format != dtypes.NVFP4 or not nan_fill:
                key_cache.reshape(-1, num_kv_heads, stored_dim)[unread] = fill
                value_cache.reshape(-1, num_kv_heads, stored_dim)[unread] = fill
            for array in beside:
                array.reshape(num_blocks * block_size, -1)[unread] = fill
        options = AttentionOptions(**values).validate(context)

        query = rng.uniform(-1, 1, size=(int(q_lens.sum()), num_heads, head_dim))
        if extreme_logits:
            query *= EXTREME_QUERY_GAIN
        query_start = None
        if query_lens is not None:
            query_start = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        extras = dict(kv_dtype=None if kv_dtype is None else kv_format, query_lens=query_lens, **keywords)
        defaults = dict(PROBLEM_KEYWORDS, kv_dtype=None, query_lens=None)
        recipe = dict(recipe, **{k: v for k, v in extras.items() if v != defaults[k]})  # short repr for plain problems
        if not quantized:
            key_cache, value_cache = key_cache.astype(dtype), value_cache.astype(dtype)
        return cls(query=query.astype(dtype), key_cache=key_cache, value_cache=value_cache,
                   block_tables=tables, context_lens=lens.astype(np.int32), scale=None, options=options,
                   query_start=query_start, seed=recipe["seed"], recipe=dict(recipe, _constructor=constructor)).validate()


def _stored_dim(cache_dtype: np.dtype, head_dim: int) -> int:
    """The cache's last axis: head_dim, or head_dim // 2 bytes of packed e2m1 codes for NVFP4."""
    return head_dim // 2 if dtypes.kv_format(cache_dtype) == dtypes.NVFP4 else head_dim


def _check_nvfp4_head_dim(cache_dtype: np.dtype, head_dim: int) -> None:
    if dtypes.kv_format(cache_dtype) == dtypes.NVFP4 and head_dim % 16:
        raise RefusedRequest(f"an NVFP4 cache needs head_dim to be a multiple of 16 (one e4m3 scale per 16 values), "
                             f"got {head_dim}")


def _check_option_keywords(constructor: str, options: dict) -> None:
    unknown = sorted(set(options) - set(PROBLEM_KEYWORDS))
    if unknown:
        raise TypeError(f"DecodeProblem.{constructor}() got an unexpected keyword argument {unknown[0]!r}; "
                        f"option keywords: {', '.join(PROBLEM_KEYWORDS)}")


def _query_lengths(query_lens, context_lens: np.ndarray) -> np.ndarray:
    """int64 [num_seqs] from random()'s query_lens argument (None: decode; int: min(q, L); list: as given)."""
    if query_lens is None:
        return np.ones(len(context_lens), dtype=np.int64)
    if isinstance(query_lens, (int, np.integer)):
        if query_lens < 1:
            raise RefusedRequest(f"query_lens must be >= 1, got {query_lens}")
        return np.minimum(context_lens, int(query_lens)).astype(np.int64)
    q = np.asarray(query_lens, dtype=np.int64)
    if q.shape != context_lens.shape or (q < 1).any() or (q > context_lens).any():
        raise RefusedRequest(f"query_lens must give 1 <= q_s <= context_lens[s] for each of the {len(context_lens)} "
                             f"sequences, got {q.tolist()} for context_lens {context_lens.tolist()}")
    return q


def _fp8_spanning(rng: np.random.Generator, shape, fp8_dtype: np.dtype) -> np.ndarray:
    """fp8 values drawn uniformly over the format's finite codes: every exponent, subnormals and zeros."""
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    values = codes.view(fp8_dtype)
    finite = np.isfinite(values.astype(np.float32))
    codes[~finite] &= 0x80  # NaN/inf codes become (signed) zero
    return codes.view(fp8_dtype)


def _read_slots(tables: np.ndarray, lens: np.ndarray, first_read: np.ndarray, num_blocks: int,
                block_size: int) -> np.ndarray:
    """bool [num_blocks * block_size]: the slots some sequence's query tokens read."""
    read = np.zeros(num_blocks * block_size, dtype=bool)
    for s in range(len(lens)):
        t = np.arange(int(first_read[s]), int(lens[s]))
        read[tables[s, t // block_size].astype(np.int64) * block_size + t % block_size] = True
    return read
