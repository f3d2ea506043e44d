"""wrong.cupy.causal_off_by_one: cupy.multi whose causal mask lets a query token see the token after it.

Negative control: the property tests must reject it (tests/test_variants.py). Realistic: `t <= p + 1`
(or a position computed from a 1-based index) in a multi-token mask, with the tile's token range
extended to match; decode problems stay right, so only multi-token queries catch it. Stays in bounds
(the range is clipped to the context). Limits: as cupy.multi.
"""
from __future__ import annotations

import pathlib

from kernels.cupy_raw import multi

PATH = pathlib.Path(__file__).resolve().parent / "cupy_causal_off_by_one.cu"
NAME = "wrong.cupy.causal_off_by_one"
LIMITS = multi.LIMITS
KERNEL = "paged_attention_causal_off_by_one"


def prepare(problem, backend: str, partition_size: int | None = None):
    layout = multi.Layout.for_problem(problem)
    work = multi.multi_work(problem, layout, multi.partition_tokens(partition_size), lookahead=1)
    return multi.prepare_work(NAME, PATH, problem, backend, work, kernel=KERNEL)
