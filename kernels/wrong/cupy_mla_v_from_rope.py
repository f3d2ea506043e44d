"""wrong.cupy.mla_v_from_rope: cupy.mla whose values are the latent row's dims 64..575 instead of 0..511.

Negative control: the MLA property tests must reject it (tests/test_mla_variants.py). Realistic: a value
view taken at the wrong end of the 576-wide row (`row[-512:]`), so the 64 RoPE dims leak into the output
and the first 64 latent dims are dropped; keys, softmax and lse stay right. Stays in bounds (the shifted
view ends at dim 575). Built through cupy.mla's own template (FLAW_V_FROM_ROPE). Limits: cupy.mla's
narrowed to one instantiation (bfloat16 over a bf16 cache, dense): the flaw does not depend on the rest,
and each instantiation costs the CPU executor's compile.
"""
from __future__ import annotations

import dataclasses

from kernels.cupy_raw import mla

NAME = "wrong.cupy.mla_v_from_rope"
LIMITS = dataclasses.replace(mla.LIMITS, dtypes=("bfloat16",), kv_formats=(), modes=("dense",))
FLAW = 1  # mla::FLAW_V_FROM_ROPE


def prepare(problem, backend: str):
    return mla.prepare_mla(NAME, problem, backend, flaw=FLAW)
