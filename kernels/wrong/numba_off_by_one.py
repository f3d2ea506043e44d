"""wrong.numba.off_by_one: numba.naive that drops the last token of the last block (NEGATIVE CONTROL).

The flaw: the token count of a block is `context_len - block * block_size - 1` when that is smaller
than block_size, a classic fencepost slip; every other block is whole. A context of one token
gets no token at all (0/0 = NaN). Everything else is numba.naive's body (naive.make_body), every
precision and option included.
Must be rejected by tests/kernels/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

from numba import cuda

from kernels.numba_cuda import launch, naive

LIMITS = naive.LIMITS


@cuda.jit(device=True, inline="always")
def tokens_in_block_minus_one(context_len, block, block_size):
    return min(block_size, context_len - block * block_size - 1)  # BUG: - 1


kernel_for = naive.kernel_factory(block_tokens=tokens_in_block_minus_one)


def prepare(problem, backend: str) -> launch.Launch:
    return naive.launch_per_head(kernel_for, problem, "wrong.numba.off_by_one")
