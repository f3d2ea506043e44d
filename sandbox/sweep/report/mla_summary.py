"""The sweep summary's MLA table: bytes read and FLOPs per point, and which roof an H200 would hit first.

The roofs are modelled, not measured: the H200's nominal HBM bandwidth, CUDA-core fp32 and dense bf16 tensor-core
peaks, from the device table (sandbox.analysis.gpus, datasheet figures with their sources). A point's bound on a roof is bytes / bandwidth or
FLOPs / peak; the larger of the memory and the compute bound is the least time the step can take there.
FLOPs are exact (MLAProblem.flops(): 2 x (576 + 512) per query row, head and token read); bytes are what
the step needs (MLAProblem.bytes_moved(): each latent row read once, query, output, lse, table or indices).
"""
from __future__ import annotations

from sandbox.analysis import gpus

from sandbox.problem import kinds
from .text_table import table

_H200 = gpus.get("h200")
H200_BYTES_PER_S = _H200.dram_bytes_per_s
H200_CUDA_CORE_FLOPS = _H200.fp32_flops_per_s
H200_TENSOR_CORE_FLOPS = _H200.tensor_flops_per_s


def bound(nbytes: float, flops: float, peak: float) -> tuple[float, str]:
    """(least seconds on an H200 with `peak` FLOP/s, "memory" or "compute": which roof binds)."""
    memory, compute = nbytes / H200_BYTES_PER_S, flops / peak
    return max(memory, compute), "memory" if memory >= compute else "compute"


def mla_table(rows) -> list[str]:
    """One line per correct MLA point: time, MB read, GFLOP, FLOP/byte, achieved GB/s and GFLOP/s, and the
    modelled H200 bound on CUDA cores and on tensor cores."""
    points = [r for r in rows if r.get("problem") == kinds.MLA.name and r["status"] == "ok" and r.get("flops")]
    if not points:
        return []
    body = []
    for r in points:
        nbytes, flops, seconds = float(r["bytes"]), float(r["flops"]), float(r["time_us"]) / 1e6
        cuda, cuda_roof = bound(nbytes, flops, H200_CUDA_CORE_FLOPS)
        tensor, tensor_roof = bound(nbytes, flops, H200_TENSOR_CORE_FLOPS)
        body.append([r["shape"], r["block_size"], r["variant"], r["backend"], f"{r['time_us']:.4g}",
                     f"{nbytes / 1e6:.4g}", f"{flops / 1e9:.4g}", f"{flops / nbytes:.1f}",
                     f"{r['gbps']:.3g}", f"{flops / seconds / 1e9:.3g}",
                     f"{cuda * 1e6:.4g} {cuda_roof}", f"{tensor * 1e6:.4g} {tensor_roof}"])
    return ["MLA points: bytes read and FLOPs per point (modelled H200 least time: 4.8 TB/s; CUDA cores 67 TFLOPS "
            "fp32, tensor cores 989 TFLOPS bf16; the binding roof named)",
            *table(["shape", "bs", "variant", "backend", "time_us", "MB", "GFLOP", "FLOP/B", "GB/s", "GFLOP/s",
                     "H200 cuda-core us", "H200 tensor us"], body)]
