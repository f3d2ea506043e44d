"""Decode attention time from the performance model (``sandbox.analysis.model``): ``--step-cost model[:VARIANTS]``.

A decode batch of n sequences with mean context c runs, in every layer, one attention call over n sequences x
H KV heads (one query head per KV head, as the analytic model). Its time is the model's for the fastest of the
chosen CUDA C variants (default ``DEFAULT_VARIANTS``) at that shape, from traffic counted on the CPU executor
(``sandbox.analysis.traffic.variant.traffic``):

- counted once per block size, variant and context point c_k = 16 x 2^k (lazily, as batches need them) on a
  unit problem of ``UNIT_SEQS`` sequences x ``UNIT_HEADS`` heads, every sequence of context c_k;
- scaled to n x H: every block of the unit does the work of one (sequence, head) pair's blocks, so the counts,
  the FLOPs and the grid scale by n x H / (UNIT_SEQS x UNIT_HEADS), and ``model.predict`` turns the scaled
  kernels into a time (waves, occupancy and bytes in flight come from the scaled grid);
- interpolated linearly in c between the two context points around it (below 16: the time at 16), per
  variant; the fastest variant at the interpolated point stands for the engine's kernel.

decode_time = layers x that time + the new tokens' K and V written (bytes / the analytic bandwidth, as
``AnalyticCost``); linear and prefill parts stay analytic. A contiguous layout (block size 0) uses the largest
block size of the run. Assumed: every sequence of a batch has the batch's mean context (the bytes are the
same; a split-KV variant's partitions and the load balance follow the mean), each batch shape's fastest variant
is available to the engine, and everything ``model.assumptions`` lists.
"""
from __future__ import annotations

import dataclasses

from sandbox.analysis import gpus, model
from sandbox.analysis.traffic import metrics as M
from sandbox.analysis.traffic.variant import traffic
from sandbox.memory.budget import ModelShape
from sandbox.problem import DecodeProblem
from sandbox.serving.cost import AnalyticCost, StepBatch
from sandbox.variant import registry
from sandbox.errors import RefusedRequest

# The CUDA C single-query decode variants; cupy.multi and cupy.cascade (several query tokens, shared prefixes)
# are taken when named (model:cupy.multi,...). Numba variants count under the simulator, which pays per
# thread: too slow to serve a cost model.
DEFAULT_VARIANTS = ("cupy.v1", "cupy.v2", "cupy.gqa", "cupy.rows", "cupy.dense")
UNIT_SEQS, UNIT_HEADS = 2, 2
FIRST_POINT = 16
# KV bytes per element -> (query dtype, cache dtype) of the unit problem.
_DTYPES = {4: ("float32", None), 2: ("float16", None), 1: ("float16", "float8_e4m3fn")}


@dataclasses.dataclass(frozen=True)
class _Counted:
    """One kernel of a unit call: what model.Kernel needs, before scaling."""
    name: str
    metrics: dict
    num_blocks: int
    threads_per_block: int
    blocks_per_sm: int | None
    loads_in_flight: int
    flops: float
    loads_source: str            # "sass", or what the model assumed
    loads_per_wait: float | None


def _parse_variants(argument: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in argument.split(",") if n.strip()) if argument else DEFAULT_VARIANTS
    if not names:
        raise RefusedRequest(f"--step-cost model:{argument}: name at least one variant (e.g. model:cupy.rows,cupy.v1)")
    for name in names:
        if name in registry.VARIANTS and not name.startswith("cupy."):  # refused before importing its family
            raise RefusedRequest(f"--step-cost model:{argument}: {name} is not a CUDA C (cupy.*) variant; the model's "
                                 "counts come from the CPU executor (Numba variants count under the simulator, "
                                 "too slow for a step-cost source)")
        try:
            registry.get(name, problem="decode")
        except ValueError as exc:
            raise RefusedRequest(f"--step-cost model:{argument}: {exc}") from None
    return names


class ModelCost(AnalyticCost):
    """Decode attention from the performance model's time of the fastest variant; the rest analytic."""

    def __init__(self, argument: str, shape: ModelShape, fixed_ms: float | None = None, device: str = "h200",
                 overhead_ms: float = 0.0):
        super().__init__(shape, fixed_ms, overhead_ms)
        self.variants = _parse_variants(argument)
        if shape.kv_dtype_bytes not in _DTYPES:
            raise RefusedRequest(f"--step-cost model: a KV element of {shape.kv_dtype_bytes} bytes has no kernel "
                                 f"dtype; supported: {', '.join(map(str, sorted(_DTYPES)))} bytes "
                                 "(--dtype-bytes / --kv-dtype)")
        self.dtype, self.kv_dtype = _DTYPES[shape.kv_dtype_bytes]
        self.gpu = gpus.get(device)
        self.block_sizes: tuple[int, ...] = ()
        self._counts: dict[tuple[int, str, int], list[_Counted]] = {}  # (block size, variant, point) -> kernels
        self._times: dict[tuple[int, int, int], tuple[float, ...]] = {}  # (block size, n, point) -> per variant
        self._check_unit(16)
        self.source = (f"performance model ({self.gpu.name}, sandbox.analysis.model): decode attention per layer = "
                       f"the fastest of {', '.join(self.variants)} at each batch shape, from traffic counted on the "
                       f"CPU executor ({UNIT_SEQS} seqs x {UNIT_HEADS} heads per context point, scaled to the batch); "
                       f"rest {self.source}")

    # ---------------------------------------------------------------- the unit problems

    def _unit(self, block_size: int, context: int):
        return DecodeProblem.random(seed=0, num_seqs=UNIT_SEQS, num_heads=UNIT_HEADS, num_kv_heads=UNIT_HEADS,
                                    head_dim=self.shape.head_dim, block_size=block_size,
                                    context_lens=[context] * UNIT_SEQS, dtype=self.dtype, kv_dtype=self.kv_dtype,
                                    share_prefix=False)

    def _check_unit(self, block_size: int) -> None:
        """Refuse, before anything runs, a block size, head dim or dtype that one of the variants does not take."""
        problem = self._unit(block_size, FIRST_POINT)
        for name in self.variants:
            try:
                registry.get(name).limits.check(name, problem, "cpu")
            except ValueError as exc:
                raise RefusedRequest(f"--step-cost model: {exc} (the model's shape: head dim {self.shape.head_dim}, "
                                     f"block size {block_size}, {self.kv_dtype or self.dtype} cache); choose variants "
                                     "with model:NAME,...") from None

    def check_block_sizes(self, block_sizes) -> None:
        for bs in block_sizes:
            self._check_unit(bs)
        self.block_sizes = tuple(block_sizes)

    def _count(self, block_size: int, name: str, point: int) -> list[_Counted]:
        key = (block_size, name, point)
        if key not in self._counts:
            problem = self._unit(block_size, FIRST_POINT << point)
            result = traffic(name, problem, self.gpu, sample_seqs=None)
            # The attention FLOPs, shared among the kernels by their global loads (as traffic() does).
            flops = 2.0 * problem.multiply_adds()
            sectors = [k["metrics"][M.GLOBAL_LOAD_SECTORS] for k in result["kernels"]]
            self._counts[key] = [
                _Counted(k["name"], k["metrics"], int(k["grid"][0] * k["grid"][1] * k["grid"][2]),
                         int(k["threads_per_block"]), k.get("blocks_per_sm"),
                         int(k.get("loads_in_flight", model.ASSUMED_LOADS_IN_FLIGHT)),
                         flops * s / sum(sectors) if sum(sectors) else flops / len(sectors),
                         k.get("loads_in_flight_source", "assumed"), k.get("loads_per_wait"))
                for k, s in zip(result["kernels"], sectors)]
        return self._counts[key]

    # ---------------------------------------------------------------- modelled times

    def layer_times(self, block_size: int, num_seqs: int, point: int) -> tuple[float, ...]:
        """Seconds of one layer's attention call per variant (self.variants' order): num_seqs sequences x the
        model's KV heads, every sequence of context 16 x 2^point."""
        key = (block_size, num_seqs, point)
        if key not in self._times:
            scale = num_seqs * self.shape.num_kv_heads / (UNIT_SEQS * UNIT_HEADS)
            times = []
            for name in self.variants:
                kernels = [model.Kernel(c.name, {m: v * scale for m, v in c.metrics.items()},
                                        max(1, round(c.num_blocks * scale)), c.threads_per_block, c.blocks_per_sm,
                                        c.loads_in_flight, c.flops * scale, c.loads_source, c.loads_per_wait)
                           for c in self._count(block_size, name, point)]
                times.append(model.predict(kernels, self.gpu)["time_us"] * 1e-6)
            self._times[key] = tuple(times)
        return self._times[key]

    def attention_time(self, block_size: int, num_seqs: int, context: float) -> tuple[float, str]:
        """(seconds, variant): one layer's decode attention for num_seqs sequences of mean context `context`."""
        if block_size == 0:
            block_size = max(self.block_sizes or (16,))
        if context <= FIRST_POINT:
            lo, frac = 0, 0.0
        else:
            lo = (int(context) // FIRST_POINT).bit_length() - 1  # 16 x 2^lo <= context < 16 x 2^(lo + 1)
            frac = (context - (FIRST_POINT << lo)) / (FIRST_POINT << lo)
        low = self.layer_times(block_size, num_seqs, lo)
        high = self.layer_times(block_size, num_seqs, lo + 1) if frac else low
        times = [a + frac * (b - a) for a, b in zip(low, high)]
        best = min(range(len(times)), key=times.__getitem__)
        return times[best], self.variants[best]

    def decode_time(self, b: StepBatch) -> float:
        if not b.decode_tokens:
            return 0.0
        seconds, _ = self.attention_time(b.block_size, b.decode_tokens, b.decode_context / b.decode_tokens)
        return self.shape.num_layers * seconds + b.decode_tokens * self.kv_bytes / self.bandwidth

