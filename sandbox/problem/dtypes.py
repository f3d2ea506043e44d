"""The dtypes the sandbox speaks, by name, with the NumPy types ml_dtypes provides.

query:        float32 | float16 | bfloat16
key/value:    the query's dtype, an fp8 format (float8_e4m3fn | float8_e5m2) or "nvfp4" (packed uint8
              e2m1 codes with e4m3 block scales, reference/formats.py) with any query dtype
output:       the query's dtype
A cache's format (kv_format) is its dtype's name, or "nvfp4" for a uint8 cache.
"""
from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with NumPy)
import numpy as np

QUERY_DTYPES = ("float32", "float16", "bfloat16")
# The query dtypes a variant takes unless its Limits say more (NumPy's own; bfloat16 comes from ml_dtypes).
BASE_DTYPES = ("float32", "float16")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
NVFP4 = "nvfp4"
# Cache formats besides the query's dtype (Limits.kv_dtypes names the ones a variant takes).
KV_FORMATS = FP8_DTYPES + (NVFP4,)
# Largest finite value of each fp8 format: what a saturating cache write clips to.
FP8_MAX_FINITE = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# Largest magnitude an NVFP4 element reaches before its per-tensor scale: e2m1's 6 times e4m3's 448.
NVFP4_MAX = 6.0 * 448.0

# Short names used on the command line and in shape strings (64x4096x32/8x128xbf16:e4m3).
ALIASES = {
    "fp32": "float32", "float32": "float32", "f32": "float32",
    "fp16": "float16", "float16": "float16", "half": "float16", "f16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "e4m3": "float8_e4m3fn", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
    "nvfp4": NVFP4, "fp4": NVFP4,
}
SHORT_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
               NVFP4: NVFP4}


def canonical(name) -> str:
    """'bf16' -> 'bfloat16', np.float16 -> 'float16'; ValueError listing the known names otherwise."""
    if not isinstance(name, str):
        name = np.dtype(name).name
    key = name.lower()
    if key not in ALIASES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(ALIASES))}")
    return ALIASES[key]


def dtype(name) -> np.dtype:
    """The NumPy dtype for a name or alias ('bf16', 'e4m3', 'float16', ...); "nvfp4" is stored as uint8."""
    name = canonical(name)
    return np.dtype(np.uint8) if name == NVFP4 else np.dtype(name)


def kv_format(cache_dtype) -> str:
    """A cache's format from its dtype: the dtype's name, or "nvfp4" for packed uint8."""
    dt = np.dtype(cache_dtype)
    return NVFP4 if dt == np.uint8 else dt.name


def is_fp8(dt) -> bool:
    return np.dtype(dt).name in FP8_DTYPES


def is_quantized(kv_format_name: str) -> bool:
    """Whether a cache of this format stores codes that its scales dequantize (fp8, nvfp4)."""
    return kv_format_name in KV_FORMATS


def short(dt) -> str:
    return SHORT_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)


def default_kv_scale(format_name) -> float:
    """The per-tensor scale a problem gets by default beside a cache of `kv_format` (a format name or None):
    1 / max finite for fp8 and 1 / (6 * 448) for nvfp4, so that dequantized values span about [-1, 1]; 1.0
    otherwise."""
    if format_name == NVFP4:
        return 1.0 / NVFP4_MAX
    return 1.0 / FP8_MAX_FINITE[format_name] if format_name in FP8_MAX_FINITE else 1.0


def quantize_fp8(x: np.ndarray, fp8_dtype, scale: float = 1.0) -> np.ndarray:
    """fp8(clip(x / scale, -max_finite, max_finite)), rounded to nearest even; NaN stays NaN.

    ml_dtypes' own cast does not saturate (448.5 -> NaN in e4m3fn); a serving cache write does.
    """
    name = np.dtype(fp8_dtype).name
    limit = FP8_MAX_FINITE[name]
    scaled = np.asarray(x, dtype=np.float32) / np.float32(scale)
    return np.clip(scaled, -limit, limit).astype(name)  # np.clip keeps NaN
