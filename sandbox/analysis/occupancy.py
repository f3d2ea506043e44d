"""Theoretical occupancy of a kernel on one SM, as NVIDIA's occupancy calculator computes it.

occupancy(registers, shared_bytes, threads_per_block, arch) -> Occupancy: resident blocks and warps
per SM, the fraction of the SM's warp slots they fill, and which limit binds first. The shared
bytes are the block's static + dynamic shared memory; the runtime's 1 KB reserve per block is added
here. The per-SM resources of the GPUs we target (sm_90: H100/H200, sm_80: A100) are in ARCHS,
from the CUDA C Programming Guide's compute-capability table and NVIDIA's occupancy calculator.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class SM:
    max_warps: int = 64
    max_blocks: int = 32
    max_threads_per_block: int = 1024
    registers: int = 65536
    register_unit: int = 256          # registers are allocated per warp in units of 256
    warp_alloc_granularity: int = 4   # the register file is split in 4 quadrants: warps count in 4s
    max_registers_per_thread: int = 255
    shared_bytes: int = 228 * 1024    # shared memory per SM at the largest carveout
    max_shared_per_block: int = 227 * 1024  # with the opt-in attribute; 48 KB without
    reserved_shared_per_block: int = 1024   # the CUDA runtime keeps 1 KB per block (sm_80 and later)
    shared_unit: int = 128            # shared memory allocation granularity
    # nvJitLink's summary line counts this much more shared memory than the kernel declares (observed on
    # sm_90: a kernel without shared memory reports 1024 bytes smem, 0 on sm_80; sandbox.analysis.ptx_link).
    linker_extra_shared: int = 0


# The one list of architectures the project compiles for and models (sandbox.analysis.gpus names each GPU's).
ARCHS = {
    "sm_80": SM(shared_bytes=164 * 1024, max_shared_per_block=163 * 1024),  # A100
    "sm_90": SM(linker_extra_shared=1024),                                # H100 / H200 / GH200
}


@dataclasses.dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float            # warps_per_sm / max_warps
    limiter: str               # "warps" | "blocks" | "registers" | "shared" | "invalid: ..."
    limits: dict               # blocks per SM allowed by each resource


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(registers: int, shared_bytes: int, threads_per_block: int, arch: str = "sm_90") -> Occupancy:
    """Resident blocks/warps per SM for a kernel using `registers` per thread and `shared_bytes`
    (static + dynamic, without the runtime reserve) per block of `threads_per_block` threads."""
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    sm = ARCHS[arch]
    if threads_per_block < 1 or threads_per_block > sm.max_threads_per_block:
        return Occupancy(0, 0, 0.0, f"invalid: {threads_per_block} threads per block", {})
    if registers > sm.max_registers_per_thread:
        return Occupancy(0, 0, 0.0, f"invalid: {registers} registers per thread", {})
    block_shared = _round_up(shared_bytes + sm.reserved_shared_per_block, sm.shared_unit)
    if shared_bytes > sm.max_shared_per_block:
        return Occupancy(0, 0, 0.0, f"invalid: {shared_bytes} B shared per block > {sm.max_shared_per_block}", {})

    warps_per_block = math.ceil(threads_per_block / 32)
    limits = {"warps": sm.max_warps // warps_per_block, "blocks": sm.max_blocks}
    if registers > 0:
        per_warp = _round_up(registers * 32, sm.register_unit)
        warps = sm.registers // per_warp
        warps -= warps % sm.warp_alloc_granularity
        limits["registers"] = warps // warps_per_block
    limits["shared"] = sm.shared_bytes // block_shared
    # Ties go to the first named: warps, then blocks, registers, shared.
    limiter = min(limits, key=limits.get)
    blocks = limits[limiter]
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / sm.max_warps, limiter if blocks else f"{limiter} (none fit)", limits)
