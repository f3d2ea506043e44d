"""Paged-attention kernel sandbox: write, check and race paged decode kernels.

    sandbox.variants(family=None) -> list[str]
    sandbox.run(name, query, key_cache, value_cache, block_tables, context_lens, scale=None, *, query_start=None,
                backend="auto", **options)      options: docs/options.md (the option table)
    sandbox.merge_states(out_a, lse_a, out_b, lse_b) -> (out, lse)   two partial results merged exactly
"""
from .devices.backends import configure_numba as _configure_numba

_configure_numba()  # before anything imports numba.cuda: simulator exactly when there is no GPU

from .problem.decode import DecodeProblem  # noqa: E402
from .variant.registry import variants  # noqa: E402
from .variant.runner import run, run_problem  # noqa: E402
from .variant.limits import Unsupported  # noqa: E402
from reference.merge import merge_states  # noqa: E402

__all__ = ["variants", "run", "run_problem", "DecodeProblem", "Unsupported", "merge_states"]
