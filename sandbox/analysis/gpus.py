"""The GPUs the performance model targets, every figure with where it comes from.

    get(name) -> GPU          "h200" (default everywhere) or "h100" (SXM5); unknown names list the known ones
    GPUS                      name -> GPU

Rates are peaks at the boost clock. Figures NVIDIA does not publish (L2 bandwidth, DRAM latency, launch
cost) are marked as assumptions in their source; scripts/gpu-check measures what the model predicts
from them. docs/performance-model.md explains how the model uses each.
"""
from __future__ import annotations

import dataclasses

MIB = 1024 * 1024

_H100_WHITEPAPER = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), H100 SXM5 column"
_HOPPER_BLOG = "NVIDIA Technical Blog, 'NVIDIA Hopper Architecture In-Depth' (2022)"
_CUDA_GUIDE = "CUDA C++ Programming Guide, compute capability 9.0 (shared memory: 32 banks of 4 bytes)"
_L2_BW = ("assumption: 5120 bytes/clock, the A100 whitepaper's L2 read bandwidth per clock, kept for Hopper "
          "(NVIDIA publishes no Hopper L2 bandwidth), at the boost clock; to be measured by scripts/gpu-check")
_LATENCY = ("assumption: about 600 ns from an SM to HBM and back under load (pointer-chasing microbenchmarks "
            "of Hopper report 450-650 ns idle; more under load); it only sets the bytes in flight an SM needs")
_LAUNCH = ("assumption: 2.5 us per kernel launch in a stream (launch + tail of one grid, as CUDA event timings "
           "of empty kernels on Hopper show); a CUDA graph would lower it")


@dataclasses.dataclass(frozen=True)
class GPU:
    name: str
    arch: str                     # sandbox.analysis.occupancy's key (sm_90)
    sms: int
    clock_hz: float               # boost clock
    dram_bytes_per_s: float
    dram_bytes: int               # capacity
    l2_bytes: int
    l2_bytes_per_clock: float     # whole chip, L2 -> SMs
    shared_bytes_per_clock_per_sm: float  # one wavefront (128 bytes) per SM per clock
    l1_sectors_per_clock_per_sm: float    # L1 tag lookups: 4 sectors (128 bytes) per SM per clock
    fp32_flops_per_s: float       # CUDA cores, FMA = 2 FLOPs
    tensor_flops_per_s: float     # fp16/bf16 dense, fp32 accumulate
    dram_latency_s: float
    launch_s: float
    sources: dict                 # field -> where the figure comes from

    @property
    def l2_bytes_per_s(self) -> float:
        return self.l2_bytes_per_clock * self.clock_hz

    @property
    def shared_bytes_per_s(self) -> float:
        return self.shared_bytes_per_clock_per_sm * self.sms * self.clock_hz

    @property
    def l1_bytes_per_s(self) -> float:
        return self.l1_sectors_per_clock_per_sm * 32 * self.sms * self.clock_hz

    def describe(self) -> str:
        return (f"{self.name}: {self.sms} SMs at {self.clock_hz / 1e9:.2f} GHz, DRAM {self.dram_bytes_per_s / 1e12:.2f} TB/s, "
                f"L2 {self.l2_bytes / MIB:.0f} MiB at {self.l2_bytes_per_s / 1e12:.1f} TB/s, shared "
                f"{self.shared_bytes_per_s / 1e12:.1f} TB/s, FP32 {self.fp32_flops_per_s / 1e12:.1f} TFLOP/s, "
                f"tensor {self.tensor_flops_per_s / 1e12:.0f} TFLOP/s")


_COMMON = dict(
    arch="sm_90", sms=132, clock_hz=1.98e9, l2_bytes_per_clock=5120.0, shared_bytes_per_clock_per_sm=128.0,
    l1_sectors_per_clock_per_sm=4.0, fp32_flops_per_s=66.9e12, tensor_flops_per_s=989.4e12, dram_latency_s=600e-9,
    launch_s=2.5e-6)
_COMMON_SOURCES = dict(
    sms=f"{_H100_WHITEPAPER}: 132 SMs (the H200 uses the same GH100 configuration: NVIDIA H200 datasheet)",
    clock_hz=f"{_H100_WHITEPAPER}: 1980 MHz boost (FP32 and FP64 peaks are computed at it)",
    l2_bytes_per_clock=_L2_BW,
    shared_bytes_per_clock_per_sm=f"{_CUDA_GUIDE}: 32 banks x 4 bytes per clock per SM",
    l1_sectors_per_clock_per_sm=f"{_HOPPER_BLOG}: L1 and shared memory share one 128 bytes/clock data path per SM",
    fp32_flops_per_s="NVIDIA H100 / H200 datasheets: FP32 67 TFLOPS (66.9 = 16896 cores x 2 x 1.98 GHz)",
    tensor_flops_per_s="NVIDIA H100 / H200 datasheets: FP16/BF16 Tensor Core 1979 TFLOPS with sparsity, "
                       "989.4 dense",
    dram_latency_s=_LATENCY, launch_s=_LAUNCH)

GPUS = {
    "h200": GPU(name="H200 SXM", dram_bytes_per_s=4.8e12, dram_bytes=141 * 10**9, l2_bytes=60 * MIB,
                sources=dict(_COMMON_SOURCES,
                             dram_bytes_per_s="NVIDIA H200 datasheet: 4.8 TB/s HBM3e",
                             dram_bytes="NVIDIA H200 datasheet: 141 GB HBM3e",
                             l2_bytes="torch.cuda.get_device_properties on an H200: L2 60 MiB (the full GH100's "
                                      "L2; the H100 SXM enables 50 MB)"),
                **_COMMON),
    "h100": GPU(name="H100 SXM", dram_bytes_per_s=3.35e12, dram_bytes=80 * 10**9, l2_bytes=50 * MIB,
                sources=dict(_COMMON_SOURCES,
                             dram_bytes_per_s="NVIDIA H100 datasheet: H100 SXM 3.35 TB/s HBM3",
                             dram_bytes="NVIDIA H100 datasheet: H100 SXM 80 GB",
                             l2_bytes=f"{_H100_WHITEPAPER}: 50 MB L2 (PyTorch reports 50 MiB)"),
                **_COMMON),
}


def get(name) -> GPU:
    """The GPU called `name` (case-insensitive), or a GPU given as is."""
    if isinstance(name, GPU):
        return name
    key = str(name).lower()
    if key not in GPUS:
        raise ValueError(f"device must be one of {', '.join(GPUS)}, got {name!r}")
    return GPUS[key]
