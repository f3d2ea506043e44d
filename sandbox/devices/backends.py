"""Where a variant runs: a real GPU, or the CPU (Numba CUDA simulator / the CUDA C executor).

The Numba CUDA simulator is chosen once per process, at the first import of numba.cuda
(NUMBA_ENABLE_CUDASIM), so `configure_numba()` runs when `sandbox` is imported: it turns the
simulator on exactly when no GPU is present, unless the user already chose.
"""
from __future__ import annotations

import functools
import os
import sys

from ..errors import RefusedRequest
from .grid import CheckedModule

BACKENDS = ("auto", "gpu", "cpu")


@functools.lru_cache(maxsize=None)
def gpu_present() -> bool:
    """True when the CUDA driver loads and reports at least one device (no numba/cupy import)."""
    if os.environ.get("SANDBOX_FORCE_NO_GPU") == "1":
        return False
    try:
        from cuda.bindings import driver
    except ImportError:
        return False
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:  # driver library missing: cuda.pathfinder raises its own error types
        return False


def configure_numba() -> None:
    """Pick simulator mode from GPU presence before numba.cuda is first imported."""
    if "NUMBA_ENABLE_CUDASIM" not in os.environ and "numba.cuda" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":  # shared memory poisoned per block: sandbox/devices/numba_poison.py
        from . import numba_poison; numba_poison.install()  # noqa: E702


def numba_simulated() -> bool:
    """Whether numba.cuda in this process is (or will be) the simulator."""
    if "numba.cuda" in sys.modules:
        from numba import config
        return bool(config.ENABLE_CUDASIM)
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


@functools.lru_cache(maxsize=None)
def cupy_usable() -> bool:
    """CuPy importable and a GPU present."""
    if not gpu_present():
        return False
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


NO_GPU = ("--backend gpu: no NVIDIA GPU was found here (the CUDA driver reports none); use --backend cpu or auto")


def require_gpu_if_asked(backend: str) -> None:
    """Every command's one no-GPU guard: --backend gpu on a machine without a GPU is a ValueError (exit 2)
    saying so, before anything runs or is written."""
    if backend == "gpu" and not gpu_present():
        raise RefusedRequest(NO_GPU)


def resolve(backend: str, family: str, runtime: str) -> str:
    """Map "auto" to "gpu" or "cpu" for a variant family running on `runtime` ("host": the CPU only;
    "gpu_or_cpu": a GPU where CuPy can use one; "numba": this process's numba.cuda mode), as the family declares
    it (sandbox/variant/family.py: Family.resolve); refuse what cannot run here, clearly."""
    if backend not in BACKENDS:
        raise RefusedRequest(f"backend must be one of {BACKENDS}, got {backend!r}")
    if runtime == "host":
        if backend == "gpu":
            raise RefusedRequest(f"backend='gpu' is not available for {family}.* variants: they run on the CPU only")
        return "cpu"
    if runtime == "gpu_or_cpu":
        if backend == "auto":
            return "gpu" if cupy_usable() else "cpu"
        if backend == "gpu" and not cupy_usable():
            raise RefusedRequest("backend='gpu' needs an NVIDIA GPU and CuPy (pip install '.[gpu-cuda12]' or '.[gpu-cuda13]')")
        return backend
    if runtime == "numba":
        if backend == "auto":
            return "cpu" if numba_simulated() else "gpu"
        if backend == "gpu" and not gpu_present():
            raise RefusedRequest("backend='gpu' needs an NVIDIA GPU; none was found (numba runs under the simulator here)")
        return backend
    raise RefusedRequest(f"unknown runtime {runtime!r} of the {family} family")


def numba_needs_other_process(backend: str) -> bool:
    """True when a numba variant must run in a child process because this one is in the other mode."""
    return (backend == "cpu") != numba_simulated()


def to_device(array, backend: str):
    """Upload for a GPU backend; the CPU executor and simulator take host NumPy arrays."""
    if backend == "gpu":
        import cupy
        return cupy.asarray(array)
    return array


def to_host(array):
    """NumPy view of a result from any backend."""
    if hasattr(array, "get"):
        return array.get()
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    return array


def synchronize(backend: str) -> None:
    if backend == "gpu" and cupy_usable():
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def raw_module(backend: str, code: str, options=(), name_expressions=None, **cpu_options):
    """cupy.RawModule on a GPU, the CPU executor's CpuRawModule elsewhere; same call either way.

    Either is wrapped in sandbox.devices.grid.CheckedModule: every launch of a kernel it returns checks its
    grid and block against CUDA's limits first (ValueError naming the kernel and the dimension).
    """
    if backend == "gpu":
        import cupy
        return CheckedModule(cupy.RawModule(code=code, options=tuple(options), name_expressions=name_expressions))
    from ..cpucuda import CpuRawModule
    return CheckedModule(CpuRawModule(code=code, options=tuple(options), name_expressions=name_expressions,
                                      **cpu_options))
