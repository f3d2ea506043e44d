"""Run a registered cache-write kernel: validate, prepare, launch, return the caches."""
from __future__ import annotations

from ..devices import backends
from . import registry
from ..problem.validate import validate_write_inputs


def write_cache(name, key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0, backend="auto"):
    """Write key/value [num_tokens, num_kv_heads, head_dim] at slot_mapping with kernel `name`.

    A cache of the inputs' dtype stores them as they are; an fp8 cache stores
    fp8(clip(x / k_scale or v_scale, +-max_finite)) (reference.write_cache). Returns new host arrays
    (key_cache, value_cache); the inputs are not modified.
    """
    validate_write_inputs(key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale)
    writer = registry.get_cache_writer(name)
    resolved = backends.resolve(backend, writer.family)
    if writer.family == "numba" and backends.numba_needs_other_process(resolved):
        from ..devices.other_mode import call_in_numba_mode
        return call_in_numba_mode(resolved == "cpu", "sandbox.variant.cache_write:write_cache",
                                  name, key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale, resolved)
    prepared = writer.module.prepare_write(key_cache, value_cache, key, value, slot_mapping, resolved,
                                           k_scale=k_scale, v_scale=v_scale)
    prepared.launch()
    return prepared.result()
