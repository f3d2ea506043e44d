"""sandbox.run: validate, check the variant's limits, prepare, launch, return the result."""
from __future__ import annotations

import numpy as np

from . import registry
from ..problem.options import AttentionOptions
from ..problem.decode import DecodeProblem
from ..problem.kinds import DECODE
from ..devices.other_mode import call_in_numba_mode
from ..errors import RefusedRequest


def prepare(name: str, problem: DecodeProblem, backend: str = "auto", config: dict | None = None):
    """Validate and prepare `name` on `problem` (untimed) with the tunables in `config` (None: the
    defaults; see sandbox.variant.tunables). Returns (prepared, resolved backend).

    Raises ValueError before any launch if the inputs are invalid or the variant does not support them.
    A numba variant whose mode differs from this process's cannot be prepared here: use run().
    The prepared variant owns copies of the problem's index arrays (block tables, lengths, query starts), taken
    before they are validated: editing the caller's tables in place after prepare cannot make a launch read
    out of bounds (it launches what was validated).
    """
    problem = own_index_arrays(problem)
    problem.validate()
    variant = registry.get(name, problem="decode")
    resolved = variant.family_plugin.resolve(backend)
    variant.limits.check(name, problem, resolved)
    if variant.family_plugin.needs_other_process(resolved):
        raise RefusedRequest(f"{name} on backend={resolved!r} needs numba.cuda in the other mode than this process; "
                             "use sandbox.run, which runs it in a child process")
    return variant.prepare(problem, resolved, config), resolved


INDEX_ARRAYS = ("block_tables", "context_lens", "query_start", "indices")


def own_index_arrays(problem):
    """`problem` (DecodeProblem or MLAProblem) with private copies of its index arrays (the caches are shared:
    their values cannot send a launch out of bounds)."""
    import dataclasses
    copies = {f: np.array(getattr(problem, f), copy=True) for f in INDEX_ARRAYS
              if isinstance(getattr(problem, f, None), np.ndarray)}
    return dataclasses.replace(problem, **copies)


def run_problem(name: str, problem: DecodeProblem, backend: str = "auto", config: dict | None = None):
    """Run one variant on one problem: [num_query_tokens, num_heads, head_dim] in the query's dtype; with
    problem.options.return_lse, (out, lse float32 [num_query_tokens, num_heads])."""
    problem.validate()
    variant = registry.get(name, problem="decode")
    resolved = variant.family_plugin.resolve(backend)
    variant.limits.check(name, problem, resolved)
    variant.configuration(config)  # an undeclared tunable is refused here, in this process
    if variant.family_plugin.needs_other_process(resolved):
        return call_in_numba_mode(resolved == "cpu", "sandbox.variant.runner:run_problem", name, problem, resolved,
                                  config)
    prepared = variant.prepare(problem, resolved, config)
    prepared.launch()
    return outputs(prepared, problem)


def outputs(prepared, problem: DecodeProblem):
    """What sandbox.run returns from a launched prepared variant (the one LSE protocol, limits.Prepared): out,
    or with problem.options.return_lse, (out, prepared.lse())."""
    out = np.asarray(prepared.result())
    return (out, np.asarray(prepared.lse())) if problem.options.return_lse else out


def run(name, query, key_cache, value_cache, block_tables, context_lens, scale=None, *, query_start=None,
        backend="auto", config=None, **options):
    """The public entry point: run variant `name` on host NumPy inputs.

    Returns [num_seqs, num_heads, head_dim] (decode) or [total_q, num_heads, head_dim] (with
    query_start) in the query's dtype; with return_lse=True, (out, lse) with lse float32 [num_query_tokens,
    num_heads]. `options` are the option table's fields (AttentionOptions; docs/options.md lists them),
    each off by default. Inputs may be strided views: the variant receives C-contiguous copies. NaN is
    data: a NaN in a query row, or in a cache slot a row reads, makes exactly the rows that read it NaN (out
    and lse), as in the reference; every other row stays clean. Parameters (scale, sinks, cache scales) must
    be finite; everything else is validated before any launch. config: the variant's tunables for this run
    ({"threads": 64}; sandbox.tunables(name) lists them), None for its defaults.
    """
    def contiguous(x):
        return np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x

    attention = AttentionOptions.from_kwargs(**{k: contiguous(v) for k, v in options.items()})
    problem = DecodeProblem(*(contiguous(x) for x in (query, key_cache, value_cache, block_tables, context_lens)),
                            scale, options=attention, query_start=contiguous(query_start))
    return run_problem(name, problem, backend, config)


DECODE.attach(prepare=prepare)  # the variant layer's part of the decode kind (sandbox/problem/kinds.py)
