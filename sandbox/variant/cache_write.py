"""Run a registered cache-write kernel: validate, prepare, launch, return the caches."""
from __future__ import annotations

from . import registry
from .limits import Unsupported
from ..problem.validate import validate_write_inputs
from ..devices.other_mode import call_in_numba_mode

# What a writer module may declare in WRITES beyond caches of the inputs' dtype and per-tensor fp8: "kv_scales"
# (fp8 with a scale per token and KV head, chosen by the writer) and "nvfp4" (packed e2m1 with e4m3 block scales).
WRITER_FORMATS = ("kv_scales", "nvfp4")


def write_cache(name, key_cache, value_cache, key, value, slot_mapping, k_scale=1.0, v_scale=1.0, backend="auto", *,
                k_scales=None, v_scales=None, k_block_scales=None, v_block_scales=None):
    """Write key/value [num_tokens, num_kv_heads, head_dim] at slot_mapping with kernel `name`.

    A cache of the inputs' dtype stores them as they are; an fp8 cache stores
    fp8(clip(x / k_scale or v_scale, +-max_finite)) (reference.write_cache). Returns new host arrays
    (key_cache, value_cache); the inputs are not modified. With per-token scales (k_scales/v_scales float32
    [num_blocks, block_size, num_kv_heads], fp8 caches) the writer chooses each written slot's scale and returns
    (key_cache, value_cache, k_scales, v_scales); with an NVFP4 cache (uint8, k_block_scales/v_block_scales)
    (key_cache, value_cache, k_block_scales, v_block_scales). A writer that does not declare the format in its
    module's WRITES refuses it (Unsupported).
    """
    scales = dict(k_scales=k_scales, v_scales=v_scales, k_block_scales=k_block_scales, v_block_scales=v_block_scales)
    validate_write_inputs(key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale, **scales)
    writer = registry.get_cache_writer(name)
    needs = "kv_scales" if k_scales is not None else "nvfp4" if k_block_scales is not None else None
    if needs is not None and needs not in getattr(writer.module, "WRITES", ()):
        raise Unsupported(f"{name} does not write {needs} caches (it writes: "
                          f"{', '.join(getattr(writer.module, 'WRITES', ())) or 'per-tensor scales only'})")
    given = {k: v for k, v in scales.items() if v is not None}
    resolved = writer.family_plugin.resolve(backend)
    if writer.family_plugin.needs_other_process(resolved):
        return call_in_numba_mode(resolved == "cpu", "sandbox.variant.cache_write:write_cache",
                                  name, key_cache, value_cache, key, value, slot_mapping, k_scale, v_scale, resolved,
                                  **given)
    prepared = writer.module.prepare_write(key_cache, value_cache, key, value, slot_mapping, resolved,
                                           k_scale=k_scale, v_scale=v_scale, **given)
    prepared.launch()
    return prepared.result()
