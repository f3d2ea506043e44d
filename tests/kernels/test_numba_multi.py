"""numba.multi beyond the shared suite: chunked prefill, speculative rows mixed with decode rows,
every option and fp8 at once, block sizes 1 and 256, shared-prefix problems, tile sizes, the
shared-memory sizing and its refusal, and a count of global K/V loads (once per tile).

Problems stay tiny (head_dim 32, contexts <= ~70): the Numba simulator runs every thread in Python.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernels.numba_cuda import multi
from sandbox.checking.check import check_problem, expected_output
from sandbox.checking.compare import assert_close
from sandbox.problem import DecodeProblem
from sandbox.variant import Unsupported, registry

SHAPE = dict(head_dim=32, num_heads=4, num_kv_heads=2)


def _assert_ok(problem, name="numba.multi"):
    result = check_problem(name, problem)
    assert result.error is None, f"{name} raised on {result.problem}: {result.error}"
    assert result.comparison.ok, f"{name} is wrong on {result.problem}:\n{result.comparison.report}"


@pytest.mark.parametrize("label, kwargs", [
    ("chunked_prefill_whole_context", dict(num_seqs=2, block_size=8, context_lens=[19, 33], query_lens=[19, 33])),
    ("speculative_4_mixed_with_decode", dict(num_seqs=4, block_size=4, context_lens=[30, 9, 41, 1],
                                             query_lens=[4, 1, 4, 1], dtype="float16")),
    ("decode_rows_only", dict(num_seqs=3, block_size=16, context_lens=[1, 16, 50], dtype="bfloat16")),
    ("block_size_1", dict(num_seqs=2, block_size=1, context_lens=[23, 7], query_lens=[9, 7], extreme_logits=True)),
    ("block_size_256", dict(num_seqs=2, block_size=256, context_lens=[70, 3], query_lens=[17, 2], dtype="float16")),
    ("group_8_one_kv_head", dict(num_seqs=2, num_heads=8, num_kv_heads=1, block_size=8, context_lens=[26, 12],
                                 query_lens=[6, 12])),
])
def test_targeted_problems(label, kwargs):
    _assert_ok(DecodeProblem.random(31, **dict(SHAPE, **kwargs)))


@pytest.mark.parametrize("kv_dtype, dtype", [("float8_e4m3fn", "bfloat16"), ("float8_e5m2", "float16")])
def test_window_alibi_softcap_and_fp8_at_once(kv_dtype, dtype):
    """Window starts inside the tile span: the tile's later query tokens mask tokens the first one
    reads, chunks wholly masked for some rows; blocks before the window are freed (-1) and NaN."""
    problem = DecodeProblem.random(41, num_seqs=3, block_size=4, context_lens=[45, 20, 9], query_lens=[12, 1, 5],
                                   window_left=5, logits_soft_cap=5.0, alibi_slopes="random", kv_dtype=kv_dtype,
                                   k_scale=0.5 / 448, v_scale=2.0 / 448, dtype=dtype, extreme_logits=True, **SHAPE)
    assert (problem.block_tables[0, :6] == -1).all()  # blocks wholly before the first query token's window
    _assert_ok(problem)


@pytest.mark.parametrize("how", ["fork", "prefix"])
def test_shared_prefix_problems(how):
    problem = DecodeProblem.shared(7, num_groups=2, group_size=2, prefix_len=13, max_suffix_len=6, how=how,
                                   block_size=4, query_lens=5, alibi_slopes="paper", **SHAPE)
    _assert_ok(problem)


def test_results_do_not_depend_on_the_tile_of_query_tokens(monkeypatch):
    """One query token per tile up to 16: the same rows, from one block or several."""
    problem = DecodeProblem.random(5, num_seqs=2, block_size=4, context_lens=[21, 6], query_lens=[13, 3],
                                   window_left=7, logits_soft_cap=30.0, **SHAPE)
    expected = expected_output(problem)
    outputs = {}
    for target in (2, 8, 32):  # group 2: 1, 4 and 16 query tokens per tile
        monkeypatch.setattr(multi, "TARGET_ROWS", target)
        prepared = multi.prepare(problem, registry.family("numba").resolve("auto"))
        assert prepared.tile_tokens == target // 2
        prepared.launch()
        outputs[target] = prepared.result()
        assert_close(outputs[target], expected, problem.dtype, f"TARGET_ROWS={target}")
    for target, out in outputs.items():
        np.testing.assert_allclose(out, outputs[2], rtol=0, atol=1e-6, err_msg=f"TARGET_ROWS={target} vs 2")


def _expected_loads(problem, tile_tokens):
    """Each token of each tile's span, once per (tile, KV head, dim), for K and for V."""
    counts = np.zeros((2,) + problem.key_cache.shape, np.int32)
    for seq, first, stop in multi.tile_spans(problem, tile_tokens):
        for t in range(first, stop):
            counts[:, problem.block_tables[seq, t // problem.block_size], t % problem.block_size] += 1
    return counts


@pytest.mark.parametrize("window_left", [-1, 6])
def test_each_kv_element_is_loaded_once_per_tile(window_left):
    """The kernel built with a load counter: K and V element counts equal the number of tiles whose
    span (window start of the tile's first token .. its last position) holds the token, whatever
    the group (one KV head serves 4 query heads here), and zero everywhere else (freed blocks, the
    tails of last blocks, tokens after a tile's last position)."""
    problem = DecodeProblem.random(9, num_seqs=3, num_heads=4, num_kv_heads=1, head_dim=32, block_size=4,
                                   context_lens=[30, 11, 5], query_lens=[10, 1, 5], window_left=window_left,
                                   share_prefix=False)
    prepared = multi.prepare(problem, registry.family("numba").resolve("auto"), count_loads=True)
    assert prepared.tile_tokens == 4 and len(prepared.tiles) == 3 + 1 + 2
    prepared.launch()
    assert_close(prepared.result(), expected_output(problem), problem.dtype, "with the load counter")
    counts = multi.load_counts(prepared)
    expected = _expected_loads(problem, prepared.tile_tokens)
    np.testing.assert_array_equal(counts, expected)
    assert counts.max() == 3  # sequence 0's first tokens lie in the spans of its 3 tiles: once each, not once per row


def test_shared_memory_sizing_and_refusal(monkeypatch):
    # group 8 at head_dim 256: 16 rows (2 query tokens) fit once the chunk has halved to 8 tokens
    threads, tile_tokens, chunk, size = multi.launch_shape(8, 256, 64, 4096, simulated=False)
    assert (threads, tile_tokens, chunk) == (128, 2, 8) and size == multi.shared_bytes(8, 256, 2, 8) <= multi.SHARED_LIMIT
    assert multi.shared_bytes(8, 256, 2, 16) > multi.SHARED_LIMIT
    # more rows than fit: the chunk halves to MIN_CHUNK first, then the tile of query tokens
    monkeypatch.setattr(multi, "TARGET_ROWS", 64)
    assert multi.launch_shape(1, 256, 64, 4096, simulated=False)[1:3] == (16, 8)
    monkeypatch.undo()
    # decode: one query token per tile whatever the group
    assert multi.launch_shape(1, 128, 1, 100, simulated=False)[1] == 1
    assert multi.launch_shape(1, 128, 64, 100, simulated=False)[1] == 16
    with pytest.raises(Unsupported, match=r"numba.multi needs \d+ bytes of shared memory for a group of 32 query "
                                          r"heads at head_dim 256; the limit is 49152 bytes"):
        multi.launch_shape(32, 256, 1, 100, simulated=False)
    problem = DecodeProblem.random(3, num_seqs=1, num_heads=32, num_kv_heads=1, head_dim=256, block_size=16,
                                   context_lens=[5], query_lens=[2])
    result = check_problem("numba.multi", problem)
    assert result.error is not None and "Unsupported" in result.error


def test_negative_control_sees_one_token_too_many():
    """The control is right on decode rows (no token after the last position) and wrong as soon as
    a sequence has several query tokens."""
    decode = DecodeProblem.random(13, num_seqs=2, block_size=4, context_lens=[9, 14], **SHAPE)
    _assert_ok(decode, "wrong.numba.causal_off_by_one")
    several = DecodeProblem.random(13, num_seqs=2, block_size=4, context_lens=[9, 14], query_lens=[3, 1], **SHAPE)
    result = check_problem("wrong.numba.causal_off_by_one", several)
    assert result.error is None and not result.comparison.ok
