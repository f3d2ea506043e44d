"""The dtypes the sandbox speaks, by name, with the NumPy types ml_dtypes provides.

query:        float32 | float16 | bfloat16
key/value:    the query's dtype, or an fp8 format (float8_e4m3fn | float8_e5m2) with any query dtype
output:       the query's dtype
"""
from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with NumPy)
import numpy as np

QUERY_DTYPES = ("float32", "float16", "bfloat16")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
# Largest finite value of each fp8 format: what a saturating cache write clips to.
FP8_MAX_FINITE = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}

# Short names used on the command line and in shape strings (64x4096x32/8x128xbf16:e4m3).
ALIASES = {
    "fp32": "float32", "float32": "float32", "f32": "float32",
    "fp16": "float16", "float16": "float16", "half": "float16", "f16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "e4m3": "float8_e4m3fn", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
}
SHORT_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def canonical(name) -> str:
    """'bf16' -> 'bfloat16', np.float16 -> 'float16'; ValueError listing the known names otherwise."""
    if not isinstance(name, str):
        name = np.dtype(name).name
    key = name.lower()
    if key not in ALIASES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(ALIASES))}")
    return ALIASES[key]


def dtype(name) -> np.dtype:
    """The NumPy dtype for a name or alias ('bf16', 'e4m3', 'float16', ...)."""
    return np.dtype(canonical(name))


def is_fp8(dt) -> bool:
    return np.dtype(dt).name in FP8_DTYPES


def short(dt) -> str:
    return SHORT_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)


def quantize_fp8(x: np.ndarray, fp8_dtype, scale: float = 1.0) -> np.ndarray:
    """fp8(clip(x / scale, -max_finite, max_finite)), rounded to nearest even; NaN stays NaN.

    ml_dtypes' own cast does not saturate (448.5 -> NaN in e4m3fn); a serving cache write does.
    """
    name = np.dtype(fp8_dtype).name
    limit = FP8_MAX_FINITE[name]
    scaled = np.asarray(x, dtype=np.float32) / np.float32(scale)
    return np.clip(scaled, -limit, limit).astype(name)  # np.clip keeps NaN
