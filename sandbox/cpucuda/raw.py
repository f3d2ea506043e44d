"""What a traffic capture hands to the counting core: one RawLaunch per kernel launch.

Both families produce it: the CPU executor (CUDA C, from its traffic-mode recorder) and the Numba
simulator (from wrapped device arrays and shared arrays). The core (sandbox.analysis.traffic) turns
a list of RawLaunch into Nsight Compute's metrics, per block and per source site, and runs the L2
model over the sector stream of every launch of one variant call.

Definitions (docs/performance-model.md has them in full):
  warp-level request  the active lanes of one warp executing the same site for the k-th time since the
                      warp last converged (a barrier or a full-warp warp operation);
  sector              a 32-byte aligned piece of global memory, addresses counted as if every array
                      started 256-byte aligned (as cudaMalloc's do);
  wavefronts          of a shared request: the most distinct 4-byte words any one of the 32 banks sees;
                      ideal = ceil(bytes of the request / 128); bank conflicts = wavefronts - ideal.
"""
from __future__ import annotations

import dataclasses

import numpy as np

OPS = ("load", "store", "atomic")
SPACES = ("global", "shared")
# Launch totals a capture may add besides the requests (RawLaunch.counters): warp-level tensor-core
# instructions in units of one m16n8k16 MMA (sm_80/sm_90's HMMA.16816), and their FLOPs (2 * m * n * k
# per warp-level MMA). The second name is the sandbox's own: Nsight Compute has no FLOP counter by that name.
COUNTERS = ("smsp__inst_executed_pipe_tensor.sum", "sandbox__tensor_flops.sum")

# One row per (block, site) that the block executed: the counts of its warp-level requests there.
SITE_BLOCK_DTYPE = np.dtype([
    ("block", np.int64),             # linear block index in launch order (blockIdx.x fastest)
    ("site", np.int32),              # index into RawLaunch.sites
    ("requests", np.int64),          # warp-level requests
    ("lanes", np.int64),             # active lanes summed over those requests
    ("bytes", np.int64),             # bytes the lanes asked for
    ("sectors", np.int64),           # global: distinct 32-byte sectors per request, summed; shared: 0
    ("wavefronts", np.int64),        # shared: wavefronts, summed; global: 0
    ("ideal_wavefronts", np.int64),  # shared: ceil(bytes / 128) per request, summed; global: 0
])

# One row per global sector a request touched, in execution order (blocks in launch order).
SECTOR_DTYPE = np.dtype([
    ("block", np.int64),
    ("sector", np.uint64),   # byte address // 32, arrays placed at 256-byte aligned bases
    ("mask", np.uint32),     # the bytes of the sector the request touched (bit i: byte i)
    ("write", np.bool_),     # a store or an atomic (atomics also read)
    ("read", np.bool_),      # a load or an atomic
])


@dataclasses.dataclass(frozen=True)
class Site:
    """One source access site: where it is, what it does, to what."""

    file: str                 # source file as the kernel names it (e.g. kernels/cupy_raw/common.cuh)
    line: int
    chain: tuple[str, ...]    # "file:line" of the calls that led here, innermost first (inlined calls too)
    op: str                   # one of OPS
    space: str                # one of SPACES
    target: str               # the kernel argument or shared array accessed ("key_cache", "smem", ...)
    # True for a site that exists only where the capture ran (the Numba simulator's shared-memory
    # block reductions stand in for a GPU's warp shuffles): a report can show the counts without it.
    simulator_only: bool = False

    def __post_init__(self):
        if self.op not in OPS or self.space not in SPACES:
            raise ValueError(f"Site op must be one of {OPS} and space one of {SPACES}, got {self.op!r}, {self.space!r}")


@dataclasses.dataclass
class RawLaunch:
    """One kernel launch as a capture saw it.

    site_block  SITE_BLOCK_DTYPE [rows]: per (block, site) request counts
    sectors     SECTOR_DTYPE [n]: every global sector touched, in execution order
    notes       what the capture could not see or did differently (a libc memcpy in kernel code, a
                simulator-only path, blocks counted once and scaled), said in every report
    counters    counts that are not memory requests, by metric name (COUNTERS: tensor-core
                instructions and FLOPs counted from the kernel's MMAs): int64 [num_blocks] each, one
                count per block in launch order; absent names count 0
    represented_by  None when every block ran; else int64 [num_blocks]: the block whose counts stand
                for each block (itself when it ran). site_block then has rows for every block (copies of
                the representative's), but sectors only hold the blocks that ran.
    arrays      the global arrays by target name: (fake base address, bytes), so a sector (address // 32)
                can be attributed to its array (empty when the capture does not say)
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    sites: list[Site]
    site_block: np.ndarray
    sectors: np.ndarray
    notes: list[str] = dataclasses.field(default_factory=list)
    counters: dict = dataclasses.field(default_factory=dict)
    represented_by: np.ndarray | None = None
    arrays: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.site_block.dtype != SITE_BLOCK_DTYPE or self.sectors.dtype != SECTOR_DTYPE:
            raise ValueError("RawLaunch.site_block and .sectors must have SITE_BLOCK_DTYPE and SECTOR_DTYPE")
        unknown = set(self.counters) - set(COUNTERS)
        if unknown:
            raise ValueError(f"RawLaunch.counters: unknown names {sorted(unknown)}; known: {COUNTERS}")
        for name, values in self.counters.items():
            if np.shape(values) != (self.num_blocks,):
                raise ValueError(f"RawLaunch.counters[{name!r}] must hold one count per block "
                                 f"({self.num_blocks}), got shape {np.shape(values)}")
        if self.represented_by is not None:
            rep = self.represented_by
            if rep.shape != (self.num_blocks,) or (rep < 0).any() or (rep >= self.num_blocks).any() or (rep[rep] != rep).any():
                raise ValueError("RawLaunch.represented_by must be int [num_blocks] of block indices, each pointing "
                                 "at a block that represents itself")

    @property
    def num_blocks(self) -> int:
        return int(np.prod(self.grid))
