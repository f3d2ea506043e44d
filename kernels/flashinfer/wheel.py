"""Where the installed flashinfer-python wheel keeps its CUDA headers, found without importing it.

    locate() -> Wheel            the include folders and version, or raises Unsupported with a one-line reason
    missing() -> str | None      why the wheel cannot be used here, or None (the family's `unavailable`)
    label() -> str               "FlashInfer 0.7.4", or why none runs (the family's `peer`)

The sandbox never imports flashinfer (its __init__ needs torch and a GPU): importlib.util.find_spec reads
where the package lies, importlib.metadata its version, and the headers are plain files under
flashinfer/data/. The project pins the version it was checked against (pyproject.toml, SUPPORTED); another
version is refused with the reason, because the kernel's template parameters and params struct move between
releases.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
from pathlib import Path

from sandbox.variant import Unsupported

DISTRIBUTION = "flashinfer-python"
SUPPORTED = ("0.7.4",)   # pyproject.toml pins the first
HEADER = Path("include") / "flashinfer" / "attention" / "decode.cuh"
CCCL = Path("cccl") / "libcudacxx" / "include"


@dataclasses.dataclass(frozen=True)
class Wheel:
    version: str
    data: Path           # flashinfer/data

    @property
    def include_dirs(self) -> tuple[Path, Path]:
        """FlashInfer's headers, then the CCCL (libcu++) they include as <cuda/...>."""
        return self.data / "include", self.data / CCCL

    @property
    def label(self) -> str:
        return f"FlashInfer {self.version}"


@functools.lru_cache(maxsize=None)
def locate() -> Wheel:
    """The installed wheel, or Unsupported naming what is missing or which version is installed instead."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        raise Unsupported(f"{DISTRIBUTION} is not installed (make setup installs {DISTRIBUTION}=={SUPPORTED[0]} "
                          "without its dependencies)")
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if version not in SUPPORTED:
        raise Unsupported(f"{DISTRIBUTION} {version} is installed; the sandbox's launcher is written for "
                          f"{', '.join(SUPPORTED)} (pip install --no-deps {DISTRIBUTION}=={SUPPORTED[0]})")
    data = Path(spec.submodule_search_locations[0]) / "data"
    missing = [str(data / p) for p in (HEADER, CCCL) if not (data / p).exists()]
    if missing:
        raise Unsupported(f"{DISTRIBUTION} {version} lacks {missing[0]} (a wheel without its CUDA sources?)")
    return Wheel(version, data)


def missing() -> str | None:
    """Why this peer cannot run here (the wheel missing, another version), or None: `check` says it once."""
    try:
        locate()
    except Unsupported as exc:
        return str(exc)
    return None


def label() -> str:
    """How the sweep marks the peer's variants: the project and the version of the wheel it runs, or why none runs."""
    try:
        return locate().label
    except Unsupported as exc:
        return f"FlashInfer unavailable: {exc}"
