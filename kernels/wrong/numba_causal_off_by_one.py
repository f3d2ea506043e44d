"""wrong.numba.causal_off_by_one: numba.multi whose causal mask lets a query token see one token too many (NEGATIVE CONTROL).

The flaw: query token j at position p sees tokens t <= p + 1 instead of t <= p (the mask's
fencepost, and the tile's walk one token further, never past the context). The last query token
of a sequence has no token after it, so decode problems (one query token per sequence) come out
right: only several query tokens per sequence expose it. Everything else is numba.multi's body
(multi.make_body with causal_slip=1), every precision and option included; it declares numba.multi's
limits before sinks, lse, per-token scales, NVFP4 and any block size (powers of two, fp8, the logit
options), which the flaw does not involve, so the shared property test's draws go to query lengths.
Must be rejected by tests/kernels/test_variants.py::test_property_test_rejects_negative_control.
"""
from __future__ import annotations

import dataclasses

from kernels.numba_cuda import launch, multi
from sandbox.variant import KERNEL_SUPPORT, POW2_BLOCK_SIZES

LIMITS = dataclasses.replace(multi.LIMITS, block_sizes=POW2_BLOCK_SIZES, kv_dtypes=KERNEL_SUPPORT["kv_dtypes"],
                             options=KERNEL_SUPPORT["options"])

kernel_for = multi.kernel_factory(causal_slip=1)  # BUG: t <= p + 1


def prepare(problem, backend: str) -> launch.Launch:
    return multi.prepare_with(kernel_for, problem, "wrong.numba.causal_off_by_one")
