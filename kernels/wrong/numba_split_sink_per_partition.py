"""wrong.numba.split_sink_per_partition: numba.split whose partitions each add the sink (NEGATIVE CONTROL).

The flaw (the known trap of split-KV with learned sinks): every partition adds exp(sink - its max) to its own
denominator, so the merged denominator holds the sink once per partition instead of once. Right with one
partition, wrong with two or more; the partitions here are one cache block each (at least 2 tokens), so any
problem with sinks and a context longer than that exposes it. Everything else is numba.split's (its partition
body with sink_per_partition, its merge built without the sink), every precision and option included.
Must be rejected by tests/kernels/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

from kernels.numba_cuda import options, split

LIMITS = split.LIMITS

partition_kernel_for = split.partition_factory(sink_per_partition=True)


def partition_size(block_size: int) -> int:
    """One block per partition (two for one-token blocks): many partitions even on short contexts."""
    return block_size * (2 if block_size == 1 else 1)


def prepare(problem, backend: str) -> split.SplitLaunch:
    flags = options.kernel_key(problem)[2] & ~options.OPT_SINKS  # the sink was added by every partition
    return split.SplitLaunch(problem, partition_size(problem.block_size), partition_kernel_for, merge_flags=flags)
