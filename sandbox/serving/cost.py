"""Step time: how long one scheduler step (a batch of decode tokens and prefill chunks) takes on the GPU.

A source is a ``StepCostModel``: ``step_time(batch) = linear_time + decode_time + prefill_time``
(seconds) and a ``source`` string printed with the results. Sources (``SOURCES``, chosen by
``--step-cost``):

- ``analytic`` (default, ``AnalyticCost``): a roofline of the device table's H200
  (``sandbox.analysis.gpus``: its DRAM bandwidth at ``HBM_EFFICIENCY``, its dense tensor-core rate at
  ``FLOPS_EFFICIENCY``).
  linear_time  = max(fixed, 2 * params * tokens / flops) + overhead: the rest of the model, once per step.
                 ``fixed`` is streaming the weights (params * 2 bytes / bandwidth, 6.8 ms for 13B) unless
                 ``--fixed-ms`` sets it; tokens = decode tokens + prefill tokens; ``overhead`` is the
                 stated per-step scheduling cost (``--step-overhead-ms``, default 0: overlapped).
  decode_time  = (context tokens read + tokens written) * KV bytes per token / bandwidth: every decode
                 sequence reads the K and V of its whole context in every layer.
  prefill_time = 4 * d_model * layers * attended / flops + prefill tokens * KV bytes per token / bandwidth,
                 attended = sum over prefill tokens of the tokens each attends to (causal), d_model =
                 kv heads * head dim (one query head per KV head, as OPT-13B).
  Tensor parallelism over T GPUs (``ModelShape.tensor_parallel``, the paper's 66B and 175B): every GPU
  streams 1/T of the weights and of the KV at the same rate, so bandwidth and FLOP/s are T times one GPU's;
  the stated cost is two all-reduces per layer (attention and MLP outputs, as Megatron-LM splits a layer),
  each ``ALLREDUCE_LATENCY_S`` plus a ring's 2 (T - 1) / T x tokens x hidden x 2 bytes at ``LINK_BYTES_PER_S``.
  Not modelled here: the paging overhead of the attention kernel (the same bytes for every block size;
  ``kernel_time.KernelTimeCost``, ``--kernel``, adds it from the traffic model).
- ``sweep:RUN`` (``SweepCost``): decode attention from a GPU sweep's ``RUN/sweep.csv``: per block size,
  a least-squares line time_us = a + b * bytes over the fastest correct variant at each shape
  (decode rows, no options), applied per layer; the rest as ``analytic``. A run whose rows are CPU
  emulation is refused: those times are a simulator's, not a GPU's.

- ``model[:VARIANTS]`` (``cost_model.ModelCost``): decode attention from the performance model
  (``sandbox.analysis.model``): per batch shape, the modelled time of the fastest of the CUDA C variants
  (comma-separated names; default ``cost_model.DEFAULT_VARIANTS``), from traffic counted on the CPU
  executor on small unit problems and scaled to the batch; the rest as ``analytic``.

Adding a source: a class that satisfies ``StepCostModel`` (subclass ``AnalyticCost`` and override what it
models, as ``SweepCost`` overrides ``decode_time``), and one entry in ``cost_sources.SOURCES``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from sandbox.analysis import gpus
from sandbox.memory.budget import ModelShape

DEVICE = "h200"
HBM_EFFICIENCY = 0.8      # a well-tuned streaming kernel reaches 80-90% of the DRAM peak
FLOPS_EFFICIENCY = 0.6
WEIGHT_BYTES_PER_PARAM = 2
# Tensor parallelism's stated cost (no field of the device table holds a GPU-to-GPU link yet):
ALLREDUCE_LATENCY_S = 10e-6   # assumption: NCCL's small-message all-reduce latency on NVLink is 10-20 us
LINK_BYTES_PER_S = 450e9      # NVIDIA H200 datasheet: NVLink 900 GB/s, both directions together


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
    """The documented roofline of the device table's H200; see the module docstring."""

    def __init__(self, shape: ModelShape, fixed_ms: float | None = None, overhead_ms: float = 0.0):
        self.shape = shape
        self.gpu = gpus.get(DEVICE)
        self.kv_bytes = shape.kv_bytes_per_token
        self.tp = shape.tensor_parallel
        self.bandwidth = self.gpu.dram_bytes_per_s * HBM_EFFICIENCY * self.tp
        self.flops = self.gpu.tensor_flops_per_s * FLOPS_EFFICIENCY * self.tp
        weights_s = shape.params * WEIGHT_BYTES_PER_PARAM / self.bandwidth
        self.fixed = weights_s if fixed_ms is None else fixed_ms / 1e3
        self.overhead = overhead_ms / 1e3
        self.source = (f"analytic {self.gpu.name} roofline: HBM {self.gpu.dram_bytes_per_s / 1e12:g} TB/s x "
                       f"{HBM_EFFICIENCY:g}, {self.gpu.tensor_flops_per_s / 1e12:g} TFLOP/s x {FLOPS_EFFICIENCY:g}, "
                       f"fixed {1e3 * self.fixed:.2f} ms/step "
                       + ("(--fixed-ms)" if fixed_ms is not None else
                          f"(streaming {shape.params / 1e9:g}B params x {WEIGHT_BYTES_PER_PARAM} bytes)")
                       + f" + {overhead_ms:g} ms scheduling"
                       + (f"; tensor parallel over {self.tp} GPUs (2 all-reduces per layer: "
                          f"{1e6 * ALLREDUCE_LATENCY_S:g} us + bytes at {LINK_BYTES_PER_S / 1e9:g} GB/s)"
                          if self.tp > 1 else ""))

    def communication_time(self, tokens: int) -> float:
        """Tensor parallelism's all-reduces for one step of `tokens` tokens (0 on one GPU)."""
        if self.tp == 1:
            return 0.0
        s = self.shape
        ring = 2 * (self.tp - 1) / self.tp * tokens * s.num_kv_heads * s.head_dim * WEIGHT_BYTES_PER_PARAM
        return 2 * s.num_layers * (ALLREDUCE_LATENCY_S + ring / LINK_BYTES_PER_S)

    def linear_time(self, b: StepBatch) -> float:
        tokens = b.decode_tokens + b.prefill_tokens
        compute = 2.0 * self.shape.params * tokens / self.flops
        return max(self.fixed, compute) + self.overhead + self.communication_time(tokens)

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


@dataclass(frozen=True)
class SwapCost:
    """Moving KV blocks between GPU and host memory (preemption by swap).

    Per block: ``copies`` transfers, each paying ``latency_s`` (vLLM's cache engine issues one
    ``cudaMemcpyAsync`` per block for the K and for the V cache of every layer: 2 x layers copies), plus the
    block's bytes at ``bytes_per_s`` (the host link, each way). The default latency is the device table's
    launch cost (``sandbox.analysis.gpus``, an assumption there): a copy costs at least what a launch does."""
    bytes_per_token: float
    bytes_per_s: float
    latency_s: float
    copies: int

    def seconds(self, blocks: int, block_size: int) -> float:
        """Seconds to move `blocks` blocks of `block_size` tokens one way."""
        return blocks * (self.copies * self.latency_s + block_size * self.bytes_per_token / self.bytes_per_s)

    def describe(self) -> str:
        return (f"{self.bytes_per_s / 1e9:g} GB/s each way + {self.copies} copies x {1e6 * self.latency_s:g} us "
                "per block")


def default_swap_latency_s() -> float:
    """Per-copy latency of a swap transfer: the device table's kernel launch cost (see SwapCost)."""
    return gpus.get(DEVICE).launch_s
