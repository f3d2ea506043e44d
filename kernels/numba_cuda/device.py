"""What every Numba kernel module shares: the mode this process runs in and a few compile-time constants.

SIMULATED is read once, at import, from numba.config.ENABLE_CUDASIM (sandbox.devices.backends
chooses the mode before anything imports numba.cuda): the reductions (reductions.py), the bit
casts (codecs.py) and the launch sizing (launch.py) each bind their simulated or compiled path from it.
"""
from __future__ import annotations

import math

from numba import config, float32

from sandbox.variant import KERNEL_SUPPORT, Limits

SIMULATED = bool(config.ENABLE_CUDASIM)

WARP = 32
MAX_BLOCK_THREADS = 1024  # CUDA's limit per block; the simulator's block reductions keep a slot per thread
MAX_HEAD_DIM = 512  # per-thread accumulators and the staged query are sized by it
HEAD_DIMS = (32, 64, 80, 96, 112, 120, 128, 192, 256, 512)  # what the variants declare (any <= MAX_HEAD_DIM works)
# The option table's features every Numba attention kernel implements: KERNEL_SUPPORT's, learned sinks,
# the log-sum-exp output and fp8 scales per token and KV head.
OPTIONS = KERNEL_SUPPORT["options"] + ("sinks", "lse", "kv_scales")
NEG_INF = float32(-math.inf)
ZERO = float32(0.0)


def limits(kv_dtypes=KERNEL_SUPPORT["kv_dtypes"], **extra) -> Limits:
    """A Numba attention kernel's Limits: any block size (a runtime value), HEAD_DIMS, every query dtype,
    fp8 caches (plus what kv_dtypes adds), OPTIONS; `extra` (max_query_len ...) as the variant needs."""
    return Limits(block_sizes=None, head_dims=HEAD_DIMS, dtypes=KERNEL_SUPPORT["dtypes"], kv_dtypes=kv_dtypes,
                  options=OPTIONS, **extra)
