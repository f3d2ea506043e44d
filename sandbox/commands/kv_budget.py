"""The KV budget options shared by `memory` and `serving`: tokens directly, or GB of a model shape."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

DEFAULT_MODEL_GB = 12.0
# Bytes per KV element of each cache dtype (an fp8 cache's per-tensor scales are a few bytes per layer).
# NVFP4: half a byte of e2m1 code plus one e4m3 block scale per 16 values, 9/16 of a byte.
KV_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1, "nvfp4": 0.5625}


@dataclass(frozen=True)
class KVBudget:
    tokens: int               # KV slots in the budget
    note: str                 # how it was derived, for the summary line
    bytes_per_token: int      # K and V of every layer, for the cost model and swap traffic
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: float        # bytes per KV element (0.5625 for NVFP4: codes and block scales)


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-tokens", type=int, metavar="N", help="KV budget in tokens")
    budget.add_argument("--model-gb", type=float, metavar="GB",
                        help=f"KV budget in GB (1e9 bytes) for the model shape below (default {DEFAULT_MODEL_GB:g})")
    parser.add_argument("--num-layers", type=int, default=40, help="model layers (default 40, a 13B model)")
    parser.add_argument("--num-kv-heads", type=int, default=40, help="KV heads per layer (default 40)")
    parser.add_argument("--head-dim", type=int, default=128, help="head dimension (default 128)")
    element = parser.add_mutually_exclusive_group()
    element.add_argument("--dtype-bytes", type=int, default=None, help="bytes per KV element (default 2)")
    element.add_argument("--kv-dtype", choices=sorted(KV_DTYPE_BYTES), default=None,
                         help="KV cache dtype, sets the bytes per element: fp16/bf16 2, e4m3/e5m2 (fp8) 1, fp32 4, "
                              "nvfp4 9/16 (e2m1 codes and an e4m3 scale per 16 values); an fp8 cache holds twice the "
                              "tokens of float16 in the same bytes, NVFP4 3.6 times")


def budget_from_args(args: argparse.Namespace) -> KVBudget:
    """The budget the arguments describe; ValueError naming the option on a bad value."""
    kv_dtype = getattr(args, "kv_dtype", None)
    dtype_bytes = KV_DTYPE_BYTES[kv_dtype] if kv_dtype is not None else (args.dtype_bytes or 2)
    if kv_dtype is None and args.dtype_bytes is not None and args.dtype_bytes < 1:
        raise ValueError(f"--dtype-bytes must be >= 1, got {args.dtype_bytes}")
    for name in ("num_layers", "num_kv_heads", "head_dim"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if kv_dtype == "nvfp4" and args.head_dim % 16:
        raise ValueError(f"--kv-dtype nvfp4 needs --head-dim a multiple of 16 (one scale per 16 values), "
                         f"got {args.head_dim}")
    per_token = math.ceil(2 * args.num_layers * args.num_kv_heads * args.head_dim * dtype_bytes)
    if args.budget_tokens is not None:
        if args.budget_tokens < 1:
            raise ValueError(f"--budget-tokens must be >= 1, got {args.budget_tokens}")
        tokens, note = args.budget_tokens, ""
    else:
        gb = DEFAULT_MODEL_GB if args.model_gb is None else args.model_gb
        if not (math.isfinite(gb) and gb > 0):
            raise ValueError(f"--model-gb must be a finite number > 0, got {gb}")
        tokens = int(gb * 1e9 // per_token)
        kv = f", {kv_dtype} cache" if kv_dtype else ""
        note = f" = {gb:g} GB at {per_token:,} bytes/token{kv}"
    return KVBudget(tokens, note, per_token, args.num_layers, args.num_kv_heads, args.head_dim, dtype_bytes)
