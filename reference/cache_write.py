"""The reference cache write: new tokens' K/V stored at their slots, quantized the way serving engines do.

A cache of the inputs' dtype stores them as they are. fp8 (per tensor): fp8(clip(x / scale, +-max_finite)),
round to nearest even, NaN stays NaN. fp8 per token and head (k_scales given): the writer chooses each
scale = amax / max_finite of the token's finite values for that KV head (1.0 for a row of zeros) and stores
it beside the row. NVFP4 (a uint8 cache, with block scales): formats.quantize_nvfp4 with the per-tensor scale.
"""
from __future__ import annotations

import numpy as np

from .formats import FP8_MAX_FINITE, is_nvfp4, quantize_nvfp4


def _fp8(x: np.ndarray, dtype: np.dtype, scale) -> np.ndarray:
    limit = FP8_MAX_FINITE[dtype.name]
    scale = np.asarray(scale, dtype=np.float32)
    return np.clip(x.astype(np.float32) / scale, -limit, limit).astype(dtype)


def _token_scales(x: np.ndarray, limit: float) -> np.ndarray:
    """float32 [num_kv_heads]: amax of each head's finite values / max finite (1.0 where the amax is 0)."""
    amax = np.where(np.isfinite(x), np.abs(x.astype(np.float32)), 0).max(axis=-1)
    return np.where(amax > 0, amax / np.float32(limit), 1.0).astype(np.float32)


def _store(cache, index, x, scale, token_scales, block_scales) -> None:
    if is_nvfp4(cache):
        cache[index], block_scales[index] = quantize_nvfp4(x, scale)
    elif cache.dtype.name not in FP8_MAX_FINITE:
        cache[index] = x
    elif token_scales is not None:
        token_scales[index] = _token_scales(x, FP8_MAX_FINITE[cache.dtype.name])
        cache[index] = _fp8(x, cache.dtype, token_scales[index][:, None])
    else:
        cache[index] = _fp8(x, cache.dtype, scale)


def write_cache(key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0, *, k_scales=None,
                v_scales=None, k_block_scales=None, v_block_scales=None) -> None:
    """Store new tokens' K/V in place: token i goes to slot slot_mapping[i]; slot < 0 is skipped.

    key/value [num_tokens, num_kv_heads, head_dim]; slot = block * block_size + offset. k_scales/v_scales
    float32 [num_blocks, block_size, num_kv_heads] (fp8 caches): written with each token's scales.
    k_block_scales/v_block_scales float8_e4m3fn [num_blocks, block_size, num_kv_heads, head_dim // 16]
    (NVFP4 caches, uint8 [num_blocks, block_size, num_kv_heads, head_dim // 2]): written with the codes.
    """
    block_size = key_cache.shape[1]
    for i, slot in enumerate(slot_mapping):
        slot = int(slot)
        if slot < 0:
            continue
        index = (slot // block_size, slot % block_size)
        _store(key_cache, index, key[i], k_scale, k_scales, k_block_scales)
        _store(value_cache, index, value[i], v_scale, v_scales, v_block_scales)
