"""Step time: how long one scheduler step (a batch of decode tokens and prefill chunks) takes on the GPU.

A source is a ``StepCostModel``: ``step_time(batch) = linear_time + decode_time + prefill_time``
(seconds) and a ``source`` string printed with the results. Sources (``SOURCES``, chosen by
``--step-cost``):

- ``analytic`` (default, ``AnalyticCost``): an H200 roofline. HBM3e 4.8 TB/s at ``HBM_EFFICIENCY``,
  dense BF16 989 TFLOP/s at ``FLOPS_EFFICIENCY``.
  linear_time  = max(fixed, 2 * params * tokens / flops): the rest of the model, once per step. ``fixed``
                 is streaming the weights (params * 2 bytes / bandwidth, 6.8 ms for 13B) unless
                 ``--fixed-ms`` sets it; tokens = decode tokens + prefill tokens.
  decode_time  = (context tokens read + tokens written) * KV bytes per token / bandwidth: every decode
                 sequence reads the K and V of its whole context in every layer.
  prefill_time = 4 * d_model * layers * attended / flops + prefill tokens * KV bytes per token / bandwidth,
                 attended = sum over prefill tokens of the tokens each attends to (causal), d_model =
                 kv heads * head dim (one query head per KV head, as OPT-13B).
  Not modelled: kernel launch and CPU scheduling overhead (assumed overlapped), paging overhead of
  the attention kernel (the same bytes for every block size), tensor-parallel communication.
- ``sweep:RUN`` (``SweepCost``): decode attention from a GPU sweep's ``RUN/sweep.csv``: per block size,
  a least-squares line time_us = a + b * bytes over the fastest correct variant at each shape
  (decode rows, no options), applied per layer; the rest as ``analytic``. A run whose rows are CPU
  emulation is refused: those times are a simulator's, not a GPU's.

- ``model[:VARIANTS]`` (``cost_model.ModelCost``): decode attention from the performance model
  (``sandbox.analysis.model``): per batch shape, the modelled time of the fastest of the CUDA C variants
  (comma-separated names; default ``cost_model.DEFAULT_VARIANTS``), from traffic counted on the CPU
  executor on small unit problems and scaled to the batch; the rest as ``analytic``.

Adding a source: a class that
satisfies ``StepCostModel`` (subclass ``AnalyticCost`` and override what it models, as ``SweepCost``
overrides ``decode_time``), and one entry in ``SOURCES`` mapping the ``--step-cost`` word to a factory
``(argument, shape, fixed_ms) -> model``; a factory may raise ValueError to refuse its argument.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

HBM_BYTES_PER_S = 4.8e12
HBM_EFFICIENCY = 0.8
FLOPS_PER_S = 989e12
FLOPS_EFFICIENCY = 0.6
WEIGHT_BYTES_PER_PARAM = 2


@dataclass(frozen=True)
class ModelShape:
    """What the cost model needs of the model: its KV bytes per token and its parameter count."""
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    params: float = 13e9

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes


class StepBatch(NamedTuple):
    """One step's work. Counts are tokens; every field is a sum over the step's sequences."""
    decode_tokens: int = 0         # decode sequences (one new token each)
    decode_context: int = 0        # sum of their context lengths, the new token included
    prefill_tokens: int = 0        # prompt tokens computed this step (chunked prefill)
    prefill_attended: int = 0      # sum over those tokens of the positions each attends to
    block_size: int = 0            # 0 for a contiguous layout


class StepCostModel(Protocol):
    """What the engine asks of a step-time source (all times in seconds)."""
    source: str                                         # printed with the results

    def linear_time(self, batch: StepBatch) -> float: ...       # everything but attention
    def decode_time(self, batch: StepBatch) -> float: ...       # attention of the decode tokens
    def prefill_time(self, batch: StepBatch) -> float: ...      # attention of the prefill chunks
    def step_time(self, batch: StepBatch) -> float: ...         # the three summed
    def prefill_token_time(self) -> float: ...                  # marginal cost of one prefill token


class AnalyticCost:
    """The documented H200 roofline; see the module docstring."""

    def __init__(self, shape: ModelShape, fixed_ms: float | None = None):
        self.shape = shape
        self.kv_bytes = shape.kv_bytes_per_token
        self.bandwidth = HBM_BYTES_PER_S * HBM_EFFICIENCY
        self.flops = FLOPS_PER_S * FLOPS_EFFICIENCY
        weights_s = shape.params * WEIGHT_BYTES_PER_PARAM / self.bandwidth
        self.fixed = weights_s if fixed_ms is None else fixed_ms / 1e3
        self.source = (f"analytic H200 roofline: HBM {HBM_BYTES_PER_S / 1e12:g} TB/s x {HBM_EFFICIENCY:g}, "
                       f"{FLOPS_PER_S / 1e12:g} TFLOP/s x {FLOPS_EFFICIENCY:g}, fixed {1e3 * self.fixed:.2f} ms/step "
                       + ("(--fixed-ms)" if fixed_ms is not None else
                          f"(streaming {shape.params / 1e9:g}B params x {WEIGHT_BYTES_PER_PARAM} bytes)"))

    def linear_time(self, b: StepBatch) -> float:
        return max(self.fixed, 2.0 * self.shape.params * (b.decode_tokens + b.prefill_tokens) / self.flops)

    def decode_time(self, b: StepBatch) -> float:
        return (b.decode_context + b.decode_tokens) * self.kv_bytes / self.bandwidth

    def prefill_time(self, b: StepBatch) -> float:
        if not b.prefill_tokens:
            return 0.0
        s = self.shape
        attention = 4.0 * s.num_kv_heads * s.head_dim * s.num_layers * b.prefill_attended / self.flops
        return attention + b.prefill_tokens * self.kv_bytes / self.bandwidth

    def step_time(self, b: StepBatch) -> float:
        return self.linear_time(b) + self.decode_time(b) + self.prefill_time(b)

    def prefill_token_time(self) -> float:
        """Marginal seconds of one more prefill token (for the recompute cost estimate)."""
        return max(2.0 * self.shape.params / self.flops, 0.0) + self.shape.kv_bytes_per_token / self.bandwidth


def make_cost_model(spec: str, shape: ModelShape, fixed_ms: float | None = None) -> StepCostModel:
    """``analytic``, ``sweep:RUN_DIR`` or ``model[:VARIANTS]`` (SOURCES) -> a cost model; ValueError otherwise."""
    word, _, argument = spec.partition(":")
    if word not in SOURCES:
        raise ValueError(f"--step-cost {spec!r}: unknown source {word!r}; choose one of "
                         + ", ".join(w + {"sweep": ":RUN_DIR", "model": "[:VARIANTS]"}.get(w, "") for w in SOURCES))
    return SOURCES[word](argument, shape, fixed_ms)


def _analytic(argument: str, shape: ModelShape, fixed_ms):
    if argument:
        raise ValueError(f"--step-cost analytic takes no argument, got {argument!r}")
    return AnalyticCost(shape, fixed_ms)


def _model(argument: str, shape: ModelShape, fixed_ms):
    from sandbox.serving.cost_model import ModelCost

    return ModelCost(argument, shape, fixed_ms)


def _sweep(argument: str, shape: ModelShape, fixed_ms):
    from sandbox.serving.cost_sweep import SweepCost

    if not argument:
        raise ValueError("--step-cost sweep needs a run folder: sweep:results/<run>")
    return SweepCost(argument, shape, fixed_ms)


# --step-cost word -> factory(argument, shape, fixed_ms).
SOURCES = {"analytic": _analytic, "sweep": _sweep, "model": _model}
