"""Sweep shapes: a decode batch (sequences x tokens x heads x head dim x dtype) and its paged problems.

A shape is written SEQSxTOKENSxHEADS/KVHEADSxHEADDIMxDTYPE, e.g. ``64x4096x32/8x128xfp16``.
Every block size of one shape pages the *same* tokens (same K, V and query), so the expected
output is computed once per shape and every block size is held to it.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..check import grouped_dense_decode
from ..problem import DecodeProblem, shuffled_blocks

_DTYPES = {"fp16": "float16", "float16": "float16", "half": "float16", "fp32": "float32", "float32": "float32"}
_SHORT = {"float16": "fp16", "float32": "fp32"}
_PATTERN = re.compile(r"^(\d+)x(\d+)x(\d+)/(\d+)x(\d+)(?:x(\w+))?$")


@dataclasses.dataclass(frozen=True)
class Shape:
    num_seqs: int
    context_len: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float16"

    def __post_init__(self):
        for field in ("num_seqs", "context_len", "num_heads", "num_kv_heads", "head_dim"):
            if getattr(self, field) < 1:
                raise ValueError(f"shape {field} must be >= 1, got {getattr(self, field)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"shape num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.dtype not in _SHORT:
            raise ValueError(f"shape dtype must be float16 or float32, got {self.dtype!r}")

    @property
    def name(self) -> str:
        return (f"{self.num_seqs}x{self.context_len}x{self.num_heads}/{self.num_kv_heads}"
                f"x{self.head_dim}x{_SHORT[self.dtype]}")

    @property
    def title(self) -> str:
        return (f"{self.num_seqs} seqs x {self.context_len} tokens, {self.num_heads}/{self.num_kv_heads} heads, "
                f"d{self.head_dim} {_SHORT[self.dtype]}")

    def columns(self) -> dict:
        """The shape columns of a sweep.csv row."""
        return dict(shape=self.name, num_seqs=self.num_seqs, context_len=self.context_len, num_heads=self.num_heads,
                    num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, dtype=self.dtype)


def parse_shape(text: str) -> Shape:
    """``64x4096x32/8x128xfp16`` -> Shape (dtype defaults to float16)."""
    match = _PATTERN.match(text.strip())
    if not match:
        raise ValueError(f"shape {text!r} is not SEQSxTOKENSxHEADS/KVHEADSxHEADDIM[xDTYPE], e.g. 64x4096x32/8x128xfp16")
    seqs, tokens, heads, kv_heads, head_dim, dtype = match.groups()
    dtype = dtype or "fp16"
    if dtype.lower() not in _DTYPES:
        raise ValueError(f"shape {text!r}: dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    return Shape(int(seqs), int(tokens), int(heads), int(kv_heads), int(head_dim), _DTYPES[dtype.lower()])


# Realistic decode batches on a GPU: the goal shape (64 x 4096, Llama-3-8B-like heads) first, so a
# time-limited sweep measures it before anything else; then a mid batch, then long contexts.
GPU_SHAPES = ("64x4096x32/8x128xfp16", "32x1024x32/8x128xfp16", "4x16384x32/8x128xfp16")
GPU_QUICK_SHAPES = ("64x4096x32/8x128xfp16", "32x1024x32/8x128xfp16")
# On the CPU everything runs in the Numba simulator (~270 us per thread-barrier) or the CUDA C
# executor: keep the shapes tiny; they check correctness and give emulation times, nothing more.
CPU_SHAPES = ("2x300x4/2x64xfp16", "2x64x8/2x64xfp32")  # 300 = one full 256-block + a partial one; GQA 4
CPU_QUICK_SHAPES = ("2x40x4/2x64xfp16",)
GOAL_SHAPE = "64x4096x32/8x128xfp16"

PRESETS = {"gpu": GPU_SHAPES, "gpu-quick": GPU_QUICK_SHAPES, "cpu": CPU_SHAPES, "cpu-quick": CPU_QUICK_SHAPES}

DEFAULT_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
QUICK_GPU_BLOCK_SIZES = DEFAULT_BLOCK_SIZES
QUICK_CPU_BLOCK_SIZES = (1, 16, 256)


def parse_shapes(text: str) -> list[Shape]:
    """Comma-separated shapes and/or preset names (gpu, gpu-quick, cpu, cpu-quick); duplicates dropped."""
    out: list[Shape] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        for spec in PRESETS.get(item, (item,)):
            shape = parse_shape(spec)
            if shape not in out:
                out.append(shape)
    if not out:
        raise ValueError(f"no shapes in {text!r}")
    return out


def default_shapes(on_gpu: bool, quick: bool) -> list[Shape]:
    key = ("gpu" if on_gpu else "cpu") + ("-quick" if quick else "")
    return [parse_shape(s) for s in PRESETS[key]]


@dataclasses.dataclass
class Tokens:
    """One shape's contiguous data: the truth every block size is paged from.

    query [num_seqs, num_heads, head_dim]; keys/values [num_seqs, context_len, num_kv_heads, head_dim].
    """

    shape: Shape
    query: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    seed: int


def make_tokens(shape: Shape, seed: int) -> Tokens:
    """Uniform [-1, 1) query and K/V, generated one sequence at a time (large shapes stay in memory)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(shape.dtype)
    kv_shape = (shape.num_seqs, shape.context_len, shape.num_kv_heads, shape.head_dim)
    keys = np.empty(kv_shape, dtype=dtype)
    values = np.empty(kv_shape, dtype=dtype)
    for s in range(shape.num_seqs):
        for out in (keys, values):
            chunk = rng.random(kv_shape[1:], dtype=np.float32)
            chunk *= 2
            chunk -= 1
            out[s] = chunk
    query = (rng.random((shape.num_seqs, shape.num_heads, shape.head_dim), dtype=np.float32) * 2 - 1).astype(dtype)
    return Tokens(shape, query, keys, values, seed)


def paged_problem(tokens: Tokens, block_size: int) -> DecodeProblem:
    """Page `tokens` into shuffled physical blocks of `block_size`; every unused slot is NaN.

    The physical order is a seeded permutation (never increasing), with one spare block per
    sequence, as an allocator that has served other requests would leave it.
    """
    shape = tokens.shape
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    rng = np.random.default_rng([tokens.seed, block_size])
    per_seq = -(-shape.context_len // block_size)
    needed = shape.num_seqs * per_seq
    num_blocks = needed + shape.num_seqs
    physical = shuffled_blocks(rng, num_blocks, needed)
    tables = physical.reshape(shape.num_seqs, per_seq).astype(np.int32)

    cache_shape = (num_blocks, block_size, shape.num_kv_heads, shape.head_dim)
    padded = per_seq * block_size
    unused = np.setdiff1d(np.arange(num_blocks), physical)  # the spare blocks: NaN, never read
    caches = []
    for source in (tokens.keys, tokens.values):
        if padded != shape.context_len:  # the last block's tail: NaN
            tail = np.full((shape.num_seqs, padded - shape.context_len) + source.shape[2:], np.nan, source.dtype)
            source = np.concatenate([source, tail], axis=1)
        cache = np.empty(cache_shape, dtype=source.dtype)
        cache[physical] = source.reshape(needed, block_size, shape.num_kv_heads, shape.head_dim)
        cache[unused] = np.nan
        caches.append(cache)
    context_lens = np.full(shape.num_seqs, shape.context_len, dtype=np.int32)
    return DecodeProblem(tokens.query, caches[0], caches[1], tables, context_lens, scale=None, seed=tokens.seed).validate()


def expected_output(tokens: Tokens) -> np.ndarray:
    """float64 [num_seqs, num_heads, head_dim] from the contiguous tokens (no block table involved):
    the truth every block size's paged problem is held to (default scale 1 / sqrt(head_dim))."""
    scale = 1.0 / np.sqrt(tokens.shape.head_dim)
    return np.stack([grouped_dense_decode(tokens.query[s], tokens.keys[s], tokens.values[s], scale)
                     for s in range(tokens.shape.num_seqs)])
