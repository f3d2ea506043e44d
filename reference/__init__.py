"""The truth: plain NumPy, float64, one loop over tokens. No cleverness, no speed.

Every kernel in the sandbox is held to ``paged_attention`` (``paged_decode`` is its decode case), every
MLA kernel to ``mla_attention`` (multi-head latent attention, dense or top-k sparse). Read them top to bottom:
they are the definitions used throughout the project.
"""
from .mla_attention import mla_attention
from .paged_attention import dense_decode, paged_attention, paged_decode, write_cache

__all__ = ["paged_decode", "paged_attention", "dense_decode", "write_cache", "mla_attention"]
