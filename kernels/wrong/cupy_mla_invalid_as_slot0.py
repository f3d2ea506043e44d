"""wrong.cupy.mla_invalid_as_slot0: cupy.mla whose sparse rows read an index of -1 as slot 0 (block 0, offset 0).

Negative control: the MLA property tests must reject it (tests/test_mla_variants.py). Realistic: the
clamp `max(index, 0)` that keeps a gather in bounds, without the mask that should drop the clamped
entries (the bug FlashMLA's reference guards against), so every -1 adds the token at slot 0. Reads a
slot inside the cache, never out of bounds. Built through cupy.mla's own template
(FLAW_INVALID_AS_SLOT0). Limits: cupy.mla's narrowed to one instantiation: sparse (dense problems have no
index to get wrong), bfloat16 over a bf16 cache (the flaw does not depend on the format).
"""
from __future__ import annotations

import dataclasses

from kernels.cupy_raw import mla

NAME = "wrong.cupy.mla_invalid_as_slot0"
LIMITS = dataclasses.replace(mla.LIMITS, dtypes=("bfloat16",), kv_formats=(), modes=("sparse",))
FLAW = 2  # mla::FLAW_INVALID_AS_SLOT0


def prepare(problem, backend: str):
    return mla.prepare_mla(NAME, problem, backend, flaw=FLAW)
