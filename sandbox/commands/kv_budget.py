"""The KV budget flags shared by `memory` and `serving`: tokens directly, or GB of a model shape.

Parsing only; the rules and the budget itself are ``sandbox.memory.budget``.
"""
from __future__ import annotations

import argparse

from sandbox.commands import numbers
from sandbox.memory.budget import DEFAULT_MODEL_GB, KV_DTYPE_BYTES, MAX_BUDGET_TOKENS, MODELS, KVBudget, kv_budget

__all__ = ["KVBudget", "add_budget_arguments", "budget_from_args"]


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-tokens", type=numbers.integer(1, MAX_BUDGET_TOKENS), metavar="N",
                        help="KV budget in tokens")
    budget.add_argument("--model-gb", type=numbers.real(0, 1e6, low_open=True), metavar="GB",
                        help=f"KV budget in GB (1e9 bytes) for the model shape below (default {DEFAULT_MODEL_GB:g})")
    parser.add_argument("--model", choices=MODELS, help="the vLLM paper's models (Table 1): "
                        + "; ".join(f"{k}: {m.name}, {m.num_layers} layers x {m.num_heads} heads, {m.gpus} (tensor "
                                    f"parallel {m.tensor_parallel}), {m.kv_gib:g} GiB of KV" for k, m in MODELS.items())
                        + " (sets the shape, the parameters and the budget unless one is given)")
    parser.add_argument("--num-layers", type=numbers.integer(1, 1000), help="model layers (default 40, a 13B model)")
    parser.add_argument("--num-kv-heads", type=numbers.integer(1, 1024), help="KV heads per layer (default 40)")
    parser.add_argument("--head-dim", type=numbers.integer(1, 4096), help="head dimension (default 128)")
    element = parser.add_mutually_exclusive_group()
    element.add_argument("--dtype-bytes", type=numbers.integer(1, 16), default=None,
                         help="bytes per KV element (default 2)")
    element.add_argument("--kv-dtype", choices=sorted(KV_DTYPE_BYTES), default=None,
                         help="KV cache dtype, sets the bytes per element: fp16/bf16 2, e4m3/e5m2 (fp8) 1, fp32 4, "
                              "nvfp4 9/16 (e2m1 codes and an e4m3 scale per 16 values); an fp8 cache holds twice the "
                              "tokens of float16 in the same bytes, NVFP4 3.6 times")


def budget_from_args(args: argparse.Namespace) -> KVBudget:
    """The budget the arguments describe; RefusedRequest naming the flag on a bad value."""
    return kv_budget(args.num_layers, args.num_kv_heads, args.head_dim, args.dtype_bytes,
                     getattr(args, "kv_dtype", None), args.budget_tokens, args.model_gb, args.model)
