"""Cache formats the reference reads and writes exactly: fp8 (e4m3fn, e5m2) and NVFP4.

NVFP4 (NVIDIA's 4-bit float cache): a row of head_dim values is stored as uint8 [head_dim // 2], two e2m1
codes per byte (element 2i in the low nibble, 2i+1 in the high one, as cuda_fp4.h packs them), with one
float8_e4m3fn block scale per 16 values ([head_dim // 16]) and one float32 per-tensor scale:
    value = e2m1(code) * float(block scale) * tensor scale.
e2m1 has the 16 codes of ml_dtypes.float4_e2m1fn: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (8..15).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

NVFP4 = "nvfp4"
NVFP4_GROUP = 16               # values per e4m3 block scale
E2M1_MAX = 6.0
E4M3_MAX = 448.0
FP8_MAX_FINITE = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
E2M1_VALUES = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)  # code -> value


def is_nvfp4(cache: np.ndarray) -> bool:
    """An NVFP4 cache is packed uint8 (its block scales travel beside it)."""
    return cache.dtype == np.uint8


def unpack_e2m1(packed: np.ndarray) -> np.ndarray:
    """uint8 [..., n] -> float64 [..., 2n]: element 2i from the low nibble of byte i, 2i+1 from the high one."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[:-1] + (2 * packed.shape[-1],))
    return E2M1_VALUES[codes]


def dequantize_nvfp4(packed: np.ndarray, block_scales: np.ndarray, tensor_scale: float) -> np.ndarray:
    """float64 [..., head_dim] from packed codes [..., head_dim // 2] and e4m3 block scales [..., head_dim // 16]."""
    scales = np.repeat(np.asarray(block_scales).astype(np.float64), NVFP4_GROUP, axis=-1)
    return unpack_e2m1(packed) * scales * float(tensor_scale)


def quantize_nvfp4(x: np.ndarray, tensor_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(packed uint8 [..., head_dim // 2], block scales float8_e4m3fn [..., head_dim // 16]) of x [..., head_dim].

    Per group of 16: y = x / tensor_scale; block scale = e4m3(amax / 6) of the group's largest finite |y|
    (round to nearest even, saturating at 448); code = e2m1(y / block scale), round to nearest even,
    saturating at +-6 (inf too); a group whose scale is 0 stores zeros; NaN becomes ml_dtypes' e2m1 code
    8 (-0: e2m1 has no NaN).
    """
    y = np.asarray(x, dtype=np.float32) / np.float32(tensor_scale)
    groups = y.reshape(y.shape[:-1] + (y.shape[-1] // NVFP4_GROUP, NVFP4_GROUP))
    finite = np.where(np.isfinite(groups), np.abs(groups), 0.0)
    amax = finite.max(axis=-1)
    scales = np.clip(amax / np.float32(E2M1_MAX), 0, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    s = scales.astype(np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(s > 0, groups / np.where(s > 0, s, 1), 0.0)
    codes = np.clip(scaled, -E2M1_MAX, E2M1_MAX).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(y.shape)
    packed = (codes[..., 0::2] & 0x0F) | ((codes[..., 1::2] & 0x0F) << 4)
    return packed.astype(np.uint8), scales
