"""The GPUs the performance model targets: the one table of device figures, each with where it comes from.

    get(name) -> GPU     "h200" (default everywhere), "h100" (SXM5), "gh200", "h100-pcie", "a100" (SXM4 80 GB);
                         unknown names list the known ones
    GPUS                 name -> GPU
    NAMES                the --device names, in table order

Beside each datasheet figure (nominal DRAM bandwidth, peaks at the boost clock) the table holds what others
measured on that GPU: the read and copy stream bandwidth, the DRAM and L2 pointer-chase latency, the launch
cost, the block launch rate, and the queueing of the memory system (how the latency grows as it fills),
fitted to a bandwidth-vs-occupancy sweep. `arch` selects the compile target and the SM's resources
(sandbox.analysis.occupancy.ARCHS): a new GPU of a known architecture is one entry here. Nothing outside this
module types a device figure; docs/performance-model.md explains how the model uses each.
"""
from __future__ import annotations

import dataclasses

MIB = 1024 * 1024

# Sources, as text (the repository points nowhere else).
_H100_WHITEPAPER = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)"
_A100_WHITEPAPER = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"
_HOPPER_BLOG = "NVIDIA Technical Blog, 'NVIDIA Hopper Architecture In-Depth' (2022)"
_CUDA_GUIDE = "CUDA C++ Programming Guide, compute capabilities 8.0 / 9.0 (shared memory: 32 banks of 4 bytes)"
_GPU_BENCHES = "RRZE-HPC/gpu-benches @ 1038c5d"
_AZURE = "Azure/AI-benchmarking-guide, Azure_Results/"
_L2_BW = ("assumption: 5120 bytes/clock, the A100 whitepaper's L2 read bandwidth per clock, kept for Hopper "
          "(NVIDIA publishes no Hopper L2 bandwidth), at the boost clock")
_QUEUE = (f"fitted to {_GPU_BENCHES} gpu-stream/gh200.txt (read kernel, one 8-byte load per thread, 2 blocks per SM): "
          "486 / 935 / 1715 / 2775 GB/s at 256 / 512 / 1024 / 2048 threads per SM give an effective latency of "
          "556 / 578 / 630 / 779 ns = DRAM latency + block overhead + queue x rho / (1 - rho), rho = bandwidth / "
          "read stream; least squares of the relative error over the four points (python scripts/fit_queueing.py), "
          "checked on other GPUs by `python -m sandbox model-check`")
_BLOCK = "fitted with the queueing term (the same four gpu-stream points): a block's launch and retire per SM slot"
_BLOCK_RATE = (f"{_GPU_BENCHES} gpu-stream/gh200.txt: about 1.65e9 blocks/s GPU-wide when every thread of a block "
               "does one load (the FACTS of this project; GH100)")
_LAUNCH = (f"{_GPU_BENCHES} gpu-small-kernels/h200.txt: back-to-back tiny kernels about 2.4-2.5 us each on an H200 "
           "(1.0-1.4 us in a CUDA graph); taken for every GPU here")
_GH100_LATENCY = (f"{_GPU_BENCHES} gpu-latency/gh200.txt (pointer chase, 1980 MHz): DRAM 688 cycles = 347 ns, "
                  "L2 280 cycles = 142 ns")


@dataclasses.dataclass(frozen=True)
class GPU:
    name: str
    arch: str                     # compile target and SM resources: sandbox.analysis.occupancy.ARCHS
    sms: int
    clock_hz: float               # boost clock
    dram_bytes_per_s: float       # nominal (datasheet)
    read_bytes_per_s: float       # measured: the read stream (the model's DRAM ceiling)
    copy_bytes_per_s: float       # measured: a copy stream (read + write counted)
    dram_bytes: int               # capacity
    l2_bytes: int
    l2_bytes_per_clock: float     # whole chip, L2 -> SMs
    shared_bytes_per_clock_per_sm: float  # one wavefront (128 bytes) per SM per clock
    l1_sectors_per_clock_per_sm: float    # L1 tag lookups: 4 sectors (128 bytes) per SM per clock
    fp32_flops_per_s: float       # CUDA cores, FMA = 2 FLOPs
    tensor_flops_per_s: float     # fp16/bf16 dense, fp32 accumulate
    dram_latency_s: float         # pointer chase, idle
    l2_latency_s: float           # pointer chase, idle
    queue_latency_s: float        # the latency's growth: + queue x rho / (1 - rho)
    block_overhead_s: float       # a block's launch and retire on its SM slot
    block_rate_per_s: float       # blocks launched per second GPU-wide, at most
    launch_s: float               # one kernel launch in a stream, back to back
    graph_launch_s: float         # one kernel launch inside a CUDA graph
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
        return (f"{self.name} ({self.arch}): {self.sms} SMs at {self.clock_hz / 1e9:.2f} GHz, DRAM "
                f"{self.dram_bytes_per_s / 1e12:.2f} TB/s nominal, {self.read_bytes_per_s / 1e12:.2f} measured (read "
                f"stream), L2 {self.l2_bytes / MIB:.0f} MiB at {self.l2_bytes_per_s / 1e12:.1f} TB/s, shared "
                f"{self.shared_bytes_per_s / 1e12:.1f} TB/s, FP32 {self.fp32_flops_per_s / 1e12:.1f} TFLOP/s, "
                f"tensor {self.tensor_flops_per_s / 1e12:.0f} TFLOP/s")


# Fitted once by scripts/fit_queueing.py from the gh200 gpu-stream points (see _QUEUE); every GH100 entry uses them.
_QUEUE_S, _BLOCK_S = 86.5e-9, 201e-9

_GH100 = dict(
    arch="sm_90", sms=132, clock_hz=1.98e9, l2_bytes_per_clock=5120.0, shared_bytes_per_clock_per_sm=128.0,
    l1_sectors_per_clock_per_sm=4.0, fp32_flops_per_s=66.9e12, tensor_flops_per_s=989.4e12, dram_latency_s=347e-9,
    l2_latency_s=142e-9, queue_latency_s=_QUEUE_S, block_overhead_s=_BLOCK_S, block_rate_per_s=1.65e9,
    launch_s=2.45e-6, graph_launch_s=1.2e-6)
_GH100_SOURCES = dict(
    arch="compute capability 9.0 (Hopper)",
    sms=f"{_H100_WHITEPAPER}: 132 SMs on the SXM5 part (the H200 and GH200 use the same GH100 configuration)",
    clock_hz=f"{_H100_WHITEPAPER}: 1980 MHz boost (FP32 and FP64 peaks are computed at it); gpu-latency/gh200.txt "
             "reads 1980 MHz",
    l2_bytes_per_clock=_L2_BW,
    shared_bytes_per_clock_per_sm=f"{_CUDA_GUIDE}: 32 banks x 4 bytes per clock per SM",
    l1_sectors_per_clock_per_sm=f"{_HOPPER_BLOG}: L1 and shared memory share one 128 bytes/clock data path per SM",
    fp32_flops_per_s="NVIDIA H100 / H200 datasheets: FP32 67 TFLOPS (66.9 = 16896 cores x 2 x 1.98 GHz)",
    tensor_flops_per_s="NVIDIA H100 / H200 datasheets: FP16/BF16 Tensor Core 1979 TFLOPS with sparsity, 989.4 dense",
    dram_latency_s=_GH100_LATENCY, l2_latency_s=_GH100_LATENCY, queue_latency_s=_QUEUE, block_overhead_s=_BLOCK,
    block_rate_per_s=_BLOCK_RATE, launch_s=_LAUNCH, graph_launch_s=_LAUNCH)


def _gh100(name, **figures) -> GPU:
    sources = dict(_GH100_SOURCES, **figures.pop("sources"))
    return GPU(name=name, sources=sources, **dict(_GH100, **figures))


GPUS = {
    "h200": _gh100(
        "H200 SXM", dram_bytes_per_s=4.8e12, read_bytes_per_s=4.48e12, copy_bytes_per_s=4.01e12,
        dram_bytes=141 * 10**9, l2_bytes=60 * MIB,
        sources=dict(dram_bytes_per_s="NVIDIA H200 datasheet: 4.8 TB/s HBM3e",
                     read_bytes_per_s=f"{_AZURE}ND_H200_v5_results.md: BabelStream Dot 4.48 TB/s (fp64, reads only)",
                     copy_bytes_per_s=f"{_AZURE}ND_H200_v5_results.md: BabelStream Copy 4.01 TB/s",
                     dram_bytes="NVIDIA H200 datasheet: 141 GB HBM3e",
                     l2_bytes="torch.cuda.get_device_properties on an H200: L2 60 MiB (the full GH100's L2)",
                     dram_latency_s=f"assumed the GH200's (same GH100 die, HBM3e): {_GH100_LATENCY}")),
    "h100": _gh100(
        "H100 SXM", dram_bytes_per_s=3.35e12, read_bytes_per_s=3.18e12, copy_bytes_per_s=2.90e12,
        dram_bytes=80 * 10**9, l2_bytes=50 * MIB,
        sources=dict(dram_bytes_per_s="NVIDIA H100 datasheet: H100 SXM 3.35 TB/s HBM3",
                     read_bytes_per_s=f"{_AZURE}ND_H100_v5_results.md: BabelStream Dot 3.18 TB/s (fp64, reads only)",
                     copy_bytes_per_s=f"{_AZURE}ND_H100_v5_results.md: BabelStream Copy 2.90 TB/s",
                     dram_bytes="NVIDIA H100 datasheet: H100 SXM 80 GB",
                     l2_bytes=f"{_H100_WHITEPAPER}: 50 MB L2 (PyTorch reports 50 MiB)",
                     dram_latency_s=f"assumed the GH200's (same GH100 die, HBM3): {_GH100_LATENCY}")),
    "gh200": _gh100(
        "GH200", dram_bytes_per_s=4.0e12, read_bytes_per_s=3.78e12, copy_bytes_per_s=3.17e12,
        dram_bytes=96 * 10**9, l2_bytes=50 * MIB,
        sources=dict(dram_bytes_per_s="NVIDIA GH200 datasheet: 96 GB HBM3 at 4 TB/s",
                     read_bytes_per_s=f"{_GPU_BENCHES} gpu-stream/gh200.txt: triad 3783 GB/s at 100% occupancy, the "
                                      "highest read-dominated stream measured (3 load streams, 1 store)",
                     copy_bytes_per_s=f"{_GPU_BENCHES} gpu-stream/gh200.txt: scale 3174 GB/s at 100% occupancy",
                     dram_bytes="NVIDIA GH200 datasheet: 96 GB HBM3",
                     l2_bytes=f"assumed the H100 SXM's: {_H100_WHITEPAPER}: 50 MB")),
    "h100-pcie": GPU(
        name="H100 PCIe", arch="sm_90", sms=114, clock_hz=1.755e9, dram_bytes_per_s=2.0e12, read_bytes_per_s=2.016e12,
        copy_bytes_per_s=1.704e12, dram_bytes=80 * 10**9, l2_bytes=50 * MIB, l2_bytes_per_clock=5120.0,
        shared_bytes_per_clock_per_sm=128.0, l1_sectors_per_clock_per_sm=4.0, fp32_flops_per_s=51.2e12,
        tensor_flops_per_s=756.0e12, dram_latency_s=375e-9, l2_latency_s=151e-9, queue_latency_s=_QUEUE_S,
        block_overhead_s=_BLOCK_S, block_rate_per_s=1.65e9 * 114 / 132, launch_s=2.45e-6, graph_launch_s=1.2e-6,
        sources=dict(
            _GH100_SOURCES,
            sms=f"{_H100_WHITEPAPER}: H100 PCIe 114 SMs; {_GPU_BENCHES} gpu-stream/h100_pcie.txt: 114 SMs",
            clock_hz=f"{_GPU_BENCHES} gpu-stream/h100_pcie.txt: 1755 MHz",
            dram_bytes_per_s="NVIDIA H100 datasheet: H100 PCIe 2.0 TB/s HBM2e",
            read_bytes_per_s=f"{_GPU_BENCHES} gpu-stream/h100_pcie.txt: the init stream's plateau 2016 GB/s (stores; "
                             "no read-only stream reaches the plateau there: read 1942 GB/s at 100% occupancy)",
            copy_bytes_per_s=f"{_GPU_BENCHES} gpu-stream/h100_pcie.txt: scale 1704 GB/s at 100% occupancy",
            dram_bytes="NVIDIA H100 datasheet: H100 PCIe 80 GB", l2_bytes=f"{_H100_WHITEPAPER}: 50 MB",
            fp32_flops_per_s="NVIDIA H100 datasheet: H100 PCIe FP32 51 TFLOPS",
            tensor_flops_per_s="NVIDIA H100 datasheet: H100 PCIe FP16 Tensor Core 1513 TFLOPS with sparsity, 756 dense",
            dram_latency_s=f"{_GPU_BENCHES} gpu-latency plots (latencies_NV.svg): H100 PCIe DRAM about 375 ns",
            l2_latency_s=f"{_GPU_BENCHES} gpu-latency plots (latencies_NV.svg): H100 PCIe L2 about 151 ns",
            block_rate_per_s=f"the GH200's per SM ({_BLOCK_RATE}) x 114 SMs")),
    "a100": GPU(
        name="A100 SXM4 80 GB", arch="sm_80", sms=108, clock_hz=1.41e9, dram_bytes_per_s=2.039e12,
        read_bytes_per_s=1.75e12, copy_bytes_per_s=1.61e12, dram_bytes=80 * 10**9, l2_bytes=40 * MIB,
        l2_bytes_per_clock=5120.0, shared_bytes_per_clock_per_sm=128.0, l1_sectors_per_clock_per_sm=4.0,
        fp32_flops_per_s=19.5e12, tensor_flops_per_s=312.0e12, dram_latency_s=392e-9, l2_latency_s=146e-9,
        queue_latency_s=_QUEUE_S, block_overhead_s=_BLOCK_S, block_rate_per_s=1.65e9 * 108 / 132, launch_s=2.45e-6,
        graph_launch_s=1.2e-6,
        sources=dict(
            arch="compute capability 8.0 (Ampere)",
            sms=f"{_A100_WHITEPAPER}: 108 SMs", clock_hz=f"{_A100_WHITEPAPER}: 1410 MHz boost",
            dram_bytes_per_s="NVIDIA A100 datasheet: A100 80GB SXM 2,039 GB/s HBM2e",
            read_bytes_per_s=f"{_AZURE}ND_A100_v4_results.md: BabelStream Dot 1.75 TB/s (fp64, reads only)",
            copy_bytes_per_s=f"{_AZURE}ND_A100_v4_results.md: BabelStream Copy 1.61 TB/s",
            dram_bytes="NVIDIA A100 datasheet: 80 GB", l2_bytes=f"{_A100_WHITEPAPER}: 40 MB L2",
            l2_bytes_per_clock=f"{_A100_WHITEPAPER}: 5120 bytes/clk L2 read bandwidth",
            shared_bytes_per_clock_per_sm=f"{_CUDA_GUIDE}: 32 banks x 4 bytes per clock per SM",
            l1_sectors_per_clock_per_sm=f"{_A100_WHITEPAPER}: 128 bytes/clock L1 / shared per SM",
            fp32_flops_per_s="NVIDIA A100 datasheet: FP32 19.5 TFLOPS",
            tensor_flops_per_s="NVIDIA A100 datasheet: FP16 Tensor Core 312 TFLOPS dense",
            dram_latency_s=f"{_GPU_BENCHES} gpu-latency/a100_80.txt (1410 MHz): DRAM 552 cycles = 392 ns",
            l2_latency_s=f"{_GPU_BENCHES} gpu-latency/a100_80.txt: L2 206 cycles = 146 ns (near partition)",
            queue_latency_s=f"assumed the GH200's fit: {_QUEUE}", block_overhead_s=f"assumed the GH200's fit: {_BLOCK}",
            block_rate_per_s=f"the GH200's per SM ({_BLOCK_RATE}) x 108 SMs", launch_s=_LAUNCH,
            graph_launch_s=_LAUNCH)),
}
NAMES = tuple(GPUS)
DEFAULT = "h200"                      # the GPU the goals are stated for
DEFAULT_ARCH = GPUS[DEFAULT].arch     # what resources, sass and the sweep's static rows compile for by default


def get(name) -> GPU:
    """The GPU called `name` (case-insensitive), or a GPU given as is."""
    if isinstance(name, GPU):
        return name
    key = str(name).lower()
    if key not in GPUS:
        raise ValueError(f"device must be one of {', '.join(GPUS)}, got {name!r}")
    return GPUS[key]
