"""The truth: plain NumPy, float64, one loop over tokens. No cleverness, no speed.

Every kernel in the sandbox is held to ``paged_attention`` (``paged_decode`` is its decode case). Read it top to bottom: it
is the definition of paged decode attention used throughout the project.
"""
from .paged_attention import dense_decode, paged_attention, paged_decode, write_cache

__all__ = ["paged_decode", "paged_attention", "dense_decode", "write_cache"]
