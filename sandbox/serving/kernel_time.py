"""Attention time by block size from the sandbox's own traffic model of named variants (``serving --kernel``).

The roofline (``cost.AnalyticCost``) charges the same bytes at every block size. Paging is not free: a small
block means more block-table reads, shorter runs of contiguous loads and more per-block work in the kernel.
``KernelTable`` asks ``sandbox.traffic(variant, problem)["model"]["time_us"]`` (traffic counted on the CPU
executor, time from the performance model on the device table's H200) once per run for each block size
and context point, on a unit problem of ``UNIT_SEQS`` sequences x ``UNIT_HEADS`` heads of the model's head
dim and KV dtype, every sequence at that context:

    ratio(bs, c) = min over variants of time(v, bs, c) / min over variants of time(v, REFERENCE, c)

interpolated linearly in log(c) between ``CONTEXT_POINTS`` (clamped at both ends). ``KernelTimeCost``
multiplies the roofline's attention terms (decode reads, prefill attention) by it: the roofline stands for
the kernel at vLLM's default block size 16, and another block size pays what the model says it costs over
16. A contiguous layout (block size 0) is charged as the largest block size counted (``CONTIGUOUS``, or the
run's largest when a variant refuses it): one long run of addresses, as a kernel without a block table reads.
Assumed: the model's ratio at the unit's shape holds at the batch's shape (both fill the GPU in waves of the
same blocks); the KV written by a step is not paged differently (charged at the roofline).
"""
from __future__ import annotations

import bisect
import math
from typing import Callable

import sandbox
from sandbox.errors import RefusedRequest
from sandbox.problem import DecodeProblem
from sandbox.memory.budget import ModelShape
from sandbox.serving.cost import AnalyticCost, StepBatch

CONTEXT_POINTS = (128, 512, 2048)
UNIT_SEQS, UNIT_HEADS = 8, 16
REFERENCE = 16
CONTIGUOUS = 256
# ``--kernel best``: the candidates, the paged CUDA C variants (cupy.dense reads a contiguous cache), and the
# context at which the model ranks them at block size REFERENCE.
BEST_CANDIDATES = ("cupy.v1", "cupy.v2", "cupy.gqa", "cupy.rows")
BEST_CONTEXT = 512
# KV bytes per element -> (query dtype, cache dtype) of the unit problem.
DTYPES = {4: ("float32", None), 2: ("float16", None), 1: ("float16", "float8_e4m3fn")}


def unit_time_us(name: str, block_size: int, context: int, shape: ModelShape) -> float:
    """Modelled microseconds of `name` on the unit problem, through the public API (sandbox.traffic)."""
    problem = unit_problem(block_size, context, shape.head_dim, shape.kv_dtype_bytes)
    return float(sandbox.traffic(name, problem, sample_seqs=2)["model"]["time_us"])


def best_variant(shape: ModelShape, candidates=BEST_CANDIDATES, context: int = BEST_CONTEXT,
                 time_us: Callable[[str, int, int, ModelShape], float] = unit_time_us) -> str:
    """The candidate the performance model makes fastest on the unit problem at the run's shape (``--kernel best``),
    at block size REFERENCE and ``context`` tokens."""
    if shape.kv_dtype_bytes not in DTYPES:
        raise RefusedRequest(f"--kernel best: a KV element of {shape.kv_dtype_bytes} bytes has no kernel dtype")
    return min(candidates, key=lambda name: time_us(name, REFERENCE, context, shape))


def unit_problem(block_size: int, context: int, head_dim: int, kv_dtype_bytes: float):
    dtype, kv_dtype = DTYPES[kv_dtype_bytes]
    return DecodeProblem.random(seed=0, num_seqs=UNIT_SEQS, num_heads=UNIT_HEADS, num_kv_heads=UNIT_HEADS,
                                head_dim=head_dim, block_size=block_size, context_lens=[context] * UNIT_SEQS,
                                dtype=dtype, kv_dtype=kv_dtype, share_prefix=False)


class KernelTable:
    """Modelled unit times {(variant, block size, context): us}; see the module docstring."""

    def __init__(self, variants: tuple[str, ...], shape: ModelShape, block_sizes, max_len: int,
                 time_us: Callable[[str, int, int, ModelShape], float] = unit_time_us):
        if shape.kv_dtype_bytes not in DTYPES:
            raise RefusedRequest(f"--kernel: a KV element of {shape.kv_dtype_bytes} bytes has no kernel dtype; "
                                 f"supported: {', '.join(map(str, sorted(DTYPES)))} bytes (--dtype-bytes / --kv-dtype)")
        self.variants = variants
        self.contexts = tuple(c for c in CONTEXT_POINTS if c < max_len) + (min(max_len, CONTEXT_POINTS[-1]),)
        self.contexts = tuple(sorted(set(self.contexts)))
        self.times: dict[tuple[str, int, int], float] = {}
        for bs in sorted(set(block_sizes) | {REFERENCE}):
            for name in variants:
                for c in self.contexts:
                    try:
                        self.times[(name, bs, c)] = time_us(name, bs, c, shape)
                    except ValueError as exc:
                        raise RefusedRequest(f"--kernel {name} at block size {bs}: {exc}") from None
        self.contiguous = CONTIGUOUS
        try:
            for name in variants:
                for c in self.contexts:
                    self.times[(name, CONTIGUOUS, c)] = time_us(name, CONTIGUOUS, c, shape)
        except ValueError:
            self.contiguous = max(block_sizes)
        self.block_sizes = sorted({bs for _, bs, _ in self.times})

    def best(self, block_size: int, context: int) -> tuple[float, str]:
        """(us, variant): the fastest variant's unit time at a counted context point."""
        return min((self.times[(v, block_size, context)], v) for v in self.variants)

    def ratio(self, block_size: int, context: float) -> float:
        """The model's time at this block size over its time at REFERENCE, at `context` tokens."""
        bs = self.contiguous if block_size == 0 else block_size
        points = self.contexts
        c = min(max(context, points[0]), points[-1])
        i = min(bisect.bisect_left(points, c), len(points) - 1)
        lo = max(i - 1, 0) if points[i] > c else i
        r_lo = self.best(bs, points[lo])[0] / self.best(REFERENCE, points[lo])[0]
        if lo == i:
            return r_lo
        r_hi = self.best(bs, points[i])[0] / self.best(REFERENCE, points[i])[0]
        frac = (math.log(c) - math.log(points[lo])) / (math.log(points[i]) - math.log(points[lo]))
        return r_lo + frac * (r_hi - r_lo)

    def rows(self) -> list[dict]:
        """The table as rows (meta.json, the docs)."""
        return [dict(variant=v, block_size=bs, context=c, time_us=t) for (v, bs, c), t in sorted(self.times.items())]


class KernelTimeCost(AnalyticCost):
    """The roofline with its attention terms scaled by the traffic model's block-size ratio."""

    def __init__(self, table: KernelTable, shape: ModelShape, fixed_ms: float | None = None,
                 overhead_ms: float = 0.0):
        super().__init__(shape, fixed_ms, overhead_ms)
        self.table = table
        self.source = (f"{self.source}; attention x the traffic model's time at the block size over block size "
                       f"{REFERENCE} (fastest of {', '.join(table.variants)}, {UNIT_SEQS} seqs x {UNIT_HEADS} heads "
                       f"at {'/'.join(map(str, table.contexts))} tokens; contiguous as block size {table.contiguous})")

    def decode_time(self, b: StepBatch) -> float:
        if not b.decode_tokens:
            return 0.0
        ratio = self.table.ratio(b.block_size, b.decode_context / b.decode_tokens)
        return (ratio * b.decode_context + b.decode_tokens) * self.kv_bytes / self.bandwidth

    def prefill_time(self, b: StepBatch) -> float:
        if not b.prefill_tokens:
            return 0.0
        s = self.shape
        ratio = self.table.ratio(b.block_size, b.prefill_attended / b.prefill_tokens)
        attention = 4.0 * s.num_kv_heads * s.head_dim * s.num_layers * b.prefill_attended / self.flops
        return ratio * attention + b.prefill_tokens * self.kv_bytes / self.bandwidth
