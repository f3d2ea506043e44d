"""sandbox.run_mla: validate, check the MLA variant's limits, prepare, launch, return out (and lse)."""
from __future__ import annotations

import numpy as np

from ...problem.kinds import MLA
from ...problem.mla import MLAProblem
from .. import registry
from ...devices.other_mode import call_in_numba_mode
from ..runner import own_index_arrays


def prepare_mla(name: str, problem: MLAProblem, backend: str = "auto", config: dict | None = None):
    """Validate and prepare MLA variant `name` on `problem` (untimed) with the tunables in `config` (None: the
    defaults; sandbox.variant.tunables). Returns (prepared, resolved backend).

    ValueError before any launch for invalid inputs, a decode variant's name, or what the variant does not
    declare (sandbox.Unsupported). A numba variant whose mode differs from this process's: use run_mla().
    The prepared variant owns copies of the index arrays (runner.own_index_arrays), taken before validation.
    """
    problem = own_index_arrays(problem)
    problem.validate()
    variant = registry.get(name, problem="mla")
    resolved = variant.family_plugin.resolve(backend)
    variant.limits.check(name, problem, resolved)
    if variant.family_plugin.needs_other_process(resolved):
        raise ValueError(f"{name} on backend={resolved!r} needs numba.cuda in the other mode than this process; "
                         "use sandbox.run_mla, which runs it in a child process")
    return variant.prepare(problem, resolved, config), resolved


def run_mla_problem(name: str, problem: MLAProblem, backend: str = "auto", return_lse: bool = False,
                    config: dict | None = None):
    """Run one MLA variant on one problem: out [total_q, num_heads, 512] in the query's dtype, and with
    return_lse also lse float32 [total_q, num_heads]."""
    problem.validate()
    variant = registry.get(name, problem="mla")
    resolved = variant.family_plugin.resolve(backend)
    variant.limits.check(name, problem, resolved)
    variant.configuration(config)  # an undeclared tunable is refused here, in this process
    if variant.family_plugin.needs_other_process(resolved):
        return call_in_numba_mode(resolved == "cpu", "sandbox.variant.mla.runner:run_mla_problem", name, problem,
                                  resolved, return_lse, config)
    prepared = variant.prepare(problem, resolved, config)
    prepared.launch()
    return MLA.outputs(prepared) if return_lse else np.asarray(prepared.result())


def run_mla(name, query, latent_cache, block_tables, context_lens, scale=None, *, query_start=None, indices=None,
            return_lse=False, backend="auto", config=None):
    """The public MLA entry point: run variant `name` on host NumPy inputs (layout: sandbox/problem/mla/problem.py).

    Returns out [total_q, num_heads, 512] in the query's dtype, and with return_lse (out, lse float32
    [total_q, num_heads], natural log, -inf for a row with no valid index). Inputs may be strided views:
    the variant receives C-contiguous copies. Everything is validated before any launch. config: the
    variant's tunables ({"partition_size": 256}; sandbox.tunables(name)), None for its defaults.
    """
    def contiguous(x):
        return np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x

    problem = MLAProblem(*(contiguous(x) for x in (query, latent_cache, block_tables, context_lens)), scale,
                         query_start=contiguous(query_start), indices=contiguous(indices))
    return run_mla_problem(name, problem, backend, return_lse, config)


MLA.attach(prepare=prepare_mla)  # the variant layer's part of the MLA kind (sandbox/problem/kinds.py)
