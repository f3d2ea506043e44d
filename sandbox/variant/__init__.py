"""Variants: what one declares (Limits), the registry that names them, and the runner that calls them.

    limits       Limits, Unsupported (a declared refusal), FULL_SUPPORT
    registry     name -> module; tests, check, benchmarks and the sweep walk it
    runner       sandbox.run: validate, check the limits, prepare, launch, result
    cache_write  the cache-write kernels' entry point
"""
from .limits import DTYPES, FULL_SUPPORT, POW2_BLOCK_SIZES, Limits, Unsupported

__all__ = ["Limits", "Unsupported", "FULL_SUPPORT", "POW2_BLOCK_SIZES", "DTYPES"]
