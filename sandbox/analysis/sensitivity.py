"""How a modelled time moves with the model's least certain inputs, and whether a verdict flips inside their ranges
(`python -m sandbox traffic --sensitivity`).

    CASES                                   the what-ifs: DRAM latency -25% / +25%, the copy stream as the DRAM
                                            ceiling (instead of the read stream), loads per wait -1 / +1
    times(result, device) -> {case: us}     one traffic() result re-modelled under each case ("model": as is)
    flips(points) -> list[str]              [(label, times)] compared: the cases under which another is fastest

The counts do not change (they are exact); only the model's figures do. Loads per wait never go below 1.
"""
from __future__ import annotations

from . import gpus, model
from .traffic.census import model_kernel

CASES = ("latency -25%", "latency +25%", "copy stream", "loads -1", "loads +1")


def _what_if(case: str, gpu: gpus.GPU) -> dict:
    return {"latency -25%": dict(latency_scale=0.75), "latency +25%": dict(latency_scale=1.25),
            "copy stream": dict(dram_bytes_per_s=gpu.copy_bytes_per_s), "loads -1": dict(per_wait_delta=-1.0),
            "loads +1": dict(per_wait_delta=1.0)}[case]


def kernels_of(result: dict) -> list[model.Kernel]:
    """The model's inputs of a traffic() result (each kernel's counts, grid, block, census and FLOPs share)."""
    return [model_kernel(k["name"], k["metrics"], k["grid"], k["block"], k, k.get("flops", 0.0))
            for k in result["kernels"]]


def times(result: dict, device=gpus.DEFAULT) -> dict:
    """{"model": the modelled us, case: us under that case} for one traffic() result."""
    gpu = gpus.get(device)
    kernels = kernels_of(result)
    out = {"model": model.predict(kernels, gpu)["time_us"]}
    for case in CASES:
        out[case] = model.predict(kernels, gpu, **_what_if(case, gpu))["time_us"]
    return out


def flips(points: list[tuple[str, dict]]) -> list[str]:
    """For points compared with one another ([(label, times())]), each case under which the fastest differs from
    the model's fastest, in words; [] when the verdict holds in every case."""
    if len(points) < 2:
        return []
    fastest = min(points, key=lambda p: p[1]["model"])[0]
    out = []
    for case in CASES:
        winner = min(points, key=lambda p: p[1][case])[0]
        if winner != fastest:
            out.append(f"{case}: {winner} is fastest, not {fastest}")
    return out
