"""Run a registered cache-write kernel: validate, prepare, launch, return the caches."""
from __future__ import annotations

from . import backends, registry
from .validate import validate_write_inputs


def write_cache(name, key_cache, value_cache, key, value, slot_mapping, backend="auto"):
    """Write key/value [num_tokens, num_kv_heads, head_dim] at slot_mapping with kernel `name`.

    Returns new host arrays (key_cache, value_cache); the inputs are not modified.
    """
    validate_write_inputs(key_cache, value_cache, key, value, slot_mapping)
    writer = registry.get_cache_writer(name)
    resolved = backends.resolve(backend, writer.family)
    if writer.family == "numba" and backends.numba_needs_other_process(resolved):
        from .other_mode import call_in_numba_mode
        return call_in_numba_mode(resolved == "cpu", "sandbox.cache_write:write_cache",
                                  name, key_cache, value_cache, key, value, slot_mapping, resolved)
    prepared = writer.module.prepare_write(key_cache, value_cache, key, value, slot_mapping, resolved)
    prepared.launch()
    return prepared.result()
