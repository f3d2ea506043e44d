"""The MLA problem kind's variant-layer parts (attached to sandbox.problem.kinds.MLA when imported).

    limits   MLALimits: what an MLA variant declares (its LIMITS), and the refusals of what it does not
    runner   sandbox.run_mla / run_mla_problem / prepare_mla: validate, check the limits, prepare, launch, (out, lse)
"""
from .limits import MLALimits
from .runner import prepare_mla, run_mla, run_mla_problem

__all__ = ["MLALimits", "prepare_mla", "run_mla", "run_mla_problem"]
