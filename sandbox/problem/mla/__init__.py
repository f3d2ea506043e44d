"""The MLA problem kind's problem-layer parts (its instance is sandbox.problem.kinds.MLA).

    problem     MLAProblem: multi-head latent attention over a paged latent cache, dense or top-k sparse
    record      the fp8 latent record (656 bytes: 512 e4m3 codes, 4 float32 scales, 64 bf16 RoPE dims)
    validate    every MLA input checked before any launch; the token slots and row positions it reads
    paging      block tables and sparse index sets for MLAProblem's constructors
    strategies  the hypothesis strategy every MLA property test draws from (imported on its own: hypothesis)
"""
from .problem import MLAProblem

__all__ = ["MLAProblem"]
