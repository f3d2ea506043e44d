"""Paged-attention kernel sandbox: write, check and race paged decode kernels.

    sandbox.variants(family=None, problem="decode") -> list[str]      problem: "decode", "mla" or None (all)
    sandbox.run(name, query, key_cache, value_cache, block_tables, context_lens, scale=None, *, query_start=None,
                backend="auto", config=None, **options)      options: docs/options.md (the option table)
    sandbox.merge_states(out_a, lse_a, out_b, lse_b) -> (out, lse)   two partial results merged exactly
    sandbox.run_mla(name, query, latent_cache, block_tables, context_lens, scale=None, *, query_start=None,
                    indices=None, return_lse=False, backend="auto", config=None)   multi-head latent attention
    sandbox.tunables(name) -> {parameter: allowed values}   the kernel parameters a run may choose
    sandbox.traffic(name, problem, device="h200") -> dict   memory traffic counted on the CPU + modelled GPU time
"""
from .devices.backends import configure_numba as _configure_numba

_configure_numba()  # before anything imports numba.cuda: simulator exactly when there is no GPU

from .problem.decode import DecodeProblem  # noqa: E402
from .problem.mla import MLAProblem  # noqa: E402
from .variant.registry import declared_tunables as tunables, variants  # noqa: E402
from .variant.runner import run, run_problem  # noqa: E402
from .variant.limits import Unsupported  # noqa: E402
from .variant.mla.runner import run_mla, run_mla_problem  # noqa: E402
from reference.merge import merge_states  # noqa: E402
from .analysis.traffic.variant import traffic  # noqa: E402

__all__ = ["variants", "tunables", "run", "run_problem", "DecodeProblem", "Unsupported", "MLAProblem", "run_mla",
           "run_mla_problem", "merge_states", "traffic"]
