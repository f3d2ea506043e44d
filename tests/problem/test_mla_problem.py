"""MLA: the fp8 record's layout, MLAProblem's generator and repr, the strategy's reach, validation messages,
and the reference (pinned to its meaning, equal to its vectorised twin)."""
import math

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import reference
from sandbox.checking.mla_check import compare_lse, expected_mla, gathered_mla
from sandbox.problem import MLAProblem
from sandbox.problem.mla import record as rec
from sandbox.problem.mla.strategies import mla_problems
from sandbox.problem.mla.validate import token_slots, validate_mla_inputs

BF16, E4M3 = np.dtype("bfloat16"), np.dtype("float8_e4m3fn")


def test_record_byte_layout_is_flashmla_s():
    codes = np.arange(512, dtype=np.uint16).astype(np.uint8)  # code of dim d is d % 256
    codes[(codes & 0x7F) == 0x7F] = 0
    scales = np.array([0.5, 2.0, 0.125, 8.0], np.float32)
    rope = np.linspace(-1, 1, 64).astype(BF16)
    record = rec.assemble(codes, scales, rope)
    assert record.shape == (656,) and rec.RECORD_BYTES == 656
    assert record[:512].tobytes() == codes.tobytes()
    assert record[512:528].tobytes() == scales.astype("<f4").tobytes()
    assert record[528:].tobytes() == rope.view("<u2").tobytes()
    row = rec.decode_records(record)
    for d in (0, 127, 128, 300, 511):
        assert row[d] == float(codes[d:d + 1].view(E4M3)[0]) * scales[d // 128]
    np.testing.assert_array_equal(row[512:], rope.astype(np.float64))
    np.testing.assert_array_equal(reference.mla_attention.__globals__["latent_row"](record[None, None], 0), row)


def test_all_ff_bytes_are_nan_in_every_field():
    row = rec.decode_records(np.full(656, 0xFF, np.uint8))
    assert np.isnan(row).all()


def test_encode_records_quantizes_per_128_dims_with_power_of_two_scales():
    x = np.random.default_rng(0).uniform(-1, 1, size=(3, 576)).astype(np.float32)
    x[0, :128] *= 1e-6  # a tiny tile gets a tiny scale, not a flushed one
    records = rec.encode_records(x)
    _, scales, _ = rec.parts(records)
    assert (np.log2(scales) == np.round(np.log2(scales))).all()
    back = rec.decode_records(records)
    tile_max = lambda a: np.abs(a[:, :512]).reshape(3, 4, 128).max(axis=2)  # noqa: E731
    rel = tile_max(back - x) / tile_max(x)
    assert rel.max() <= 2 ** -4  # e4m3: 3 mantissa bits, amax scaled into [224, 448]
    np.testing.assert_array_equal(back[:, 512:], x[:, 512:].astype(BF16).astype(np.float64))


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 3, 16, 64]), st.sampled_from([None, "fp8_record"]),
       st.sampled_from([None, 1, 5]))
@settings(max_examples=10)
def test_random_problem_has_nan_exactly_where_no_row_reads(seed, block_size, kv_format, topk):
    p = MLAProblem.random(seed, num_seqs=3, num_heads=2, block_size=block_size, max_context_len=3 * block_size + 1,
                          kv_format=kv_format, topk=topk, query_lens=2)
    assert p.context_lens.max() == p.max_blocks_per_seq * block_size, "one sequence fills its table"
    rows = p.latent_cache.reshape(-1, p.latent_cache.shape[2])
    values = rec.decode_records(rows) if p.fp8 else rows.astype(np.float64)
    read = np.zeros(len(rows), bool)
    read[p.read_slots()] = True
    assert np.isfinite(values[read]).all() and np.isnan(values[~read]).all()
    if topk is None:
        assert read.sum() == len(np.unique(np.concatenate(
            [token_slots(p.block_tables[s], int(p.context_lens[s]), block_size) for s in range(p.num_seqs)])))


def test_repr_rebuilds_the_problem():
    for problem in (MLAProblem.random(7, kv_format="fp8_record", topk=9, query_lens=[2, 1, 3], dtype="float16"),
                    MLAProblem.shared(8, how="prefix", topk=4, block_size=16, query_lens=2)):
        again = eval(repr(problem), {"MLAProblem": MLAProblem})
        for x, y in zip(problem.arrays()[:4] + (problem.query_start, problem.indices),
                        again.arrays()[:4] + (again.query_start, again.indices)):
            # bit for bit (NaN in the unused slots included: ml_dtypes' bfloat16 NaN does not compare equal)
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(np.ascontiguousarray(x).view(np.uint8), np.ascontiguousarray(y).view(np.uint8))


def test_shared_fork_splits_the_partial_prompt_block_by_copy_on_write():
    p = MLAProblem.shared(1, num_groups=1, group_size=3, prefix_len=20, suffix_lens=[0, 5, 7], block_size=16)
    first, second, third = (p.block_tables[s].tolist() for s in range(3))
    assert first[0] == second[0] == third[0], "the full prompt block is shared"
    assert len({first[1], second[1], third[1]}) == 3, "the partial one was split on append"
    rows = p.latent_cache
    np.testing.assert_array_equal(rows[second[1], :4], rows[first[1], :4])  # the copy holds the prompt's tokens


def test_sparse_indices_reach_the_promised_kinds_of_rows():
    p = MLAProblem.random(3, num_seqs=1, context_lens=[40], block_size=8, topk=12, query_lens=40)
    counts = (p.indices >= 0).sum(axis=1)
    assert (counts == 0).any() and (counts == 1).any() and (counts == np.minimum(12, np.arange(1, 41))).any()
    assert (p.indices == -1).any() and not (p.indices < -1).any()
    edges = {int(token_slots(p.block_tables[0], 40, 8)[t]) for t in (7, 8, 15, 16)}
    assert edges & set(p.indices.ravel().tolist())


# The strategy must reach every edge case: one run of derandomized draws (no shrinking) must hit each.
REACHES = {
    "a sparse row with no valid index": lambda p: p.sparse and ((p.indices >= 0).sum(axis=1) == 0).any(),
    "a sparse row with one valid index": lambda p: p.sparse and ((p.indices >= 0).sum(axis=1) == 1).any(),
    "a sparse row with -1 between valid indices": lambda p: p.sparse and (((p.indices[:, :-1] >= 0)
                                                                          & (p.indices[:, 1:] < 0)).any()),
    "an fp8 record cache": lambda p: p.fp8,
    "float16": lambda p: p.dtype == np.float16,
    "context length 1": lambda p: (p.context_lens == 1).any(),
    "block size 1": lambda p: p.block_size == 1,
    "block size 256 with 257 tokens": lambda p: p.block_size == 256 and (p.context_lens == 257).any(),
    "block size 3": lambda p: p.block_size == 3,
    "several query rows": lambda p: p.max_query_len > 1,
    "shared physical blocks": lambda p: len(set(p.block_tables[p.block_tables >= 0].tolist()))
                                        < int((p.block_tables >= 0).sum()),
    "two head tiles of cupy.mla": lambda p: p.num_heads > 16,
}


def test_mla_strategy_reaches_every_edge_case():
    seen = set()

    @settings(max_examples=200, database=None, derandomize=True, phases=[Phase.generate])
    @given(mla_problems(max_heads=18))
    def draw(problem):
        seen.update(what for what, hit in REACHES.items() if hit(problem))

    draw()
    assert seen == set(REACHES), f"never drawn: {sorted(set(REACHES) - seen)}"


def _args(p, **changes):
    kw = dict(query=p.query, latent_cache=p.latent_cache, block_tables=p.block_tables, context_lens=p.context_lens,
              scale=None, query_start=p.query_start, indices=p.indices)
    kw.update(changes)
    return kw


@pytest.mark.parametrize("change, message", [
    (lambda p: dict(query=p.query.astype(np.float32)), r"query.dtype must be one of \('bfloat16', 'float16'\)"),
    (lambda p: dict(query=p.query[:, :, :512]), r"query must have 576 dims per head"),
    (lambda p: dict(latent_cache=p.latent_cache.astype(np.float16)), r"latent_cache.dtype must be the query's \(bfloat16\) or uint8"),
    (lambda p: dict(latent_cache=np.zeros((4, 16, 600), np.uint8)), r"uint8 fp8 records must have 656 bytes per token"),
    (lambda p: dict(context_lens=np.array([1000, 5], np.int32)), r"context_lens\[0\] = 1000 is out of range \[1, 32\]"),
    (lambda p: dict(block_tables=np.where(p.block_tables == p.block_tables[1, 0], 99, p.block_tables).astype(np.int32)),
     r"block_tables\[\d, \d\] = 99 is out of range for \d+ blocks"),
    (lambda p: dict(scale=math.inf), "scale must be a finite non-zero number"),
    (lambda p: dict(indices=p.indices[:, :0]), r"indices must have topk >= 1 columns"),
    (lambda p: dict(indices=p.indices.astype(np.int64)), "indices.dtype must be int32"),
    (lambda p: dict(indices=np.where(p.indices == p.indices[0, 0], -2, p.indices).astype(np.int32)),
     r"indices\[0, 0\] = -2: an index is -1 \(invalid\) or a cache slot"),
    (lambda p: dict(indices=np.array([[int(p.block_tables[0, 0]) * 16 + 6, -1], [-1, -1], [-1, -1]], np.int32)),
     r"indices\[0, 0\] = \d+: a valid index must be the slot of a token t <= 5 .*holds token 6 of sequence 0, "
     r"after the row's position"),
    (lambda p: dict(indices=np.array([[-1, -1], [-1, -1], [int(p.block_tables[0, 0]) * 16, -1]], np.int32)),
     r"indices\[2, 0\] = \d+: .* of sequence 1; slot \d+ .*holds no token of sequence 1"),
    (lambda p: dict(indices=np.array([[-1, -1], [10**6, -1], [-1, -1]], np.int32)),
     r"slot 1000000 is past the cache's \d+ slots"),
    (lambda p: dict(indices=np.array([[int(p.indices[0, 0]), int(p.indices[0, 0])], [-1, -1], [-1, -1]], np.int32)),
     r"indices\[0\] holds slot \d+ more than once \(at columns \[0, 1\]\)"),
])
def test_validation_names_the_argument_and_the_bound(change, message):
    p = MLAProblem.random(4, num_seqs=2, context_lens=[7, 20], block_size=16, topk=2, valid_counts=[1, 1, 2],
                          query_lens=[2, 1], share_prefix=False)
    with pytest.raises(ValueError, match=message):
        validate_mla_inputs(**_args(p, **change(p)))


def test_the_reference_equals_its_gathered_twin_and_pins_the_lse():
    for p in (MLAProblem.random(5, kv_format="fp8_record", query_lens=3),
              MLAProblem.random(6, topk=30, query_lens=2, extreme_logits=True, dtype="float16")):
        out, lse = reference.mla_attention(*p.arrays(), **p.kwargs(), return_lse=True)
        twin_out, twin_lse = gathered_mla(p)
        np.testing.assert_allclose(twin_out, out, atol=1e-12)
        assert compare_lse(twin_lse, lse).ok
    # lse is the natural log of the sum of exp(logit): one row, one token by hand
    p = MLAProblem.random(9, num_seqs=1, num_heads=1, context_lens=[1], block_size=4)
    out, lse = reference.mla_attention(*p.arrays(), return_lse=True)
    key = p.latent_cache[p.block_tables[0, 0], 0].astype(np.float64)
    assert lse[0, 0] == pytest.approx(p.query[0, 0].astype(np.float64) @ key / 24)
    np.testing.assert_array_equal(out[0, 0], key[:512])


def test_sparse_over_every_visible_token_equals_dense_and_reads_only_its_indices():
    dense = MLAProblem.random(10, num_seqs=2, context_lens=[9, 30], block_size=4, query_lens=3)
    seqs, positions = dense.rows()
    width = int(positions.max()) + 1
    indices = np.full((len(seqs), width), -1, np.int32)
    for r, (s, p) in enumerate(zip(seqs, positions)):
        slots = token_slots(dense.block_tables[s], int(p) + 1, 4)
        indices[r, np.random.default_rng(r).permutation(width)[:len(slots)]] = slots
    want = reference.mla_attention(*dense.arrays(), **dense.kwargs())
    got = reference.mla_attention(*dense.arrays(), query_start=dense.query_start, indices=indices)
    np.testing.assert_allclose(got, want, atol=1e-12)
    # A row with every index -1 is 0 with lse -inf; a slot no index names may hold anything (NaN).
    indices[0] = -1
    cache = dense.latent_cache.copy()
    unnamed = np.setdiff1d(np.arange(cache.shape[0] * 4), indices[indices >= 0])
    cache.reshape(-1, 576)[unnamed] = np.nan
    out, lse = reference.mla_attention(dense.query, cache, dense.block_tables, dense.context_lens,
                                       query_start=dense.query_start, indices=indices, return_lse=True)
    assert (out[0] == 0).all() and np.isneginf(lse[0]).all() and np.isfinite(out).all()


def test_large_problems_use_the_twin_and_small_ones_the_loop():
    small = MLAProblem.random(11, num_seqs=1, num_heads=1, context_lens=[3], block_size=2)
    out, _ = expected_mla(small)
    np.testing.assert_array_equal(out, reference.mla_attention(*small.arrays()))
