"""Sweep shapes for MLA (multi-head latent attention): a batch of sequences, their latent rows, paged per block size.

A shape is written mla:SEQSxTOKENSxHEADS[xDTYPE[:fp8]] followed by optional words:

    mla:128x4096x128xbf16              FlashMLA's headline decode: batch 128, 128 heads, 4096 tokens, bf16 cache
    mla:64x8192x16xbf16:fp8            the 656-byte fp8 record cache
    mla:64x8192x128xbf16 topk=2048     DeepSeek V3.2's sparse decode: each query row reads 2048 of its tokens
    mla:32x1024x16xbf16 q=2            2 query rows per sequence (its last 2 positions, causal)

The block size comes from the sweep's --block-sizes. As for decode shapes, every block size pages the *same*
tokens (the same latent rows, query and, sparse, the same logical token sets, whose slots follow the paging),
so the truth is computed once per shape from the contiguous rows. Latent values are uniform in [-1, 1)
(an fp8 record quantizes them as FlashMLA's cache write does); a sparse row draws min(topk, p + 1)
distinct tokens t <= p in a random order, -1 in the columns left over.
"""
from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

import numpy as np

from ..checking.compare import compare
from ..checking.mla_check import attend, compare_mla
from ..problem import dtypes
from ..problem.mla import record as rec
from ..problem.decode import shuffled_blocks
from ..problem.kinds import MLA, ShapeGrammar
from ..problem.mla import MLAProblem
from ..errors import RefusedRequest

PREFIX = "mla:"
_PATTERN = re.compile(r"^mla:(\d+)x(\d+)x(\d+)(?:x(\w+)(?::(\w+))?)?$")
SHAPE_FORMAT = "mla:SEQSxTOKENSxHEADS[xDTYPE[:fp8]] [topk=K] [q=Q]"
FP8_NAMES = ("fp8", "fp8_record", "e4m3")


def is_mla(text: str) -> bool:
    return text.strip().startswith(PREFIX)


@dataclasses.dataclass(frozen=True)
class MLAShape:
    num_seqs: int
    context_len: int
    num_heads: int
    dtype: str = "bfloat16"        # query, output and (without fp8) cache
    fp8: bool = False              # the cache holds 656-byte fp8 records
    topk: int = 0                  # > 0: sparse, each query row reads min(topk, p + 1) of its tokens
    query_len: int = 1

    kind: ClassVar[str] = MLA.name  # what the sweep matches against a variant's problem kind

    def __post_init__(self):
        for field in ("num_seqs", "context_len", "num_heads", "query_len"):
            if getattr(self, field) < 1:
                raise RefusedRequest(f"shape {field} must be >= 1, got {getattr(self, field)}")
        if self.topk < 0:
            raise RefusedRequest(f"shape topk must be >= 1 (sparse) or absent (dense), got {self.topk}")
        dtype = dtypes.canonical(self.dtype)
        if dtype not in ("bfloat16", "float16"):
            raise RefusedRequest(f"MLA shape dtype must be bf16 or fp16, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype)
        if self.query_len > self.context_len:
            raise RefusedRequest(f"shape q={self.query_len}: more query rows than the context's {self.context_len} tokens")

    @property
    def kv_format(self) -> str:
        return rec.FORMAT if self.fp8 else self.dtype

    @property
    def name(self) -> str:
        """What parse_mla_shape() reads back."""
        words = [f"{PREFIX}{self.num_seqs}x{self.context_len}x{self.num_heads}x{dtypes.short(self.dtype)}"
                 + (":fp8" if self.fp8 else "")]
        if self.topk:
            words.append(f"topk={self.topk}")
        if self.query_len > 1:
            words.append(f"q={self.query_len}")
        return " ".join(words)

    @property
    def title(self) -> str:
        cache = "fp8 records" if self.fp8 else f"{dtypes.short(self.dtype)} cache"
        mode = f"top-{self.topk} sparse" if self.topk else "dense"
        q = f", {self.query_len} query rows" if self.query_len > 1 else ""
        return f"MLA {self.num_seqs} seqs x {self.context_len} tokens, {self.num_heads} heads, {cache}, {mode}{q}"

    plain = False  # not a decode goal shape

    def expanded(self, query_lens=(), shared_prefix=None, group_size=None, options=None) -> list["MLAShape"]:
        """The command line's additions are decode's (options, query lengths, shared prompts): none applies."""
        return [self]

    def multiply_adds_bound(self) -> int:
        """Multiply-adds before the problem is built: 576 + 512 dims per query row, head and token read (topk
        tokens when sparse, the whole context otherwise: an upper bound)."""
        tokens = min(self.topk, self.context_len) if self.topk else self.context_len
        return self.num_seqs * self.query_len * self.num_heads * (576 + 512) * tokens

    def columns(self) -> dict:
        """The shape columns of a sweep.csv row (one latent "KV head" of 576 dims)."""
        return dict(shape=self.name, num_seqs=self.num_seqs, context_len=self.context_len, num_heads=self.num_heads,
                    num_kv_heads=1, head_dim=rec.LATENT_DIMS, dtype=self.dtype, kv_dtype=self.kv_format,
                    options=f"topk={self.topk}" if self.topk else "", query_len=self.query_len, prefix_len=0,
                    group_size=0)


def parse_mla_shape(text: str) -> MLAShape:
    """``mla:64x8192x128xbf16:fp8 topk=2048 q=2`` -> MLAShape (dtype defaults to bf16). Words may be separated by
    spaces or commas (a comma list of shapes hands an MLA shape the items after it that are no shape)."""
    words = text.replace(",", " ").split()
    match = _PATTERN.match(words[0]) if words else None
    if not match:
        raise RefusedRequest(f"shape {text!r} is not {SHAPE_FORMAT}, e.g. mla:128x4096x128xbf16 or "
                             "mla:64x8192x128xbf16:fp8 topk=2048")
    seqs, tokens, heads, dtype, cache = match.groups()
    if cache is not None and cache.lower() not in FP8_NAMES:
        raise RefusedRequest(f"shape {text!r}: the cache is the query's dtype or fp8 (the 656-byte record), got {cache!r}")
    extra = {}
    for word in words[1:]:
        key, _, value = word.partition("=")
        if key not in ("topk", "q") or not re.fullmatch(r"\d+", value):
            raise RefusedRequest(f"shape {text!r}: unknown word {word!r} (known: topk=K, q=Q, whole numbers)")
        extra["topk" if key == "topk" else "query_len"] = int(value)
    if extra.get("topk") == 0:
        raise RefusedRequest(f"shape {text!r}: topk must be >= 1")
    try:
        return MLAShape(int(seqs), int(tokens), int(heads), dtype or "bf16", fp8=cache is not None, **extra)
    except ValueError as exc:
        raise RefusedRequest(f"shape {text!r}: {exc}") from None


@dataclasses.dataclass
class MLATokens:
    """One shape's contiguous data, the truth every block size is paged from.

    query [num_seqs * query_len, num_heads, 576]; latent [num_seqs, context_len, 576] in the query's dtype
    or uint8 [num_seqs, context_len, 656] records; tokens None (dense) or int64 [rows, topk]: logical token
    indices (-1 invalid) each query row reads.
    """

    shape: MLAShape
    query: np.ndarray
    latent: np.ndarray
    tokens: np.ndarray | None
    seed: int

    @property
    def positions(self) -> np.ndarray:
        q = self.shape.query_len
        return np.tile(self.shape.context_len - q + np.arange(q), self.shape.num_seqs)


def make_mla_tokens(shape: MLAShape, seed: int) -> MLATokens:
    """Uniform [-1, 1) query and latent rows, one sequence at a time; sparse token sets per query row."""
    rng = np.random.default_rng(seed)
    width = rec.RECORD_BYTES if shape.fp8 else rec.LATENT_DIMS
    latent = np.empty((shape.num_seqs, shape.context_len, width), np.uint8 if shape.fp8 else shape.dtype)
    for s in range(shape.num_seqs):
        rows = rng.random((shape.context_len, rec.LATENT_DIMS), dtype=np.float32) * 2 - 1
        latent[s] = rec.encode_records(rows) if shape.fp8 else rows.astype(shape.dtype)
    rows = shape.num_seqs * shape.query_len
    query = (rng.random((rows, shape.num_heads, rec.LATENT_DIMS), dtype=np.float32) * 2 - 1).astype(shape.dtype)
    data = MLATokens(shape, query, latent, None, seed)
    if shape.topk:
        tokens = np.full((rows, shape.topk), -1, np.int64)
        for r, p in enumerate(data.positions.tolist()):
            n = min(shape.topk, p + 1)
            tokens[r, rng.permutation(shape.topk)[:n]] = rng.choice(p + 1, size=n, replace=False)
        data.tokens = tokens
    return data


def paged_mla_problem(data: MLATokens, block_size: int) -> MLAProblem:
    """Page `data` into shuffled physical blocks of `block_size` (one spare block per sequence, NaN or 0xFF in
    every slot no query row reads) and map the sparse token sets to their slots."""
    shape = data.shape
    if block_size < 1:
        raise RefusedRequest(f"block_size must be >= 1, got {block_size}")
    rng = np.random.default_rng([data.seed, block_size])
    per_seq = -(-shape.context_len // block_size)
    needed = shape.num_seqs * per_seq
    num_blocks = needed + shape.num_seqs
    physical = shuffled_blocks(rng, num_blocks, needed)
    tables = physical.reshape(shape.num_seqs, per_seq).astype(np.int32)
    width = data.latent.shape[2]
    fill = 0xFF if shape.fp8 else np.nan
    padded = np.full((shape.num_seqs, per_seq * block_size, width), fill, data.latent.dtype)
    padded[:, :shape.context_len] = data.latent
    cache = np.full((num_blocks, block_size, width), fill, data.latent.dtype)
    cache[physical] = padded.reshape(needed, block_size, width)
    indices = None
    if data.tokens is not None:
        seqs = np.repeat(np.arange(shape.num_seqs), shape.query_len)
        t = np.maximum(data.tokens, 0)
        slots = tables[seqs[:, None], t // block_size].astype(np.int64) * block_size + t % block_size
        indices = np.where(data.tokens >= 0, slots, -1).astype(np.int32)
        read = np.zeros(num_blocks * block_size, bool)
        read[indices[indices >= 0]] = True
        cache.reshape(-1, width)[~read] = fill  # a slot no index names: garbage a sparse kernel must not read
    query_start = None if shape.query_len == 1 else np.arange(0, data.query.shape[0] + 1, shape.query_len,
                                                              dtype=np.int32)
    return MLAProblem(data.query, cache, tables, np.full(shape.num_seqs, shape.context_len, np.int32),
                      query_start=query_start, indices=indices, seed=data.seed).validate()


def expected_mla_output(data: MLATokens) -> tuple[np.ndarray, np.ndarray]:
    """(out float64 [rows, num_heads, 512], lse float64 [rows, num_heads]) from the contiguous rows, through no
    block table (default scale 1 / sqrt(576))."""
    shape = data.shape
    scale = 1.0 / np.sqrt(rec.LATENT_DIMS)
    q = shape.query_len
    out = np.empty((data.query.shape[0], shape.num_heads, rec.VALUE_DIMS))
    lse = np.empty((data.query.shape[0], shape.num_heads))
    for s in range(shape.num_seqs):
        keys = (rec.decode_records(data.latent[s]) if shape.fp8 else data.latent[s].astype(np.float64))
        rows = slice(s * q, (s + 1) * q)
        if data.tokens is None:
            visible = np.arange(shape.context_len)[None, :] <= data.positions[rows][:, None]
            out[rows], lse[rows] = attend(data.query[rows], keys, visible, scale)
            continue
        for r in range(s * q, (s + 1) * q):
            picked = data.tokens[r][data.tokens[r] >= 0]
            out[r:r + 1], lse[r:r + 1] = attend(data.query[r:r + 1], keys[picked], np.ones((1, len(picked)), bool),
                                                scale)
    return out, lse


class MLAShapeData:
    """The sweep's lazily built MLA problems (one block size at a time) and the one truth of a shape."""

    def __init__(self, shape: MLAShape, seed: int):
        self.shape, self.seed = shape, seed
        self._tokens = None
        self._expected = None
        self._problem = (None, None)

    @property
    def tokens(self) -> MLATokens:
        if self._tokens is None:
            self._tokens = make_mla_tokens(self.shape, self.seed)
        return self._tokens

    def problem(self, block_size: int) -> MLAProblem:
        if self._problem[0] != block_size:
            self._problem = (None, None)  # free the last block size's cache before paging the next
            self._problem = (block_size, paged_mla_problem(self.tokens, block_size))
        return self._problem[1]

    def expected(self, block_size: int) -> tuple[np.ndarray, np.ndarray]:
        if self._expected is None:
            self._expected = expected_mla_output(self.tokens)
        return self._expected

    def verdict(self, prepared, got, block_size: int):
        """out and lse against the truth (sandbox.checking.mla_check.compare_mla)."""
        lse = getattr(prepared, "lse", None)
        out, want_lse = self.expected(block_size)
        if lse is None:  # an MLA variant without lse(): out alone
            return compare(got, out, self.shape.dtype)
        return compare_mla(got, lse(), out, want_lse, self.shape.dtype)


# The sweep's part of the MLA kind (sandbox/problem/kinds.py): its shapes' grammar and the arrays it builds once per shape.
MLA.attach(shape_grammar=ShapeGrammar(SHAPE_FORMAT, is_mla, parse_mla_shape), shape_data=MLAShapeData)
