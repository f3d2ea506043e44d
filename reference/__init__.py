"""The truth: plain NumPy, float64, one loop over tokens. No cleverness, no speed.

Every kernel in the sandbox is held to ``paged_attention`` (``paged_decode`` is its decode case), every
MLA kernel to ``mla_attention`` (multi-head latent attention, dense or top-k sparse). Read them top to bottom:
they are the definitions used throughout the project. ``gathered_attention`` is paged_attention's vectorized
twin (the same float64 math per sequence and KV head, tested equal to it), for problems too large for the loop;
``sequence_attention`` is that twin for one sequence's contiguous tokens. ``merge_states`` merges two partial
results by their log-sum-exps; ``write_cache`` stores new tokens in every cache format.
"""
from .cache_write import write_cache
from .merge import merge_states, sink_factor
from .mla_attention import mla_attention
from .paged_attention import dense_decode, paged_attention, paged_decode
from .vectorized import gather_tokens, gathered_attention, sequence_attention

__all__ = ["paged_decode", "paged_attention", "dense_decode", "write_cache", "gathered_attention",
           "sequence_attention", "gather_tokens", "merge_states", "sink_factor", "mla_attention"]
