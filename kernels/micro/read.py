"""micro.read: a streaming read, each thread loading `loads` independent `vector_bytes` elements, as gpu-benches'
gpu-stream read kernel does (one 8-byte element per thread there).

Idea: the simplest kernel whose time is set by the memory system alone: `threads` per block, `blocks_per_sm`
resident blocks forced by a dynamic shared-memory spoiler (the launcher picks its size from the compile census,
as gpu-stream grows its spoiler until the occupancy calculator agrees), over MicroReadProblem.total_bytes.
Limits: the CPU executor counts it (one block: every block does identical work, so the counts are scaled by
the grid); 4/8/16-byte elements, 1..8 loads per thread, 32..1024 threads, 1..32 blocks per SM that fit.
Verdict: see docs/performance-model.md ("model-check"), where its model meets published measurements.
"""
from __future__ import annotations

import pathlib

from sandbox.analysis.occupancy import occupancy
from sandbox.errors import RefusedRequest
from sandbox.problem.micro import MicroLimits

PATH = pathlib.Path(__file__).resolve().parent / "read.cu"
NAME = "micro.read"
LIMITS = MicroLimits()
TUNABLES = {"threads": tuple([256] + [t for t in range(32, 1025, 32) if t != 256]),
            "blocks_per_sm": tuple([2] + [b for b in range(1, 33) if b != 2]),
            "vector_bytes": (8, 4, 16),
            "loads": (1, 2, 4, 8)}
FIRST_SPOILER, SPOILER_STEP = 1024, 256  # gpu-stream's start and step


def source() -> str:
    return PATH.read_text()


def kernel_name(vector_bytes: int, loads: int) -> str:
    return f"micro_read<{vector_bytes}, {loads}>"


def spoiler_bytes(registers: int, static_shared: int, threads: int, blocks_per_sm: int, arch: str) -> int:
    """The dynamic shared memory per block that leaves exactly `blocks_per_sm` resident blocks; RefusedRequest when
    the registers or warp slots already allow fewer."""
    size = FIRST_SPOILER
    while True:
        occ = occupancy(registers, static_shared + size, threads, arch)
        if occ.blocks_per_sm <= blocks_per_sm:
            break
        size += SPOILER_STEP
    if occ.blocks_per_sm < blocks_per_sm:
        raise RefusedRequest(f"{NAME}: blocks_per_sm={blocks_per_sm} with threads={threads} does not fit an {arch} "
                             f"SM ({occ.blocks_per_sm} at most: {occ.limiter}); choose fewer blocks or threads")
    return size
