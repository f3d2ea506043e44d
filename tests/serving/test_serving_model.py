"""--step-cost model: the performance model's decode attention time, counted on unit problems and scaled.

Kept small: head dim 64, one variant (cupy.v1, or cupy.v2 for a call of two kernels), contexts up to 32 tokens.
"""
from __future__ import annotations

import pytest

from sandbox.analysis.traffic.variant import traffic
from sandbox.problem import DecodeProblem
from sandbox.serving import cost_model
from sandbox.memory.budget import ModelShape
from sandbox.serving.cost import StepBatch
from sandbox.serving.cost_sources import make_cost_model
from sandbox.serving.cost_model import ModelCost

SHAPE = ModelShape(num_layers=3, num_kv_heads=4, head_dim=64, kv_dtype_bytes=2, params=1e9)


def _problem(num_seqs, heads, context, block_size=16):
    return DecodeProblem.random(seed=0, num_seqs=num_seqs, num_heads=heads, num_kv_heads=heads, head_dim=64,
                                block_size=block_size, context_lens=[context] * num_seqs, dtype="float16",
                                share_prefix=False)


@pytest.fixture(scope="module")
def v2():
    return make_cost_model("model:cupy.v2", SHAPE)


def test_the_unit_problem_gives_traffics_own_model_time():
    unit = ModelCost("cupy.v1", ModelShape(3, cost_model.UNIT_HEADS, 64, 2))
    expected = traffic("cupy.v1", _problem(cost_model.UNIT_SEQS, cost_model.UNIT_HEADS, 16), sample_seqs=None)
    (seconds,) = unit.layer_times(16, cost_model.UNIT_SEQS, 0)
    assert seconds == pytest.approx(expected["model"]["time_us"] * 1e-6, rel=1e-9)


def test_scaling_the_unit_matches_counting_the_whole_batch(v2):
    """6 sequences x 4 heads at 32 tokens: the unit's counts x 6 agree with a count of all 24 (sequence, head) pairs."""
    whole = traffic("cupy.v2", _problem(6, 4, 32), sample_seqs=None)["model"]["time_us"] * 1e-6
    (scaled,) = v2.layer_times(16, 6, 1)
    assert scaled == pytest.approx(whole, rel=0.02)


def test_contexts_between_points_interpolate_and_the_batch_pays_every_layer(v2):
    (at16,), (at32,) = v2.layer_times(16, 5, 0), v2.layer_times(16, 5, 1)
    assert at32 > at16
    assert v2.attention_time(16, 5, 24) == (pytest.approx((at16 + at32) / 2), "cupy.v2")
    assert v2.attention_time(16, 5, 3)[0] == pytest.approx(at16)       # below the first point: its time
    assert v2.attention_time(0, 5, 16)[0] == pytest.approx(at16)       # contiguous: the largest block size (16)
    batch = StepBatch(decode_tokens=5, decode_context=5 * 24, block_size=16)
    write = 5 * SHAPE.kv_bytes_per_token / v2.bandwidth
    assert v2.decode_time(batch) == pytest.approx(3 * (at16 + at32) / 2 + write)
    assert v2.decode_time(StepBatch(prefill_tokens=8, prefill_attended=36)) == 0.0
    assert v2.linear_time(batch) == v2.fixed and "performance model (H200 SXM" in v2.source


def test_the_fastest_variant_stands_for_the_kernel():
    both = ModelCost("cupy.v1,cupy.v2", SHAPE)
    v1, v2 = both.layer_times(16, 8, 1)
    seconds, name = both.attention_time(16, 8, 32)
    assert seconds == min(v1, v2) and name == ("cupy.v1" if v1 <= v2 else "cupy.v2")


@pytest.mark.parametrize("spec, shape, message", [
    ("model:numba.gqa", SHAPE, "numba.gqa is not a CUDA C .cupy.\\*. variant"),
    ("model:cupy.nope", SHAPE, "unknown variant 'cupy.nope'"),
    ("model:cupy.mla", SHAPE, "cupy.mla solves mla problems"),
    ("model:,", SHAPE, "name at least one variant"),
    ("model:cupy.v1", ModelShape(3, 4, 72, 2), "cupy.v1 does not support head_dim=72"),
    ("model:cupy.v1", ModelShape(3, 4, 64, 3), "a KV element of 3 bytes has no kernel dtype"),
])
def test_bad_arguments_are_refused_by_name(spec, shape, message):
    with pytest.raises(ValueError, match=message):
        make_cost_model(spec, shape)


def test_an_unsupported_block_size_is_refused_before_anything_runs(v2):
    with pytest.raises(ValueError, match="cupy.v2 does not support block_size=24"):
        v2.check_block_sizes([16, 24])


def test_the_kernel_table_asks_the_public_traffic_model():
    import sandbox
    from sandbox.serving.kernel_time import KernelTable, unit_problem

    shape = ModelShape(num_layers=2, num_kv_heads=4, head_dim=64, kv_dtype_bytes=2)
    table = KernelTable(("cupy.v1",), shape, (4,), max_len=128)
    assert table.contexts == (128,) and table.block_sizes == [4, 16, 256]
    direct = sandbox.traffic("cupy.v1", unit_problem(4, 128, 64, 2), sample_seqs=2)["model"]["time_us"]
    assert table.times[("cupy.v1", 4, 128)] == pytest.approx(direct)
    assert table.ratio(4, 128) == pytest.approx(direct / table.times[("cupy.v1", 16, 128)])
