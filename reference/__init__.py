"""The truth: plain NumPy, float64, one loop over tokens. No cleverness, no speed.

Every kernel in the sandbox is held to ``paged_decode``. Read it top to bottom: it
is the definition of paged decode attention used throughout the project.
"""
from .paged_attention import dense_decode, paged_decode, write_cache

__all__ = ["paged_decode", "dense_decode", "write_cache"]
