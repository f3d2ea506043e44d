"""The problem: canonical paged-attention inputs, their options and dtypes, validation, and hypothesis strategies.

    decode      DecodeProblem (host arrays, seeded random/shared constructors whose repr rebuilds them)
    mla         MLAProblem: multi-head latent attention, dense or top-k sparse (mla_record: the fp8 record,
                mla_validate: its validation, mla_paging: its tables and index sets, mla_strategies: its
                hypothesis strategy)
    options     AttentionOptions (k/v scales, sliding window, soft-cap, ALiBi)
    dtypes      query and cache dtypes (ml_dtypes' bfloat16 and fp8)
    tables      random block tables (shuffled, shared prefixes, allocator-made) for every problem kind
    kinds       ProblemKind: DECODE and MLA as objects (name, problem class, entry, reference; the parts the
                layers above attach), where code would switch on the kind's name
    validate    every input checked before any launch, errors naming the argument and the bound
    strategies  the hypothesis strategy every property test draws from (imported on its own: hypothesis)
    micro       MicroReadProblem: the micro-benchmark kind (a byte count) that micro.read sweeps
"""
from .decode import DecodeProblem, shuffled_blocks
from .mla import MLAProblem
from .options import PLAIN, AttentionOptions

__all__ = ["DecodeProblem", "MLAProblem", "AttentionOptions", "PLAIN", "shuffled_blocks"]
