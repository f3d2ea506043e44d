"""What every Numba kernel module shares: the mode this process runs in and a few compile-time constants.

SIMULATED is read once, at import, from numba.config.ENABLE_CUDASIM (sandbox.devices.backends
chooses the mode before anything imports numba.cuda): the reductions (reductions.py), the bit
casts (codecs.py) and the launch sizing (launch.py) each bind their simulated or compiled path from it.
"""
from __future__ import annotations

import math

from numba import config, float32

SIMULATED = bool(config.ENABLE_CUDASIM)

WARP = 32
MAX_BLOCK_THREADS = 1024  # CUDA's limit per block; the simulator's block reductions keep a slot per thread
MAX_HEAD_DIM = 256  # per-thread accumulators and the staged query are sized by it
HEAD_DIMS = (32, 64, 80, 96, 112, 120, 128, 192, 256)  # what the variants declare (any <= MAX_HEAD_DIM works)
NEG_INF = float32(-math.inf)
ZERO = float32(0.0)
