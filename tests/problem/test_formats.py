"""Cache formats beyond per-tensor fp8: NVFP4 (packing, rounding, saturation) and fp8 scales per token and head.

The reference reads and writes them (reference/formats.py, reference/cache_write.py); DecodeProblem builds
them with NaN in every unread slot; validation names every argument and bound before any launch.
"""
import ml_dtypes
import numpy as np
import pytest

import reference
import sandbox
from reference.formats import dequantize_nvfp4, quantize_nvfp4, unpack_e2m1
from sandbox.problem import DecodeProblem
from sandbox.problem.options import AttentionOptions
from sandbox.problem.validate import validate_decode_inputs, validate_write_inputs

E4M3 = ml_dtypes.float8_e4m3fn


def test_e2m1_codes_are_packed_low_nibble_first_as_cuda_fp4_does():
    assert unpack_e2m1(np.array([0x21, 0xF7], np.uint8)).tolist() == [0.5, 1.0, 6.0, -6.0]
    assert unpack_e2m1(np.arange(16, dtype=np.uint8)).reshape(-1)[0::2].tolist() == [
        0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def test_nvfp4_quantization_rounds_to_nearest_even_and_saturates():
    group = np.zeros(16, np.float32)
    group[:9] = [6.0, 2.5, 5.0, 0.25, 0.75, -1.25, 3.5, 1e30, -np.inf]  # amax (finite) 1e30: saturates the scale
    packed, scales = quantize_nvfp4(group[None], 1.0)
    assert scales.astype(np.float32)[0, 0] == 448.0  # e4m3's max: 1e30 / 6 saturates
    small = group.copy()
    small[7:9] = [7.0, -np.inf]  # amax 7 -> scale e4m3(7 / 6) = 1.125 (RNE of 1.1667 on e4m3's 3 mantissa bits)
    packed, scales = quantize_nvfp4(small[None], 1.0)
    s = float(scales.astype(np.float32)[0, 0])
    assert s == 1.125
    got = dequantize_nvfp4(packed, scales, 1.0)[0]
    expected = np.array([6, 2, 4, 0, 0.5, -1, 3, 6, -6] + [0] * 7, np.float64) * s
    # 6/1.125 = 5.33 -> 6 (nearest), 2.5/1.125 = 2.22 -> 2, 5/1.125 = 4.44 -> 4, 0.25/1.125 -> 0, 0.75/1.125 =
    # 0.67 -> 0.5, -1.25/1.125 -> -1, 3.5/1.125 = 3.11 -> 3, 7/1.125 = 6.2 -> 6 (saturated), -inf -> -6
    np.testing.assert_array_equal(got, expected)
    zeros, zero_scales = quantize_nvfp4(np.zeros((1, 16), np.float32), 1.0)
    assert not zeros.any() and zero_scales.astype(np.float32).max() == 0


def test_representable_nvfp4_values_round_trip_exactly():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, size=(3, 2, 16), dtype=np.uint8)          # head_dim 32: 2 groups
    scales = np.array([0.5, 2.0, 0.125], np.float32)[:, None, None] * np.ones((3, 2, 2), np.float32)
    x = (dequantize_nvfp4(codes, scales.astype(E4M3), 0.25)).astype(np.float32)
    packed, got_scales = quantize_nvfp4(x, 0.25)
    np.testing.assert_array_equal(dequantize_nvfp4(packed, got_scales, 0.25), x.astype(np.float64))


def test_write_cache_quantizes_nvfp4_and_per_token_fp8():
    rng = np.random.default_rng(1)
    key, value = rng.standard_normal((2, 3, 2, 32)).astype(np.float32) * 4
    key[1, 1] = 0.0  # a row of zeros: scale 1, codes 0
    slots = np.array([5, -1, 2])
    cache = np.zeros((2, 4, 2, 16), np.uint8)
    blocks = np.zeros((2, 4, 2, 2), E4M3)
    v_cache, v_blocks = cache.copy(), blocks.copy()
    reference.write_cache(cache, v_cache, key, value, slots, 0.5, 0.5, k_block_scales=blocks, v_block_scales=v_blocks)
    packed, scales = quantize_nvfp4(key[0], 0.5)
    np.testing.assert_array_equal(cache[1, 1], packed)
    np.testing.assert_array_equal(blocks[1, 1].view(np.uint8), scales.view(np.uint8))
    assert not cache[0, 1].any()  # slot 1 was skipped (slot_mapping -1 is token 1)

    fp8 = np.zeros((2, 4, 2, 32), E4M3)
    k_scales = np.full((2, 4, 2), np.nan, np.float32)
    v_fp8, v_scales = fp8.copy(), k_scales.copy()
    reference.write_cache(fp8, v_fp8, key, value, slots, k_scales=k_scales, v_scales=v_scales)
    amax = np.abs(key[2]).max(axis=-1)
    np.testing.assert_allclose(k_scales[0, 2], amax / 448, rtol=1e-7)
    assert (np.abs(fp8[0, 2].astype(np.float32)).max(axis=-1) == 448).all()  # each row's amax lands on the max
    np.testing.assert_array_equal(fp8[0, 2], (key[2] / k_scales[0, 2][:, None]).astype(E4M3))


def test_random_and_shared_problems_poison_every_unread_slot_of_the_arrays_beside_the_cache():
    p = DecodeProblem.random(3, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4, context_lens=[5, 9],
                             kv_dtype="nvfp4", share_prefix=False)
    assert p.key_cache.dtype == np.uint8 and p.key_cache.shape[-1] == 16 and p.kv_format == "nvfp4"
    assert p.options.k_scale == 1 / (6 * 448) and p.options.k_block_scales.shape == p.key_cache.shape[:3] + (2,)
    read = np.zeros(p.num_blocks * p.block_size, bool)
    for s, n in enumerate(p.context_lens):
        t = np.arange(n)
        read[p.block_tables[s, t // 4] * 4 + t % 4] = True
    scales = p.options.k_block_scales.astype(np.float32).reshape(-1, 2, 2)
    assert np.isnan(scales[~read]).all() and np.isfinite(scales[read]).all()
    rebuilt = eval("DecodeProblem." + repr(p).split("DecodeProblem.", 1)[1])
    np.testing.assert_array_equal(rebuilt.key_cache, p.key_cache)
    np.testing.assert_array_equal(rebuilt.options.v_block_scales.view(np.uint8), p.options.v_block_scales.view(np.uint8))

    forked = DecodeProblem.shared(4, num_groups=1, group_size=2, prefix_len=6, suffix_lens=[0, 3], how="fork",
                                  num_heads=2, num_kv_heads=1, head_dim=16, block_size=4, kv_dtype="e4m3",
                                  per_token_scales=True)
    t = np.arange(4, 6)  # the prompt's partly full last block, split by copy-on-write at the first append
    src, dst = forked.block_tables[0, 1], forked.block_tables[1, 1]
    assert src != dst
    np.testing.assert_array_equal(forked.options.k_scales[dst, t % 4], forked.options.k_scales[src, t % 4])
    assert forked.options.k_scale == 1.0 and sandbox.run("numpy.gather", *forked.arrays(), **forked.kwargs()).shape


def test_bytes_moved_counts_packed_codes_and_the_scales_beside_them():
    shape = dict(num_seqs=1, num_heads=4, num_kv_heads=2, head_dim=64, block_size=8, context_lens=[10])
    base = DecodeProblem.random(1, dtype="bfloat16", **shape)
    overhead = base.bytes_moved() - 2 * 10 * 2 * 64 * 2
    assert DecodeProblem.random(1, dtype="bfloat16", kv_dtype="nvfp4", **shape).bytes_moved() == \
        overhead + 10 * 2 * 2 * (32 + 4)            # 32 bytes of codes and 4 block scales per (token, KV head)
    assert DecodeProblem.random(1, dtype="bfloat16", kv_dtype="e4m3", per_token_scales=True, **shape).bytes_moved() == \
        overhead + 10 * 2 * 2 * (64 + 4)            # 64 fp8 codes and one float32 scale


def _nvfp4():
    return DecodeProblem.random(0, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4,
                                max_context_len=10, kv_dtype="nvfp4")


def _fp8_per_token():
    return DecodeProblem.random(0, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4,
                                max_context_len=10, kv_dtype="e4m3", per_token_scales=True)


def _with(p, **changes):
    return dict(query=p.query, key_cache=p.key_cache, value_cache=p.value_cache, block_tables=p.block_tables,
                context_lens=p.context_lens, options=AttentionOptions(**dict(p.options.kwargs(), **changes)))


def _slots(p, *trailing, dtype=np.float32):
    return np.zeros(p.key_cache.shape[:3] + trailing, dtype)


@pytest.mark.parametrize("make, changes, message", [
    (_nvfp4, lambda p: dict(k_block_scales=None, v_block_scales=None),
     "an NVFP4 cache .* needs k_block_scales and v_block_scales"),
    (_nvfp4, lambda p: dict(v_block_scales=None), "k_block_scales and v_block_scales go together"),
    (_nvfp4, lambda p: dict(k_block_scales=_slots(p, 2)), "k_block_scales must be a float8_e4m3fn NumPy array"),
    (_nvfp4, lambda p: dict(k_block_scales=_slots(p, 4, dtype=E4M3)),
     r"k_block_scales must have shape \(\d+, 4, 2, 2\) = \[num_blocks, block_size, num_kv_heads, head_dim // 16\]"),
    (_fp8_per_token, lambda p: dict(k_block_scales=_slots(p, 2, dtype=E4M3), v_block_scales=_slots(p, 2, dtype=E4M3)),
     "k_block_scales/v_block_scales belong to an NVFP4 cache"),
    (_fp8_per_token, lambda p: dict(v_scales=None), "k_scales and v_scales go together"),
    (_fp8_per_token, lambda p: dict(k_scale=0.5),
     "k_scale and k_scales are exclusive: with per-token scales k_scale must be 1.0"),
    (_fp8_per_token, lambda p: dict(k_scales=_slots(p, dtype=np.float64)), "k_scales must be a float32 NumPy array"),
    (_fp8_per_token, lambda p: dict(k_scales=np.ones(p.key_cache.shape[:2] + (3,), np.float32)),
     r"k_scales must have shape \(\d+, 4, 2\) = \[num_blocks, block_size, num_kv_heads\] \(from key_cache\)"),
])
def test_new_formats_are_validated_naming_the_argument(make, changes, message):
    p = make()
    validate_decode_inputs(**_with(p))
    with pytest.raises(ValueError, match=message):
        validate_decode_inputs(**_with(p, **changes(p)))


def test_per_token_scales_need_an_fp8_cache_and_nvfp4_its_packed_shape():
    p = DecodeProblem.random(0, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, block_size=4, context_lens=[5])
    scales = np.ones(p.key_cache.shape[:3], np.float32)
    with pytest.raises(ValueError, match="k_scales/v_scales .* need an fp8 cache"):
        sandbox.run("numpy.gather", *p.arrays(), k_scales=scales, v_scales=scales)
    with pytest.raises(ValueError, match="per_token_scales needs an fp8 cache"):
        DecodeProblem.random(0, per_token_scales=True)
    with pytest.raises(ValueError, match="an NVFP4 cache needs head_dim to be a multiple of 16"):
        DecodeProblem.random(0, head_dim=40, kv_dtype="nvfp4")
    n = _nvfp4()
    args = _with(n)
    args.update(query=np.concatenate([n.query, n.query], axis=2))
    with pytest.raises(ValueError, match=r"an NVFP4 key_cache's last axis \(16 bytes\) must be query head_dim // 2 = 32"):
        validate_decode_inputs(**args)


def test_write_inputs_name_the_new_arguments():
    key = np.zeros((1, 2, 32), np.float32)
    cache = np.zeros((2, 4, 2, 16), np.uint8)
    with pytest.raises(ValueError, match="an NVFP4 cache .* needs k_block_scales"):
        validate_write_inputs(cache, cache.copy(), key, key, np.array([0]))
    validate_write_inputs(cache, cache.copy(), key, key, np.array([0]), k_block_scales=np.zeros((2, 4, 2, 2), E4M3),
                          v_block_scales=np.zeros((2, 4, 2, 2), E4M3))
    fp8 = np.zeros((2, 4, 2, 32), E4M3)
    with pytest.raises(ValueError, match="k_scale and k_scales are exclusive"):
        validate_write_inputs(fp8, fp8.copy(), key, key, np.array([0]), k_scale=2.0,
                              k_scales=np.ones((2, 4, 2), np.float32), v_scales=np.ones((2, 4, 2), np.float32))
