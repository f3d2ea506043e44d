"""Files of the CUDA wheels (headers, nvdisasm): cuda.pathfinder first, then the wheels' folders by hand.

The wheels install under the `nvidia` namespace package: CUDA 13's in one folder (nvidia/cu13),
CUDA 12's one folder per component (nvidia/cuda_runtime, nvidia/cuda_nvdisasm, ...).
"""
from __future__ import annotations

import importlib.util
import pathlib


def in_nvidia_wheels(relative: str, packages=("nvidia.cu13",)) -> pathlib.Path | None:
    """The first `<package folder>/<relative>` that exists, for each of `packages` in order; else None."""
    for package in packages:
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:  # no `nvidia` namespace at all
            return None
        for root in (spec.submodule_search_locations or []) if spec else []:
            candidate = pathlib.Path(root) / relative
            if candidate.exists():
                return candidate
    return None


def pathfinder_lookup(function: str, name: str) -> str | None:
    """cuda.pathfinder.<function>(name) as a string, or None where that fails or the function is missing
    (older cuda-pathfinder releases)."""
    try:
        import cuda.pathfinder
        found = getattr(cuda.pathfinder, function)(name)
    except Exception:  # not found, or a cuda-pathfinder without that lookup: the caller looks by hand
        return None
    return str(found) if found else None
