"""Variants and families: what a variant declares (Limits), what a family declares (Family), the registry that
names both, the runners that call them, and the harness every CUDA C family loads and launches through.

    limits       Limits, Unsupported (a declared refusal), KERNEL_SUPPORT
    family       Family: how a family's variants run, get counted and report their census (docs/adding-a-family.md)
    registry     variant name -> module, family name -> package; tests, check, benchmarks and the sweep walk it
    runner       sandbox.run: validate, check the limits, prepare, launch, result (mla_runner: sandbox.run_mla)
    cache_write  the cache-write kernels' entry point
    cuda_source  the option table's CUDA C prelude, .cu loading with local headers inlined, C type names
    cuda_launch  the module cache, the executor's options, Prepared, the shared-memory limit, the NVRTC census
"""
from .limits import DTYPES, KERNEL_SUPPORT, POW2_BLOCK_SIZES, Limits, Unsupported

__all__ = ["Limits", "Unsupported", "KERNEL_SUPPORT", "POW2_BLOCK_SIZES", "DTYPES"]
