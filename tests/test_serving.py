"""Serving simulator: hand-computed micro-scenarios, the cost models, workloads and the max-rate rule."""
from __future__ import annotations

import csv

import pytest

from sandbox.serving.cost import AnalyticCost, ModelShape, StepBatch, make_cost_model
from sandbox.serving.cost_sweep import SweepCost
from sandbox.serving.engine import Engine, EngineConfig
from sandbox.serving.kv_contiguous import ContiguousKV
from sandbox.serving.kv_paged import PagedKV
from sandbox.serving.metrics import max_rate, summarize
from sandbox.serving.workloads import Request, WorkloadSpec, build_requests, count_requests, with_rate

SHAPE = ModelShape(num_layers=40, num_kv_heads=40, head_dim=128, kv_dtype_bytes=2, params=13e9)


class Flat:
    """Every step takes 10 ms, whatever it holds: times below are multiples of 0.01 s."""
    source = "flat 10 ms per step"

    def step_time(self, batch):
        return 0.01

    def prefill_token_time(self):
        return 0.0


def serve(kv, requests, **config):
    config = dict(dict(kv_bytes_per_token=100, max_num_seqs=4, max_batched_tokens=8), **config)
    return Engine(kv, Flat(), EngineConfig(**config), requests).run()


def finishes(engine):
    return {g.req.rid: (round(g.first_token, 6), round(g.finish, 6)) for g in engine.done}


# ---- micro-scenarios computed by hand -----------------------------------------------------------
def test_one_request_latency_and_throughput():
    # step 1: prefill 4 tokens, first token at 0.01; steps 2 and 3 decode tokens 2 and 3.
    e = serve(PagedKV(64, 4), [Request(0, 0.0, [1, 2, 3, 4], [5, 6, 7])])
    assert finishes(e) == {0: (0.01, 0.03)}
    p = summarize(e, 1.0, 0.0)
    assert p["normalized_latency"] == pytest.approx(0.03 / 3) and p["ttft"] == pytest.approx(0.01)
    assert p["throughput"] == pytest.approx(1 / 0.03) and p["output_tokens_per_s"] == pytest.approx(3 / 0.03)
    assert p["steps"] == 3 and p["preemptions"] == 0


def test_chunked_prefill_splits_a_prompt_over_the_token_budget():
    # 10 prompt tokens at 4 per step: chunks 4, 4, 2 -> first token at 0.03, then 2 decode steps.
    e = serve(PagedKV(64, 4), [Request(0, 0.0, list(range(10)), [1, 2, 3])], max_batched_tokens=4)
    assert finishes(e) == {0: (0.03, 0.05)}


def test_decode_tokens_take_the_budget_first():
    # A decodes from step 2 on; B arrives at 0.005, admitted at step 2 with budget 4 - 1 = 3: chunks 3, 3
    # (steps 2, 3), first token at 0.03; A: 4 tokens at 0.01, then decode tokens 2..4 at 0.02..0.04.
    a = Request(0, 0.0, [1, 2, 3, 4], [9, 9, 9, 9])
    b = Request(1, 0.005, list(range(6)), [8])
    e = serve(PagedKV(64, 4), [a, b], max_batched_tokens=4)
    assert finishes(e) == {0: (0.01, 0.04), 1: (0.03, 0.03)}


def test_contiguous_max_reservation_makes_the_second_request_wait():
    # budget 8 = one max_len-8 reservation: B starts when A frees its range at 0.03.
    a, b = Request(0, 0.0, [1, 2], [3, 4, 5]), Request(1, 0.0, [6, 7], [8, 9, 10])
    e = serve(ContiguousKV(8, 8, "max"), [a, b])
    assert finishes(e) == {0: (0.01, 0.03), 1: (0.04, 0.06)}
    assert summarize(e, 1.0, 0.0)["throughput"] == pytest.approx(2 / 0.06)
    both = serve(ContiguousKV(10, 5, "oracle"), [a, b])             # exact reservations: both fit at once
    assert finishes(both) == {0: (0.01, 0.03), 1: (0.01, 0.03)}


def _two_growing():
    # Block size 2, 4 blocks. Both requests hold 2 blocks after step 3; at step 4 A needs a third block:
    # B, the latest arrival (same time, higher id), is preempted.
    return [Request(0, 0.0, [1, 2], [11, 12, 13, 14, 15]), Request(1, 0.0, [3, 4], [21, 22, 23, 24, 25])]


def test_preemption_by_recompute_reuses_the_cached_prompt_block():
    e = serve(PagedKV(8, 2, swap_blocks=0), _two_growing())
    # B held prompt + 2 tokens (4 KV) when preempted at step 4; A finishes at step 5 (0.05); B comes back
    # at step 6 with prompt + 3 generated = 5 tokens: its prompt block is still cached (its second block
    # was evicted when A grew), so 3 are computed, 2 of them recomputed; token 4 at 0.06, token 5 at 0.07.
    assert finishes(e) == {0: (0.01, 0.05), 1: (0.01, 0.07)}
    p = summarize(e, 1.0, 0.0)
    assert (p["preemptions"], p["recompute_preemptions"], p["recomputed_tokens"]) == (1, 1, 2)
    assert p["prefix_hit_rate"] == pytest.approx(2 / (2 + 2 + 5)) and p["swapped_bytes"] == 0
    off = serve(PagedKV(8, 2, prefix_cache=False), _two_growing())
    assert summarize(off, 1.0, 0.0)["recomputed_tokens"] == 4                # nothing cached: all 4 again


def test_preemption_by_swap_is_charged_at_the_swap_bandwidth():
    # 2 blocks of 2 tokens x 1000 bytes = 4000 bytes each way at 400 B/s: 10 s out (step 4), 10 s in
    # (step 6, a step with nothing but the swap), then B decodes tokens 4 and 5.
    e = serve(PagedKV(8, 2, swap_blocks=10), _two_growing(), preemption="swap", kv_bytes_per_token=1000,
              swap_gbps=4e-7)
    assert finishes(e) == {0: (0.01, 10.05), 1: (0.01, 20.07)}
    p = summarize(e, 1.0, 0.0)
    assert (p["swap_preemptions"], p["recomputed_tokens"], p["swapped_bytes"]) == (1, 0, 8000)
    assert p["swap_seconds"] == pytest.approx(20.0)


def test_swap_falls_back_to_recompute_when_the_cpu_pool_is_full():
    e = serve(PagedKV(8, 2, swap_blocks=1), _two_growing(), preemption="swap")
    p = summarize(e, 1.0, 0.0)
    assert (p["swap_preemptions"], p["recompute_preemptions"]) == (0, 1) and len(e.done) == 2


def test_max_num_seqs_caps_admission():
    reqs = [Request(i, 0.0, [i], [1, 2]) for i in range(3)]
    e = serve(PagedKV(64, 4), reqs, max_num_seqs=2, max_batched_tokens=2)
    assert finishes(e) == {0: (0.01, 0.02), 1: (0.01, 0.02), 2: (0.03, 0.04)}


def test_parallel_samples_share_the_prompt_and_beams_finish_together():
    par = Request(0, 0.0, list(range(8)), [1, 2, 3], mode="parallel", width=3)
    e = serve(PagedKV(64, 4), [par], max_num_seqs=3, max_batched_tokens=8, sample_every=1)
    assert finishes(e) == {0: (0.01, 0.03)}
    p = summarize(e, 1.0, 0.0)
    assert p["sharing_saved"] > 0 and p["peak_running_seqs"] == 3
    beam = Request(0, 0.0, list(range(8)), list(range(40)), mode="beam", width=4)
    e = serve(PagedKV(256, 4), [beam], max_num_seqs=4)
    assert finishes(e)[0][1] == pytest.approx(0.40) and not e.kv.leaked()


def test_chat_follow_up_arrives_think_time_after_the_answer():
    second = Request(1, 0.0, [1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 4])
    first = Request(0, 0.0, [1, 2, 3, 4], [5, 6, 7, 8, 9], follow_up=second, think_time=1.0)
    e = serve(PagedKV(64, 4), [first])
    # first ends at 0.05; the follow-up arrives at 1.05; its history [1..8] is two cached blocks
    # (the answer's block was keyed while decoding), so one token is computed.
    assert finishes(e) == {0: (0.01, 0.05), 1: (1.06, 1.07)}
    assert e.done[1].cached == 8


# ---- cost models ----------------------------------------------------------------------------------
def test_analytic_cost_by_hand():
    c = AnalyticCost(SHAPE)
    bw, flops = 4.8e12 * 0.8, 989e12 * 0.6
    assert c.fixed == pytest.approx(26e9 / bw)                          # 13B params x 2 bytes
    b = StepBatch(decode_tokens=10, decode_context=5000, prefill_tokens=100, prefill_attended=5050, block_size=16)
    assert c.linear_time(b) == pytest.approx(26e9 / bw)                # 110 tokens: weight streaming dominates
    assert c.decode_time(b) == pytest.approx(5010 * 819_200 / bw)
    assert c.prefill_time(b) == pytest.approx(4 * 5120 * 40 * 5050 / flops + 100 * 819_200 / bw)
    big = StepBatch(prefill_tokens=2048, prefill_attended=2048 * 2049 // 2)
    assert c.linear_time(big) == pytest.approx(2 * 13e9 * 2048 / flops)   # compute-bound prefill
    assert AnalyticCost(SHAPE, fixed_ms=3.0).linear_time(StepBatch(decode_tokens=1)) == pytest.approx(3e-3)
    assert "4.8 TB/s" in c.source and "fixed 3.00 ms/step (--fixed-ms)" in AnalyticCost(SHAPE, 3.0).source


def _sweep_csv(path, rows):
    fields = ["variant", "backend", "timing", "shape", "dtype", "kv_dtype", "options", "query_len", "group_size",
              "block_size", "status", "time_us", "bytes"]
    with open(path / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(dict(dict(timing="cuda-events", dtype="float16", kv_dtype="float16", options="", query_len=1,
                                 group_size=0, status="ok"), **r))


def test_sweep_cost_fits_the_fastest_gpu_variant_per_block_size(tmp_path):
    rows = [dict(variant="a", backend="gpu", shape="s1", block_size=16, time_us=12, bytes=1_000_000),
            dict(variant="b", backend="gpu", shape="s1", block_size=16, time_us=10, bytes=1_000_000),
            dict(variant="a", backend="gpu", shape="s2", block_size=16, time_us=19, bytes=4_000_000),
            dict(variant="a", backend="gpu", shape="s3", block_size=16, time_us=1, bytes=4_000_000, status="wrong"),
            dict(variant="a", backend="cpu-sim", shape="s1", block_size=16, time_us=1, bytes=1_000_000),
            dict(variant="a", backend="gpu", shape="s1", block_size=32, time_us=5, bytes=1_000_000,
                 options="window=8")]
    _sweep_csv(tmp_path, rows)
    c = make_cost_model(f"sweep:{tmp_path}", SHAPE)
    assert isinstance(c, SweepCost) and list(c.fits) == [16]
    a, b = c.fits[16]
    assert a == pytest.approx(7.0) and b == pytest.approx(3e-6)        # 10 us at 1 MB, 19 us at 4 MB
    batch = StepBatch(decode_tokens=2, decode_context=998, block_size=16)
    layer = 1000 * 819_200 / 40
    assert c.decode_time(batch) == pytest.approx(40 * (7.0 + 3e-6 * layer) * 1e-6)
    assert "GPU sweep" in c.source and "bs 16: 7.0 us + bytes / 333 GB/s (2 shapes)" in c.source
    with pytest.raises(ValueError, match="has GPU fits for block sizes 16 only; --block-sizes asks for 32"):
        c.check_block_sizes([16, 32])


def test_sweep_cost_refuses_cpu_emulation(tmp_path):
    _sweep_csv(tmp_path, [dict(variant="a", backend="cpu-sim", shape="s", block_size=16, time_us=9, bytes=10)])
    with pytest.raises(ValueError, match="no correct GPU rows .backends here: cpu-sim.*CPU emulation"):
        make_cost_model(f"sweep:{tmp_path}", SHAPE)
    with pytest.raises(ValueError, match="no sweep.csv"):
        make_cost_model(f"sweep:{tmp_path / 'none'}", SHAPE)
    with pytest.raises(ValueError, match=r"unknown source 'nope'; choose one of analytic, sweep:RUN_DIR, model\[:"):
        make_cost_model("nope", SHAPE)


# ---- workloads and the max-rate rule --------------------------------------------------------------
def test_workloads_share_what_they_should():
    shared = build_requests(WorkloadSpec("shared-prompt", 5, 2048, prefix_len=32), seed=1)
    assert len({tuple(r.prompt[:32]) for r in shared}) == 1 and len({tuple(r.prompt[32:40]) for r in shared}) == 5
    chat = build_requests(WorkloadSpec("chat", 8, 2048, turns=4), seed=1)
    turn = chat[0]
    while turn.follow_up is not None:
        assert turn.follow_up.prompt[:len(turn.prompt) + len(turn.output)] == turn.prompt + turn.output
        turn = turn.follow_up
    assert count_requests(chat) <= 8
    beams = build_requests(WorkloadSpec("beam", 3, 2048, width=4), seed=1)
    assert all(r.mode == "beam" and r.width == 4 for r in beams)
    plain = build_requests(WorkloadSpec("sharegpt", 50, 2048), seed=1)
    fast = with_rate(plain, 5.0)
    assert [r.arrival * 5.0 for r in fast] == pytest.approx([r.arrival for r in plain])
    assert [r.prompt for r in fast] == [r.prompt for r in plain] and plain[0].arrival == 0.0
    assert build_requests(WorkloadSpec("sharegpt", 50, 2048), seed=1)[7].prompt == plain[7].prompt   # seeded


def test_max_rate_is_the_last_rate_before_the_first_failure():
    pts = [dict(rate=r, normalized_latency=lat) for r, lat in [(1, 0.01), (2, 0.02), (4, 0.09), (3, 0.03)]]
    best, interp = max_rate(pts, 0.05)
    assert best == 3 and interp == pytest.approx(3 + (0.05 - 0.03) / (0.09 - 0.03))
    assert max_rate(pts, 0.005) == (None, None)
    assert max_rate(pts, 1.0) == (4, 4)
    late = pts + [dict(rate=8, normalized_latency=0.01)]       # a pass after a failure does not count
    assert max_rate(late, 0.05)[0] == 3
