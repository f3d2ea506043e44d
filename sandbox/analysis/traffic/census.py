"""What the traffic drivers (variant.py, micro.py) share about one launched kernel: its compile census as the model
reads it, and its counts scaled from the blocks counted to the whole grid.

    nvrtc_census(code, name, options, arch) -> (Resources, LoadsInFlight or the reason its SASS was not read)
    read_loads(cubin, function) -> LoadsInFlight or the reason      the loads a kernel's warps keep in flight
    loads_fields(reading, arch) / assumed_loads(why) -> dict         a launch's loads-in-flight fields
    scaled(metrics, scale) / scaled_sites(sites, scale)              counts of the counted blocks, for the grid
    model_kernel(name, metrics, grid, block, census, flops)          the model's view of one launch (model.Kernel)
"""
from __future__ import annotations

import functools

import numpy as np

from .. import loads_in_flight as _loads, model as _model, nvrtc, sass


@functools.lru_cache(maxsize=64)
def nvrtc_census(code: str, name: str, options: tuple, arch: str):
    """(Resources, loads_in_flight.LoadsInFlight or the reason the SASS could not be read) of one instantiation."""
    compiled = nvrtc.compile_cubin(code, [name], arch=arch, options=options)
    return compiled.resources[name], read_loads(compiled.cubin, compiled.lowered[name])


def read_loads(cubin: bytes, function: str | None):
    """The loads in flight read from one function's SASS, or why they could not be (nvdisasm missing, ...)."""
    try:
        return _loads.read(sass.function_sass(cubin, function))
    except Exception as exc:  # the model says what it assumed instead
        return f"{type(exc).__name__}: {exc}"[:200]


def loads_fields(reading, arch: str) -> dict:
    """The per-kernel loads-in-flight fields of a SASS reading (or of the reason there is none)."""
    if isinstance(reading, str):
        return assumed_loads(f"SASS unreadable ({reading})")
    return dict(loads_in_flight=reading.loads_in_flight, loads_per_wait=round(reading.per_wait, 3),
                load_chain=reading.chain, loads_in_flight_source="sass", loads_in_flight_detail=f"{arch}: "
                + reading.describe())


def assumed_loads(why: str) -> dict:
    return dict(loads_in_flight=_model.ASSUMED_LOADS_IN_FLIGHT, loads_per_wait=float(_model.ASSUMED_LOADS_IN_FLIGHT),
                load_chain=None, loads_in_flight_source=f"assumed {_model.ASSUMED_LOADS_IN_FLIGHT} per wait: {why}")


def scaled(metrics: dict, scale: float) -> dict:
    return {k: int(round(v * scale)) for k, v in metrics.items()}


def scaled_sites(sites: list, scale: float) -> list:
    fields = ("requests", "sectors", "wavefronts", "bank_conflicts")
    return [{k: (int(round(v * scale)) if k in fields else v) for k, v in s.items()} for s in sites]


def model_kernel(name: str, metrics: dict, grid, block, census: dict, flops: float) -> _model.Kernel:
    """The model's view of one launch: its counts, grid and block, and its census (occupancy, loads in flight)."""
    source = census.get("loads_in_flight_source", "assumed")
    return _model.Kernel(name, metrics, int(np.prod(grid)), int(np.prod(block)), census.get("blocks_per_sm"),
                         int(census.get("loads_in_flight", _model.ASSUMED_LOADS_IN_FLIGHT)), flops,
                         "sass" if source == "sass" else source, census.get("loads_per_wait"))
