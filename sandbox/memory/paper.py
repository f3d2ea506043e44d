"""The vLLM paper's published figures this repository compares against (Kwon et al., SOSP 2023).

Only numbers stated in the paper's text are kept here; figures read off a plot are not.
"""
from __future__ import annotations

# Sec. 1-3 (Fig. 2): share of the KV cache memory holding token states in prior systems (Orca Max/Pow2/Oracle,
# FasterTransformer), and vLLM's "mere waste of under 4%".
TOKEN_STATES_PRIOR = (0.204, 0.382)
VLLM_WASTE_BELOW = 0.04

# Fig. 15 / Sec. 6.3: memory saved by sharing = blocks saved / blocks without sharing, at parallel sizes and
# beam widths 2, 4, 6 (OPT-13B). The paper gives the range over the widths, smallest width first.
FIG15_WIDTHS = (2, 4, 6)
FIG15 = {
    "alpaca": {"parallel": (0.061, 0.098), "beam": (0.376, 0.552)},
    "sharegpt": {"parallel": (0.162, 0.305), "beam": (0.443, 0.663)},
}

# Sec. 6.2 (Fig. 12, ShareGPT): request rate vLLM sustains at similar latency, relative to each baseline;
# Fig. 13a: requests batched at once by vLLM relative to each baseline (OPT-13B).
FIG12_RATE_RATIO = {"oracle": (1.7, 2.7), "max": (2.7, 8.0)}
FIG13_BATCH_RATIO = {"oracle": 2.2, "max": 4.3}
# Sec. 6.2: FasterTransformer (static batching) against vLLM on ShareGPT: "up to 22x" higher request rates.
FIG12_RATE_RATIO_STATIC = 22.0

# Sec. 6.4 (Fig. 16, LLaMA-13B, WMT16 English-to-German): the shared prefixes (one and five translation
# examples) and vLLM's throughput over Orca (Oracle) with each.
FIG16_PREFIX_TOKENS = {"one-shot": 80, "five-shot": 341}
FIG16_RATE_RATIO = {"one-shot": 1.67, "five-shot": 3.58}

# Sec. 7.2 (Fig. 18): block sizes 16-128 give the best ShareGPT performance, 16 and 32 on Alpaca; vLLM's
# default is 16. Sec. 7.3 (Fig. 19): swap's overhead falls with the block size, recompute's does not
# depend on it; the two are comparable at block sizes 16-64.
FIG18_BEST_BLOCK_SIZES = {"sharegpt": (16, 128), "alpaca": (16, 32)}
FIG19_COMPARABLE_BLOCK_SIZES = (16, 64)
