"""The traffic and modelled time of a micro variant (kernels/micro/, the "micro" problem kind): sandbox.traffic's
path for a micro problem (its family, declared in kernels/micro/__init__.py, is CUDA C on the executor).

    traffic(variant, problem, gpu, census=True, config=None) -> dict   the same keys as variant.traffic()

Every block of micro.read does identical work over its own, aligned stretch of the buffer, so one block is run on
the CPU executor in traffic mode (its loads a block's sweep apart instead of the grid's: the same sectors per
request, every byte read once) and its counts are scaled by the grid; a last, partial block counts as a whole one.
The compile census of the same instantiation (NVRTC for the device's arch) gives its registers, the spoiler that
forces `blocks_per_sm`, and the loads in flight read from its SASS.
"""
from __future__ import annotations

import math

import numpy as np

from .. import gpus, model as _model
from ..occupancy import occupancy
from .census import assumed_loads, loads_fields, model_kernel, nvrtc_census, scaled, scaled_sites
from .count import count
from sandbox.cpucuda import CpuRawKernel, traffic_capture
from sandbox.variant import tunables

_ELEMENT = {4: np.float32, 8: np.float64, 16: np.float64}  # 16 bytes: a double2, two float64 per element


def traffic(variant, problem, gpu, census: bool = True, config: dict | None = None) -> dict:
    gpu = gpus.get(gpu)
    variant.limits.check(variant.name, problem, "cpu")
    cfg = variant.configuration(config)
    threads, per_sm, width, loads = cfg["threads"], cfg["blocks_per_sm"], cfg["vector_bytes"], cfg["loads"]
    module = variant.module
    code, name = module.source(), module.kernel_name(width, loads)
    if census:
        res, reading = nvrtc_census(code, name, (), gpu.arch)
        registers, static = res.registers, res.static_shared_bytes
        in_flight = loads_fields(reading, gpu.arch)
    else:  # without registers only the warp slots and shared memory bound the occupancy
        registers, static = 0, 0
        in_flight = assumed_loads("no compile census (census=False)")
    spoiler = module.spoiler_bytes(registers, static, threads, per_sm, gpu.arch)
    occ = occupancy(registers, static + spoiler, threads, gpu.arch)
    elements = math.ceil(problem.total_bytes / width)
    blocks = math.ceil(elements / (threads * loads))
    words = threads * loads * (2 if width == 16 else 1)
    data, sink = np.zeros(words, _ELEMENT[width]), np.zeros(threads, np.float64)
    kernel = CpuRawKernel(code, name, traffic=True)
    kernel.max_dynamic_shared_size_bytes = spoiler  # the opt-in a GPU launch makes for a spoiler past 48 KiB
    with traffic_capture() as launches:
        kernel((1,), (threads,), (data, sink, np.int64(threads * loads), np.int64(threads), np.int32(0)),
               shared_mem=spoiler)
    call = count(launches, gpu)
    metrics = scaled(call.metrics, blocks)
    (launch,) = call.launches
    res_fields = dict(registers=registers, static_shared_bytes=static, dynamic_shared_bytes=spoiler,
                      threads_per_block=threads, occupancy=round(occ.fraction, 4), blocks_per_sm=occ.blocks_per_sm,
                      limiter=occ.limiter, **in_flight)
    kernels = [dict(name=launch.kernel, grid=(blocks, 1, 1), block=launch.block, counted_grid=launch.grid,
                    metrics=metrics, sites=scaled_sites(launch.sites, blocks), notes=launch.notes, flops=0.0,
                    **res_fields)]
    model_input = model_kernel(launch.kernel, metrics, (blocks, 1, 1), launch.block, res_fields, 0.0)
    notes = [f"one block counted and scaled x{blocks} (every block reads its own {threads * loads * width:,} B)"]
    if not census:
        notes.append(f"{launch.kernel}: compile census unavailable (not asked for (census=False))")
    return dict(variant=variant.name, config=tunables.describe(cfg), device=gpu.name, problem=problem.describe(),
                metrics=metrics, kernels=kernels, ideal_bytes=problem.ideal_bytes(),
                model=_model.predict([model_input], gpu), scale=float(blocks), notes=notes)
