"""The MLA latent row and its 656-byte fp8 record (FlashMLA's / DeepSeek V3.2's fp8 KV cache layout).

A latent row has LATENT_DIMS = 576 values: dims 0..511 are the "nope" part (keys and values), dims
512..575 the RoPE part (keys only). The fp8 record stores one row in RECORD_BYTES = 656 bytes,
little-endian, at these byte offsets:

    [  0, 512)  512 float8_e4m3fn codes, nope dim d at byte d
    [512, 528)  4 float32 scales; scale j serves nope dims 128*j .. 128*j + 127
    [528, 656)  64 bfloat16 RoPE values, RoPE dim i (row dim 512 + i) at bytes 528 + 2*i, 529 + 2*i

Dequantized row: k[d] = e4m3(code[d]) * scale[d // 128] for d < 512, k[512 + i] = bf16(rope[i]).
The values of the row are k[:512]. A 0xFF byte is NaN in all three fields (e4m3 0xFF, float32
0xFFFFFFFF, bfloat16 0xFFFF): an unread record is all 0xFF in the problems here.

encode_records() quantizes as FlashMLA's cache write does: per 128-dim tile the scale is the power of
two at or above amax / 448 (amax clamped to >= 1e-4), codes = e4m3(x / scale) rounded to nearest
even and saturating, the RoPE dims rounded to bfloat16.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import quantize_fp8

NOPE_DIMS = 512
ROPE_DIMS = 64
LATENT_DIMS = NOPE_DIMS + ROPE_DIMS
VALUE_DIMS = NOPE_DIMS
TILE_DIMS = 128
CODE_DTYPE = "float8_e4m3fn"  # the nope codes' dtype: how resources / sass name the record's fp8
NUM_TILES = NOPE_DIMS // TILE_DIMS
SCALES_AT = NOPE_DIMS                   # byte offset of the 4 float32 scales
ROPE_AT = SCALES_AT + 4 * NUM_TILES     # byte offset of the 64 bfloat16 RoPE values
RECORD_BYTES = ROPE_AT + 2 * ROPE_DIMS  # 656
FORMAT = "fp8_record"                   # the kv format's name (a cache of the query's dtype is named by its dtype)
E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4


def parts(records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of uint8 [..., 656] records: (codes float8_e4m3fn [..., 512], scales float32 [..., 4],
    rope bfloat16 [..., 64])."""
    records = np.ascontiguousarray(records)
    codes = records[..., :SCALES_AT].view(np.dtype("float8_e4m3fn"))
    scales = records[..., SCALES_AT:ROPE_AT].view("<f4")
    rope = records[..., ROPE_AT:].view(np.dtype("bfloat16"))
    return codes, scales, rope


def decode_records(records: np.ndarray) -> np.ndarray:
    """uint8 [..., 656] -> float64 [..., 576], exact (an e4m3 value times a float32 scale fits float64)."""
    codes, scales, rope = parts(records)
    out = np.empty(records.shape[:-1] + (LATENT_DIMS,), np.float64)
    nope = codes.astype(np.float64).reshape(records.shape[:-1] + (NUM_TILES, TILE_DIMS))
    out[..., :NOPE_DIMS] = (nope * scales.astype(np.float64)[..., None]).reshape(records.shape[:-1] + (NOPE_DIMS,))
    out[..., NOPE_DIMS:] = rope.astype(np.float64)
    return out


def assemble(codes: np.ndarray, scales: np.ndarray, rope: np.ndarray) -> np.ndarray:
    """uint8 [..., 656] records from codes (float8_e4m3fn or uint8 [..., 512]), scales (float32 [..., 4])
    and rope (bfloat16 [..., 64])."""
    lead = codes.shape[:-1]
    out = np.empty(lead + (RECORD_BYTES,), np.uint8)
    out[..., :SCALES_AT] = np.ascontiguousarray(codes).view(np.uint8)
    out[..., SCALES_AT:ROPE_AT] = np.ascontiguousarray(scales, dtype="<f4").view(np.uint8).reshape(lead + (16,))
    out[..., ROPE_AT:] = np.ascontiguousarray(rope.astype(np.dtype("bfloat16"))).view(np.uint8).reshape(lead + (128,))
    return out


def encode_records(latent: np.ndarray) -> np.ndarray:
    """float [..., 576] -> uint8 [..., 656], quantized as FlashMLA's cache write (see the module docstring)."""
    x = np.asarray(latent, np.float32)
    tiles = x[..., :NOPE_DIMS].reshape(x.shape[:-1] + (NUM_TILES, TILE_DIMS))
    amax = np.maximum(np.abs(tiles).max(axis=-1), AMAX_FLOOR)
    scales = np.exp2(np.ceil(np.log2(amax / E4M3_MAX))).astype(np.float32)
    codes = quantize_fp8(tiles / scales[..., None], "float8_e4m3fn").reshape(x.shape[:-1] + (NOPE_DIMS,))
    return assemble(codes, scales, x[..., NOPE_DIMS:])


def spanning_records(rng: np.random.Generator, lead: tuple) -> np.ndarray:
    """Random records whose codes cover every finite e4m3 code (subnormals, zeros, 448), power-of-two scales
    2^-10 .. 2^-7 (dequantized nope values within +-3.5) and RoPE values uniform in [-1, 1) as bfloat16."""
    codes = rng.integers(0, 256, size=lead + (NOPE_DIMS,), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] &= 0x80  # the NaN codes become (signed) zeros
    scales = np.exp2(rng.integers(-10, -6, size=lead + (NUM_TILES,))).astype(np.float32)
    rope = rng.uniform(-1, 1, size=lead + (ROPE_DIMS,)).astype(np.float32)
    return assemble(codes, scales, rope)
