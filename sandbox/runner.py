"""sandbox.run: validate, check the variant's limits, prepare, launch, return the result."""
from __future__ import annotations

import numpy as np

from . import backends, registry
from .problem import DecodeProblem


def prepare(name: str, problem: DecodeProblem, backend: str = "auto"):
    """Validate and prepare `name` on `problem` (untimed). Returns (prepared, resolved backend).

    Raises ValueError before any launch if the inputs are invalid or the variant does not support them.
    A numba variant whose mode differs from this process's cannot be prepared here: use run().
    """
    problem.validate()
    variant = registry.get(name)
    resolved = backends.resolve(backend, variant.family)
    variant.limits.check(name, problem, resolved)
    if variant.family == "numba" and backends.numba_needs_other_process(resolved):
        raise ValueError(f"{name} on backend={resolved!r} needs numba.cuda in the other mode than this process; "
                         "use sandbox.run, which runs it in a child process")
    return variant.prepare(problem, resolved), resolved


def run_problem(name: str, problem: DecodeProblem, backend: str = "auto") -> np.ndarray:
    """Run one variant on one problem: [num_seqs, num_heads, head_dim] in the query's dtype."""
    problem.validate()
    variant = registry.get(name)
    resolved = backends.resolve(backend, variant.family)
    variant.limits.check(name, problem, resolved)
    if variant.family == "numba" and backends.numba_needs_other_process(resolved):
        from .other_mode import call_in_numba_mode
        return call_in_numba_mode(resolved == "cpu", "sandbox.runner:run_problem", name, problem, resolved)
    prepared = variant.prepare(problem, resolved)
    prepared.launch()
    return np.asarray(prepared.result())


def run(name, query, key_cache, value_cache, block_tables, context_lens, scale=None, backend="auto") -> np.ndarray:
    """The public entry point (DESIGN.md): run variant `name` on host NumPy inputs."""
    problem = DecodeProblem(query, key_cache, value_cache, block_tables, context_lens, scale)
    return run_problem(name, problem, backend)
