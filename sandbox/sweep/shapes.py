"""Sweep shapes: a batch (sequences x tokens x heads x head dim x dtypes, query tokens, sharing, options)
and its paged problems.

A shape is written SEQSxTOKENSxHEADS/KVHEADSxHEADDIM[xDTYPE[:KVDTYPE]] followed by optional words (MLA
shapes, mla:SEQSxTOKENSxHEADS[xDTYPE[:fp8]] [topk=K] [q=Q], are in sandbox/sweep/mla_shapes.py):

    64x4096x32/8x128xfp16                 decode, float16 query and cache
    64x4096x32/8x128xbf16:e4m3            bfloat16 query, float8_e4m3fn cache (k/v scale 1/448)
    64x4096x32/8x128xbf16:nvfp4           bfloat16 query, NVFP4 cache (e2m1 codes, an e4m3 scale per 16
                                          values, k/v scale 1/(6*448)); head dim a multiple of 16
    32x1024x32/8x128xfp16 q=4             4 query tokens per sequence (the last 4 positions, causal)
    64x2048x32/8x128xfp16 shared=8        groups of 8 sequences share a 2048-token prompt (fork), each
                                          with 1..SUFFIX_MAX tokens of its own after it
    ... window=1024,softcap=30,alibi      attention options (also kscale=, vscale=; alibi: the paper's slopes)

Every block size of a plain or multi-query shape pages the *same* tokens (same K, V and query), so
the expected output is computed once per shape, from the contiguous tokens, and every block size is
held to it. A shared-prefix shape is built per block size by DecodeProblem.shared (the block tables
BlockManager produces), with the same lengths at every block size; its truth is the reference's.
"""
from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

import numpy as np

import reference
from reference.formats import quantize_nvfp4

from ..problem import dtypes
from ..problem.option_schema import Context
from ..problem.option_tokens import NO_OPTIONS, OptionTokens, parse_option_tokens
from ..problem.options import AttentionOptions
from ..problem.decode import DecodeProblem, shuffled_blocks
from ..problem.validate import first_read_tokens
from ..problem import kinds
from . import mla_shapes  # noqa: F401  (attaches the MLA kind's shape grammar)
from ..errors import RefusedRequest

_PATTERN = re.compile(r"^(\d+)x(\d+)x(\d+)/(\d+)x(\d+)(?:x(\w+)(?::(\w+))?)?$")
SHAPE_FORMAT = "SEQSxTOKENSxHEADS/KVHEADSxHEADDIM[xDTYPE[:KVDTYPE]] [q=Q] [shared=G] [OPTIONS]"
# A shared-prefix shape's sequences each have 1..SUFFIX_MAX tokens of their own after the shared prompt
# (seeded, the same at every block size): what parallel sampling has generated so far.
SUFFIX_MAX = 16


# ---------------------------------------------------------------- shapes


@dataclasses.dataclass(frozen=True)
class Shape:
    num_seqs: int
    context_len: int             # tokens per sequence; a shared-prefix shape: the shared prompt's length
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float16"       # query and output
    kv_dtype: str | None = None  # the cache's (None: the query's; an fp8 format or "nvfp4")
    query_len: int = 1           # query tokens per sequence (1: decode)
    group_size: int = 0          # > 0: groups of group_size sequences share the context_len-token prompt
    options: OptionTokens = NO_OPTIONS

    kind: ClassVar[str] = kinds.DECODE.name  # what the sweep matches against a variant's problem kind

    def __post_init__(self):
        for field in ("num_seqs", "context_len", "num_heads", "num_kv_heads", "head_dim", "query_len"):
            if getattr(self, field) < 1:
                raise RefusedRequest(f"shape {field} must be >= 1, got {getattr(self, field)}")
        if self.num_heads % self.num_kv_heads:
            raise RefusedRequest(f"shape num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        dtype = dtypes.canonical(self.dtype)
        if dtype not in dtypes.QUERY_DTYPES:
            raise RefusedRequest(f"shape dtype must be one of {', '.join(dtypes.QUERY_DTYPES)} (fp32, fp16, bf16), got "
                                 f"{self.dtype!r}")
        kv = dtype if self.kv_dtype is None else dtypes.canonical(self.kv_dtype)
        if kv != dtype and kv not in dtypes.KV_FORMATS:
            raise RefusedRequest(f"shape cache dtype must be the query's ({dtypes.short(dtype)}), an fp8 format "
                                 f"(e4m3, e5m2) or nvfp4, got {self.kv_dtype!r}")
        if kv == dtypes.NVFP4 and self.head_dim % 16:
            raise RefusedRequest(f"shape cache nvfp4 needs head_dim a multiple of 16 (one scale per 16 values), "
                                 f"got {self.head_dim}")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "kv_dtype", kv)
        if self.group_size == 1 or self.group_size < 0:
            raise RefusedRequest(f"shape shared={self.group_size}: a group must have >= 2 sequences to share a prompt")
        if self.group_size and self.num_seqs % self.group_size:
            raise RefusedRequest(f"shape shared={self.group_size}: num_seqs ({self.num_seqs}) must be a multiple of the "
                                 f"group size")
        if not self.group_size and self.query_len > self.context_len:
            raise RefusedRequest(f"shape q={self.query_len}: more query tokens than the context's {self.context_len}")
        self.attention_options(kv)  # ValueError for options the problem cannot take

    @property
    def base(self) -> str:
        kv = "" if self.kv_dtype == self.dtype else f":{_short_kv(self.kv_dtype)}"
        return (f"{self.num_seqs}x{self.context_len}x{self.num_heads}/{self.num_kv_heads}"
                f"x{self.head_dim}x{dtypes.short(self.dtype)}{kv}")

    @property
    def name(self) -> str:
        """What parse_shape() reads back: base, then q=, shared=, options (each only when set)."""
        words = [self.base]
        if self.query_len > 1:
            words.append(f"q={self.query_len}")
        if self.group_size:
            words.append(f"shared={self.group_size}")
        if self.options.text:
            words.append(self.options.text)
        return " ".join(words)

    @property
    def prefix_len(self) -> int:
        """The shared prompt's tokens (0: no sharing)."""
        return self.context_len if self.group_size else 0

    @property
    def longest_context(self) -> int:
        """The most tokens any sequence has: a shared prompt's sequences add up to SUFFIX_MAX of their own."""
        return self.context_len + (SUFFIX_MAX if self.group_size else 0)

    @property
    def title(self) -> str:
        kv = "" if self.kv_dtype == self.dtype else f" cache {_short_kv(self.kv_dtype)}"
        if self.group_size:
            what = (f"{self.num_seqs} seqs = {self.num_seqs // self.group_size} groups of {self.group_size} sharing a "
                    f"{self.context_len}-token prompt (+1..{SUFFIX_MAX} own)")
        else:
            what = f"{self.num_seqs} seqs x {self.context_len} tokens"
        extra = (f", {self.query_len} query tokens" if self.query_len > 1 else "") + (
            f", {self.options.text}" if self.options.text else "")
        return (f"{what}, {self.num_heads}/{self.num_kv_heads} heads, d{self.head_dim} {dtypes.short(self.dtype)}"
                f"{kv}{extra}")

    @property
    def plain(self) -> bool:
        """Decode over private contexts with no option: what the H200 goals are stated for."""
        return self.query_len == 1 and not self.group_size and not self.options.text

    def replace(self, **changes) -> "Shape":
        return dataclasses.replace(self, **changes)

    def expanded(self, query_lens=(), shared_prefix: int | None = None, group_size: int | None = None,
                 options: OptionTokens | None = None) -> list["Shape"]:
        """This shape with the command line's additions (expand() has the rules), in order, duplicates kept."""
        shape = self if options is None else self.replace(options=options)
        out = [shape]
        out += [shape.replace(query_len=q) for q in query_lens if shape.group_size or q <= shape.context_len]
        if shared_prefix is not None and not shape.group_size:
            g = 8 if group_size is None else group_size
            groups = max(1, shape.num_seqs // g)
            out += [shape.replace(num_seqs=groups * g, context_len=shared_prefix, group_size=g, query_len=q)
                    for q in dict.fromkeys((1, *query_lens))]
        return out

    def multiply_adds_bound(self) -> int:
        """Multiply-adds before the problem is built (an upper bound: every query token reads the whole context,
        a shared prompt's suffix tokens counted): 2 x heads x head_dim per query token and token read."""
        return 2 * self.num_seqs * self.query_len * self.num_heads * self.head_dim * self.longest_context

    def option_context(self, kv_dtype: str | None = None) -> Context:
        return Context(num_heads=self.num_heads, head_dim=self.head_dim, kv_format=kv_dtype or self.kv_dtype)

    def attention_options(self, kv_dtype: str | None = None) -> AttentionOptions:
        context = self.option_context(kv_dtype)
        if context.kv_format != dtypes.NVFP4:
            return self.options.attention(context)
        # NVFP4: the block scales are per slot (paged_problem pages them beside the codes); the per-tensor
        # scales not given default to NVFP4's 1 / (6 * 448)
        options = self.options.attention(dataclasses.replace(context, kv_format=None))
        given = self.options.problem_keywords(context)
        unit = dtypes.default_kv_scale(dtypes.NVFP4)
        return dataclasses.replace(options, k_scale=unit if given.get("k_scale") is None else options.k_scale,
                                   v_scale=unit if given.get("v_scale") is None else options.v_scale)

    def columns(self) -> dict:
        """The shape columns of a sweep.csv row."""
        return dict(shape=self.name, num_seqs=self.num_seqs, context_len=self.context_len, num_heads=self.num_heads,
                    num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, dtype=self.dtype, kv_dtype=self.kv_dtype,
                    options=self.options.text, query_len=self.query_len, prefix_len=self.prefix_len,
                    group_size=self.group_size)


def _short_kv(kv_dtype: str) -> str:
    """A cache format's short name: e4m3, e5m2, nvfp4 (or the dtype's)."""
    return dtypes.NVFP4 if kv_dtype == dtypes.NVFP4 else dtypes.short(kv_dtype)


def _int_word(word: str, text: str) -> int:
    key, _, value = word.partition("=")
    if not re.fullmatch(r"\d+", value):
        raise RefusedRequest(f"shape {text!r}: {key}= needs a whole number, got {word!r}")
    return int(value)


def parse_shape(text: str) -> Shape:
    """``64x4096x32/8x128xbf16:e4m3 q=4 shared=8 window=1024`` -> Shape (dtype defaults to float16)."""
    words = text.split()
    match = _PATTERN.match(words[0]) if words else None
    if not match:
        raise RefusedRequest(f"shape {text!r} is not {SHAPE_FORMAT}, e.g. 64x4096x32/8x128xbf16:e4m3")
    seqs, tokens, heads, kv_heads, head_dim, dtype, kv_dtype = match.groups()
    extra: dict = {}
    option_words = []
    for word in words[1:]:
        if word.startswith("q="):
            extra["query_len"] = _int_word(word, text)
        elif word.startswith("shared="):
            extra["group_size"] = _int_word(word, text)
        else:
            option_words.append(word)
    if option_words:
        extra["options"] = parse_option_tokens(",".join(option_words), what=f"shape {text!r}")
    try:
        return Shape(int(seqs), int(tokens), int(heads), int(kv_heads), int(head_dim), dtype or "fp16", kv_dtype,
                     **extra)
    except ValueError as exc:
        raise RefusedRequest(f"shape {text!r}: {exc}") from None


# Realistic decode batches on a GPU: the goal shape (64 x 4096, Llama-3-8B-like heads) first, so a
# time-limited sweep measures it before anything else; then bfloat16 and an fp8 (e4m3) cache at the
# goal shape, parallel sampling (n = 8 sharing a 2048-token prompt: cupy.cascade vs cupy.multi),
# speculative decoding (4 query tokens), a mid batch, long contexts.
# Last, FlashMLA's headline MLA decode (batch 128, 128 heads, 4096 tokens, bf16; block size 64 among the sweep's).
GPU_SHAPES = ("64x4096x32/8x128xfp16", "64x4096x32/8x128xbf16", "64x4096x32/8x128xfp16:e4m3",
              "64x2048x32/8x128xfp16 shared=8", "32x1024x32/8x128xfp16 q=4", "32x1024x32/8x128xfp16",
              "4x16384x32/8x128xfp16", "mla:128x4096x128xbf16")
GPU_QUICK_SHAPES = ("64x4096x32/8x128xfp16", "64x4096x32/8x128xfp16:e4m3", "64x2048x32/8x128xfp16 shared=8",
                    "32x1024x32/8x128xfp16")
# On the CPU everything runs in the Numba simulator (a Python thread per CUDA thread) or the CUDA C
# executor: keep the shapes tiny; they check correctness and give emulation times, nothing more.
# 300 tokens = one full 256-block + a partial one (4 query heads over 2 KV heads); then bfloat16 queries over
# an e4m3 cache (GQA 4 over one KV head), 4 query tokens per sequence (only the multi-query variants run it),
# and 2 sequences forked from a 24-token prompt. One sequence each where one shows the point: the simulator's
# time grows with the heads and tokens of a shape, and the default CPU sweep has to stay within 7 minutes.
# Last, one MLA shape small enough for the simulator (8 of 16 tokens over fp8 records: sparse, the record's
# decode and the top-k path in one; ~9k multiply-adds per launch).
CPU_SHAPES = ("1x300x4/2x64xfp16", "1x64x4/1x64xbf16:e4m3", "1x32x4/2x64xfp16 q=4", "2x24x2/1x64xfp16 shared=2",
              "mla:1x16x1xbf16:fp8 topk=8")
CPU_QUICK_SHAPES = ("2x40x4/2x64xfp16",)
GOAL_SHAPE = "64x4096x32/8x128xfp16"

PRESETS = {"gpu": GPU_SHAPES, "gpu-quick": GPU_QUICK_SHAPES, "cpu": CPU_SHAPES, "cpu-quick": CPU_QUICK_SHAPES}

DEFAULT_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
QUICK_GPU_BLOCK_SIZES = DEFAULT_BLOCK_SIZES
QUICK_CPU_BLOCK_SIZES = (1, 16, 256)


def parse_shapes(text: str) -> list[Shape]:
    """Comma-separated shapes and/or preset names (gpu, gpu-quick, cpu, cpu-quick); duplicates dropped.

    Options inside a shape are separated by commas too: a comma-separated item that is not a shape
    or a preset (``window=1024``, ``alibi``) belongs to the shape before it.
    """
    items: list[str] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if items and item not in PRESETS and not any(k.shape_grammar.matches(item) for k in kinds.CHECKED):
            items[-1] += "," + item  # an option of the previous shape
        else:
            items.append(item)
    out: list[Shape] = []
    for item in items:
        for spec in PRESETS.get(item, (item,)):
            shape = parse_any(spec)
            if shape not in out:
                out.append(shape)
    if not out:
        raise RefusedRequest(f"no shapes in {text!r}")
    return out


def parse_any(spec: str):
    """The shape `spec` writes, in the grammar of the kind that matches it: a decode Shape, an MLAShape for
    ``mla:...`` (sandbox/sweep/mla_shapes.py); a malformed spec is refused naming the decode format."""
    for kind in kinds.CHECKED:
        if kind.shape_grammar.matches(spec):
            return kind.shape_grammar.parse(spec)
    return parse_shape(spec)


def _is_decode_shape(text: str) -> bool:
    words = text.split()
    return bool(words) and bool(_PATTERN.match(words[0]))


def default_shapes(on_gpu: bool, quick: bool) -> list[Shape]:
    key = ("gpu" if on_gpu else "cpu") + ("-quick" if quick else "")
    return [parse_any(s) for s in PRESETS[key]]


def expand(shapes: list[Shape], query_lens=(), shared_prefix: int | None = None, group_size: int | None = None,
           options: OptionTokens | None = None) -> list[Shape]:
    """The command line's additions to a list of shapes, duplicates dropped, in order:

    options: applied to every shape (replacing a shape's own);
    query_lens: each shape also with each of these query tokens per sequence;
    shared_prefix/group_size: each private-context shape also as groups of group_size (default 8)
    sequences sharing a shared_prefix-token prompt (max(1, seqs // group_size) groups), decode and each
    of query_lens.
    """
    if group_size is not None and shared_prefix is None:
        raise RefusedRequest("--group-size needs --shared-prefix N (the shared prompt's tokens)")
    out: list[Shape] = []

    def add(shape):
        if shape not in out:
            out.append(shape)

    decode = [s for s in shapes if s.kind == Shape.kind]  # query lengths apply to decode shapes
    longest = max((s.context_len for s in decode if not s.group_size), default=None)
    too_long = [q for q in query_lens if longest is not None and q > longest and not any(s.group_size for s in decode)]
    if too_long:  # a point no shape can hold would be dropped silently
        raise RefusedRequest(f"--query-lens {too_long[0]}: more query tokens than any shape's context (the longest "
                             f"has {longest} tokens); each must be in 1..{longest}")
    for shape in shapes:  # each shape applies what its kind's grammar has (an MLA shape: none of them)
        for expanded in shape.expanded(query_lens, shared_prefix, group_size, options):
            add(expanded)
    return out


# ---------------------------------------------------------------- private contexts: tokens, paged per block size


@dataclasses.dataclass
class Tokens:
    """One shape's contiguous data: the truth every block size is paged from.

    query [num_seqs * query_len, num_heads, head_dim] in the query's dtype (sequence s's rows
    s*q..s*q+q-1 are its last q positions); keys/values [num_seqs, context_len, num_kv_heads, head_dim]
    in the cache's dtype, holding x / k_scale (x / v_scale) for x uniform in [-1, 1).
    """

    shape: Shape
    query: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    seed: int
    options: AttentionOptions = dataclasses.field(default_factory=AttentionOptions)
    # NVFP4: float8_e4m3fn [num_seqs, context_len, num_kv_heads, head_dim // 16] beside keys/values (packed codes)
    k_block_scales: np.ndarray | None = None
    v_block_scales: np.ndarray | None = None

    @property
    def query_start(self) -> np.ndarray | None:
        q = self.shape.query_len
        return None if q == 1 else np.arange(0, self.shape.num_seqs * q + 1, q, dtype=np.int32)

    def first_read(self) -> int:
        """The first token any query token of a sequence reads (0 without a window): the same for every sequence."""
        s = self.shape
        return int(first_read_tokens(np.array([s.context_len]), np.array([s.query_len]), self.options.window_left)[0])


def _encode(x: np.ndarray, kv_dtype: np.dtype, scale: float) -> np.ndarray:
    """What a cache write stores for x: fp8(x / scale) saturating, or x / scale in the cache's dtype."""
    if dtypes.is_fp8(kv_dtype):
        return dtypes.quantize_fp8(x, kv_dtype, scale)
    return (x / np.float32(scale) if scale != 1.0 else x).astype(kv_dtype)


def make_tokens(shape: Shape, seed: int) -> Tokens:
    """Uniform [-1, 1) query and K/V, generated one sequence at a time (large shapes stay in memory)."""
    if shape.group_size:
        raise RefusedRequest(f"shape {shape.name}: a shared-prefix shape is built per block size (shared_problem)")
    rng = np.random.default_rng(seed)
    kv_dtype = dtypes.dtype(shape.kv_dtype)
    options = shape.attention_options()
    kv_shape = (shape.num_seqs, shape.context_len, shape.num_kv_heads, shape.head_dim)
    nvfp4 = shape.kv_dtype == dtypes.NVFP4
    stored = kv_shape[:3] + (shape.head_dim // 2 if nvfp4 else shape.head_dim,)
    keys = np.empty(stored, dtype=kv_dtype)
    values = np.empty(stored, dtype=kv_dtype)
    block_scales = [np.empty(kv_shape[:3] + (shape.head_dim // 16,), dtypes.dtype("float8_e4m3fn"))
                    for _ in range(2)] if nvfp4 else [None, None]
    for s in range(shape.num_seqs):
        for out, scale, scales in ((keys, options.k_scale, block_scales[0]), (values, options.v_scale, block_scales[1])):
            chunk = rng.random(kv_shape[1:], dtype=np.float32)
            chunk *= 2
            chunk -= 1
            if nvfp4:  # what a cache write stores: e2m1 codes and e4m3 block scales (reference.formats)
                out[s], scales[s] = quantize_nvfp4(chunk, scale)
            else:
                out[s] = _encode(chunk, kv_dtype, scale)
    rows = shape.num_seqs * shape.query_len
    query = (rng.random((rows, shape.num_heads, shape.head_dim), dtype=np.float32) * 2 - 1).astype(
        dtypes.dtype(shape.dtype))
    return Tokens(shape, query, keys, values, seed, options, *block_scales)


def paged_problem(tokens: Tokens, block_size: int) -> DecodeProblem:
    """Page `tokens` into shuffled physical blocks of `block_size`; every slot no query token reads is NaN.

    The physical order is a seeded permutation (never increasing), with one spare block per
    sequence, as an allocator that has served other requests would leave it. With a window, the
    blocks wholly before it are freed (-1 in the table, NaN in the cache), as a serving engine does.
    """
    shape = tokens.shape
    if block_size < 1:
        raise RefusedRequest(f"block_size must be >= 1, got {block_size}")
    rng = np.random.default_rng([tokens.seed, block_size])
    per_seq = -(-shape.context_len // block_size)
    needed = shape.num_seqs * per_seq
    num_blocks = needed + shape.num_seqs
    physical = shuffled_blocks(rng, num_blocks, needed)
    tables = physical.reshape(shape.num_seqs, per_seq).astype(np.int32)

    padded = per_seq * block_size
    first = tokens.first_read()
    caches = []
    # NVFP4's codes (uint8) cannot hold NaN: unread slots hold code 0 and NaN block scales (as DecodeProblem's)
    for source in (tokens.keys, tokens.values, tokens.k_block_scales, tokens.v_block_scales):
        if source is None:
            caches.append(None)
            continue
        fill = 0 if source.dtype == np.uint8 else np.nan
        if padded != shape.context_len or first:  # the last block's tail, and what a window leaves out: NaN
            source = np.concatenate(
                [source, np.full((shape.num_seqs, padded - shape.context_len) + source.shape[2:], fill, source.dtype)],
                axis=1)
            source[:, :first] = fill
        cache = np.full((num_blocks, block_size) + source.shape[2:], fill, dtype=source.dtype)  # spare blocks
        cache[physical] = source.reshape((needed, block_size) + source.shape[2:])
        caches.append(cache)
    tables[:, : first // block_size] = -1  # blocks wholly before the window: freed
    context_lens = np.full(shape.num_seqs, shape.context_len, dtype=np.int32)
    options = tokens.options
    if caches[2] is not None:
        options = dataclasses.replace(options, k_block_scales=caches[2], v_block_scales=caches[3])
    return DecodeProblem(tokens.query, caches[0], caches[1], tables, context_lens, scale=None, options=options,
                         query_start=tokens.query_start, seed=tokens.seed).validate()


def expected_output(tokens: Tokens) -> np.ndarray:
    """float64 [num_seqs * query_len, num_heads, head_dim] from the contiguous tokens (no block table
    involved): the truth every block size's paged problem is held to (default scale 1 / sqrt(head_dim))."""
    shape = tokens.shape
    scale = 1.0 / np.sqrt(shape.head_dim)
    q, first = shape.query_len, tokens.first_read()
    kwargs = tokens.options.kwargs()

    def beside(s):  # NVFP4: the tokens' block scales, aligned with keys/values
        if tokens.k_block_scales is None:
            return {}
        return dict(k_block_scales=tokens.k_block_scales[s, first:], v_block_scales=tokens.v_block_scales[s, first:])

    return np.concatenate([reference.sequence_attention(tokens.query[s * q:(s + 1) * q], tokens.keys[s, first:],
                                                        tokens.values[s, first:], scale, first,
                                                        **dict(kwargs, **beside(s)))
                           for s in range(shape.num_seqs)])


# ---------------------------------------------------------------- shared prompts: one problem per block size


def suffix_lens(shape: Shape, seed: int) -> list[int]:
    """Each sequence's own tokens after the shared prompt: 1..SUFFIX_MAX, seeded, the same at every block size."""
    return np.random.default_rng([seed, 1]).integers(1, SUFFIX_MAX + 1, size=shape.num_seqs).tolist()


def shared_problem(shape: Shape, block_size: int, seed: int) -> DecodeProblem:
    """Groups of shape.group_size sequences forked from one context_len-token prompt (parallel sampling:
    DecodeProblem.shared(how="fork")), each then appending its suffix_lens() tokens; NaN in unread slots."""
    if not shape.group_size:
        raise RefusedRequest(f"shape {shape.name} shares no prompt (shared=G)")
    return DecodeProblem.shared(
        seed, num_groups=shape.num_seqs // shape.group_size, group_size=shape.group_size, prefix_len=shape.context_len,
        suffix_lens=suffix_lens(shape, seed), how="fork", num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim, block_size=block_size, dtype=shape.dtype,
        kv_dtype=None if shape.kv_dtype == shape.dtype else shape.kv_dtype,
        query_lens=shape.query_len if shape.query_len > 1 else None,
        **shape.options.problem_keywords(shape.option_context()))


kinds.DECODE.attach(shape_grammar=kinds.ShapeGrammar(SHAPE_FORMAT, _is_decode_shape, parse_shape))
