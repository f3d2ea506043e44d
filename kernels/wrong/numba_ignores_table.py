"""wrong.numba.ignores_table: numba.naive reading logical block b from physical block b (NEGATIVE CONTROL).

The flaw: `physical = block` instead of `block_tables[seq, block]`, as if the cache were contiguous
per sequence (clamped only to stay in bounds). Right only when the table is the identity, which
the shared strategy never draws. Everything else is numba.naive's body (naive.make_body), every
precision and option included.
Must be rejected by tests/kernels/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

from numba import cuda

from kernels.numba_cuda import launch, naive

LIMITS = naive.LIMITS


@cuda.jit(device=True, inline="always")
def logical_as_physical_block(block_tables, seq, block, num_blocks):
    return min(block, num_blocks - 1)  # BUG: the block table is never read


kernel_for = naive.kernel_factory(physical_block=logical_as_physical_block)


def prepare(problem, backend: str) -> launch.Launch:
    return naive.launch_per_head(kernel_for, problem, "wrong.numba.ignores_table")
