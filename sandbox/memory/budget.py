"""The model shape and the KV budget: what the memory study and the serving simulator both size memory by.

    ModelShape     layers, KV heads, head dim, bytes per KV element, parameters (the cost model's view)
    KVBudget       KV slots in the budget, how they were derived, and the shape they hold
    kv_budget(...) -> KVBudget     tokens given directly, or GB of memory at the shape's bytes per token
    MODELS         the vLLM paper's three OPT models (Table 1): shape, GPUs (tensor parallelism), KV memory

The commands' flags (``sandbox/commands/kv_budget.py``) only parse; every rule lives here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sandbox.errors import RefusedRequest

DEFAULT_MODEL_GB = 12.0
# Bytes per KV element of each cache dtype (an fp8 cache's per-tensor scales are a few bytes per layer).
# NVFP4: half a byte of e2m1 code plus one e4m3 block scale per 16 values, 9/16 of a byte.
KV_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1, "nvfp4": 0.5625}
# The simulators hold Python state per block (free list, reference counts, hashes) and per token id: a budget
# beyond this many slots would need gigabytes before the first step, so it is refused up front.
MAX_BUDGET_TOKENS = 10**8


@dataclass(frozen=True)
class ModelShape:
    """What the cost model needs of the model: its KV bytes per token, its parameter count, and the GPUs it is
    split over by tensor parallelism (each holds 1/tensor_parallel of the weights and of every layer's heads)."""
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: float
    params: float = 13e9
    tensor_parallel: int = 1

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes


@dataclass(frozen=True)
class ModelPreset:
    """One model of the vLLM paper's Table 1 (OPT; hidden size = heads x 128)."""
    name: str
    num_layers: int
    num_heads: int
    params: float
    tensor_parallel: int
    kv_gib: float             # the paper's "memory for KV cache" (GiB: 12 GiB / 819,200 bytes = its 15.7K slots)
    gpus: str


MODELS = {
    "13b": ModelPreset("OPT-13B", 40, 40, 13e9, 1, 12, "1 x A100-40GB"),
    "66b": ModelPreset("OPT-66B", 64, 72, 66e9, 4, 21, "4 x A100-40GB"),
    "175b": ModelPreset("OPT-175B", 96, 96, 175e9, 8, 264, "8 x A100-80GB"),
}


@dataclass(frozen=True)
class KVBudget:
    tokens: int               # KV slots in the budget
    note: str                 # how it was derived, for the summary line
    bytes_per_token: int      # K and V of every layer, for the cost model and swap traffic
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: float        # bytes per KV element (0.5625 for NVFP4: codes and block scales)
    params: float | None = None       # a preset's parameter count (None: the caller's)
    tensor_parallel: int = 1

    def shape(self, params: float | None = None) -> ModelShape:
        """The model shape; `params` (when given) overrides the preset's, else 13e9."""
        chosen = params if params is not None else (self.params or 13e9)
        return ModelShape(self.num_layers, self.num_kv_heads, self.head_dim, self.dtype_bytes, chosen,
                          self.tensor_parallel)


def kv_budget(num_layers: int | None = None, num_kv_heads: int | None = None, head_dim: int | None = None,
              dtype_bytes: float | None = None, kv_dtype: str | None = None, budget_tokens: int | None = None,
              model_gb: float | None = None, model: str | None = None) -> KVBudget:
    """The budget these settings describe; RefusedRequest naming the flag on a bad value or an impossible size.

    model: a MODELS key; it sets the shape (given dimensions must agree with it or be None), the tensor
    parallelism and, unless a budget is given, the paper's KV memory. Without it: 40 x 40 x 128, 12 GB."""
    preset = None
    if model is not None:
        if model not in MODELS:
            raise RefusedRequest(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
        preset = MODELS[model]
        for flag, given in (("--num-layers", num_layers), ("--num-kv-heads", num_kv_heads), ("--head-dim", head_dim)):
            if given is not None:
                raise RefusedRequest(f"{flag} and --model {model} both set the model's shape: give one")
        num_layers, num_kv_heads, head_dim = preset.num_layers, preset.num_heads, 128
    num_layers = 40 if num_layers is None else num_layers
    num_kv_heads = 40 if num_kv_heads is None else num_kv_heads
    head_dim = 128 if head_dim is None else head_dim
    if kv_dtype is not None and kv_dtype not in KV_DTYPE_BYTES:
        raise RefusedRequest(f"--kv-dtype must be one of {', '.join(sorted(KV_DTYPE_BYTES))}, got {kv_dtype!r}")
    if kv_dtype is None and dtype_bytes is not None and dtype_bytes < 1:
        raise RefusedRequest(f"--dtype-bytes must be >= 1, got {dtype_bytes}")
    element = KV_DTYPE_BYTES[kv_dtype] if kv_dtype is not None else (dtype_bytes or 2)
    for flag, value in (("--num-layers", num_layers), ("--num-kv-heads", num_kv_heads), ("--head-dim", head_dim)):
        if value < 1:
            raise RefusedRequest(f"{flag} must be >= 1, got {value}")
    if kv_dtype == "nvfp4" and head_dim % 16:
        raise RefusedRequest(f"--kv-dtype nvfp4 needs --head-dim a multiple of 16 (one scale per 16 values), "
                             f"got {head_dim}")
    per_token = math.ceil(2 * num_layers * num_kv_heads * head_dim * element)
    if budget_tokens is not None:
        if budget_tokens < 1:
            raise RefusedRequest(f"--budget-tokens must be >= 1, got {budget_tokens}")
        tokens, note, flag = budget_tokens, "", "--budget-tokens"
    elif preset is not None and model_gb is None:
        tokens = int(preset.kv_gib * 2**30 // per_token)
        note, flag = (f" = {preset.name}'s {preset.kv_gib:g} GiB on {preset.gpus} (the paper's Table 1) at "
                      f"{per_token:,} bytes/token"), "--model"
    else:
        gb = DEFAULT_MODEL_GB if model_gb is None else model_gb
        if not (math.isfinite(gb) and gb > 0):
            raise RefusedRequest(f"--model-gb must be a finite number > 0, got {gb}")
        tokens = int(gb * 1e9 // per_token)
        kv = f", {kv_dtype} cache" if kv_dtype else ""
        note, flag = f" = {gb:g} GB at {per_token:,} bytes/token{kv}", "--model-gb"
    if tokens > MAX_BUDGET_TOKENS:
        raise RefusedRequest(f"{flag}: a KV budget of {tokens:,} tokens is more than the simulators hold "
                             f"({MAX_BUDGET_TOKENS:,} tokens: Python state per block and token would need gigabytes "
                             "before the first step)")
    return KVBudget(tokens, note, per_token, num_layers, num_kv_heads, head_dim, element,
                    preset.params if preset else None, preset.tensor_parallel if preset else 1)
