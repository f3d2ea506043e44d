"""The roofline of a device with modelled points on it: what kernel engineers reach for first.

    roofline_figure(points, device) -> matplotlib Figure
        points: [dict(label, flops, dram_bytes, time_us, latency_bytes_per_s=None)]

x: FLOPs per DRAM byte (log), y: the modelled attainable rate, FLOPs / modelled time (log). The ceilings come from
the device table (sandbox.analysis.gpus): the measured read and copy streams and the nominal DRAM bandwidth as
slopes, the FP32 and tensor-core peaks as flat roofs. A point with `latency_bytes_per_s` also gets its own
latency-bound roof (dotted, its colour): the rate its bytes in flight allow, the latency level's bandwidth.
Headed as a model: nothing here is a measurement.
"""
from __future__ import annotations

from sandbox.analysis import gpus

from .mpl import pyplot


def roofline_figure(points, device=gpus.DEFAULT):
    plt = pyplot()
    gpu = gpus.get(device)
    points = [p for p in points if p["flops"] and p["dram_bytes"] and p["time_us"]]
    fig, ax = plt.subplots(figsize=(8, 6), layout="constrained")
    xs = [p["flops"] / p["dram_bytes"] for p in points] or [1.0]
    lo, hi = min(xs + [0.1]) / 4, max(xs + [gpu.tensor_flops_per_s / gpu.read_bytes_per_s]) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for bandwidth, style, label in ((gpu.dram_bytes_per_s, "--", "nominal DRAM"),
                                    (gpu.read_bytes_per_s, "-", "measured read stream"),
                                    (gpu.copy_bytes_per_s, ":", "measured copy stream")):
        ax.plot(grid, [min(x * bandwidth, gpu.tensor_flops_per_s) for x in grid], style, color="black", lw=1,
                label=f"{label} {bandwidth / 1e12:.2f} TB/s")
    for peak, label in ((gpu.fp32_flops_per_s, "FP32"), (gpu.tensor_flops_per_s, "tensor (fp16/bf16 dense)")):
        ax.axhline(peak, color="grey", lw=0.8, ls="-.")
        ax.text(lo * 1.1, peak * 1.08, f"{label} {peak / 1e12:.0f} TFLOP/s", fontsize=8, color="grey")
    cmap = plt.get_cmap("tab10" if len(points) <= 10 else "tab20")
    for i, p in enumerate(points):
        color = cmap(i % cmap.N)
        x, y = p["flops"] / p["dram_bytes"], p["flops"] / (p["time_us"] / 1e6)
        ax.plot([x], [y], "o", color=color, label=f"{p['label']}: {y / 1e12:.2f} TFLOP/s")
        if p.get("latency_bytes_per_s"):
            ax.plot(grid, [g * p["latency_bytes_per_s"] for g in grid], ":", color=color, lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min([p["flops"] / (p["time_us"] / 1e6) for p in points] + [lo * gpu.read_bytes_per_s]) / 4,
                gpu.tensor_flops_per_s * 2)
    ax.set_xlabel("FLOPs per DRAM byte (counted on the CPU)")
    ax.set_ylabel("modelled attainable FLOP/s")
    ax.set_title(f"MODEL ({gpu.name}), not a measurement: roofline\n(dotted in a point's colour: the latency-bound "
                 "roof of its bytes in flight)", fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    fig.legend(loc="outside lower center", fontsize=7, ncol=2)
    return fig
