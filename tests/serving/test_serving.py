"""Serving simulator: hand-computed micro-scenarios, the cost models, workloads and the max-rate rule."""
from __future__ import annotations

import csv
import dataclasses

import pytest

from sandbox.analysis import gpus
from sandbox.memory.budget import ModelShape
from sandbox.serving import search
from sandbox.serving.cost import AnalyticCost, StepBatch, SwapCost
from sandbox.serving.cost_sources import make_cost_model
from sandbox.serving.cost_sweep import SweepCost
from sandbox.serving.engine import Engine, EngineConfig
from sandbox.serving.kernel_time import REFERENCE, KernelTable, KernelTimeCost
from sandbox.serving.kv_contiguous import ContiguousKV
from sandbox.serving.kv_paged import PagedKV
from sandbox.serving.metrics import summarize
from sandbox.serving.swap_study import swap_vs_recompute
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


def test_static_batching_waits_for_the_whole_batch():
    # budget 16 = two max_len-8 reservations. A (2 tokens) ends at 0.02, B (5 tokens) at 0.05; C arrives at
    # 0.015. Continuous batching admits C into A's freed range at 0.02; static batching only after B, at 0.05.
    reqs = [Request(0, 0.0, [1, 2], [3, 4]), Request(1, 0.0, [5, 6], [7, 8, 9, 10, 11]),
            Request(2, 0.015, [12, 13], [14, 15])]
    continuous = serve(ContiguousKV(16, 8, "max"), reqs)
    static = serve(ContiguousKV(16, 8, "max", static=True), reqs)
    assert finishes(continuous) == {0: (0.01, 0.02), 1: (0.01, 0.05), 2: (0.03, 0.04)}
    assert finishes(static) == {0: (0.01, 0.02), 1: (0.01, 0.05), 2: (0.06, 0.07)}
    assert static.kv.name == "static-max" and not static.kv.leaked()


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
              swap=SwapCost(1000, 400, 0.0, 1))
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
    h200 = gpus.get("h200")
    bw, flops = h200.dram_bytes_per_s * 0.8, h200.tensor_flops_per_s * 0.6
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


def test_the_knee_search_brackets_extends_and_bisects():
    tried = []

    def latency(rate):
        tried.append(rate)
        return 0.01 if rate <= 5.3 else 1.0

    knee = search.find_knee(latency, (2, 3, 4, 6, 8), 0.05, rel_tol=0.05)
    assert knee.rate == 5.25 and not knee.censored
    assert tried == [8, 6, 4, 5.0, 5.5, 5.25]            # from the top down, then bisection to 5%
    top = search.find_knee(lambda r: 0.0, (2, 3), 0.05, max_extend=3)
    assert top.rate == 24 and top.censored and sorted(top.tried) == [3, 6, 12, 24]
    none = search.find_knee(lambda r: 1.0, (2, 3), 0.05, max_extend=2)
    assert none.rate is None and not none.censored and sorted(none.tried) == [0.5, 1.0, 2, 3]
    nan = search.find_knee(lambda r: float("nan") if r > 2 else 0.0, (2, 3), 0.05)   # nothing finished: missed
    assert nan.rate is not None and 2 <= nan.rate < 3


def test_max_rates_over_seeds_carry_a_t_interval_and_censoring():
    out = search.combine([search.Knee(5.0, False), search.Knee(6.0, False), search.Knee(5.5, False)])
    assert out["max_rate"] == pytest.approx(5.5) and not out["max_rate_censored"]
    half = 4.303 * 0.5 / 3 ** 0.5                         # t(0.975, 2 df) x s / sqrt(n), s = 0.5
    assert out["max_rate_ci"] == pytest.approx([5.5 - half, 5.5 + half])
    assert search.combine([search.Knee(5.0, False), search.Knee(9.0, True)])["max_rate_censored"]
    assert search.combine([search.Knee(5.0, False), search.Knee(None, False)])["max_rate"] is None
    assert search.combine([search.Knee(5.0, False)])["max_rate_ci"] is None


def test_the_warm_up_is_left_out_of_the_latency():
    reqs = [Request(i, float(i), [1, 2], [3] * 4) for i in range(10)]
    e = serve(PagedKV(64, 2), reqs)
    all_in, warm = summarize(e, 1.0, 0.0, warmup=0.0), summarize(e, 1.0, 0.0, warmup=0.3)
    assert (all_in["measured_requests"], warm["measured_requests"]) == (10, 7)
    assert warm["requests"] == 10


def test_swap_pays_a_latency_per_copy_and_its_bytes():
    swap = SwapCost(bytes_per_token=1000, bytes_per_s=1e6, latency_s=1e-3, copies=4)
    assert swap.seconds(3, 2) == pytest.approx(3 * (4e-3 + 2 * 1000 / 1e6))
    study = swap_vs_recompute(swap, Flat(), tokens=64, block_sizes=(1, 4, 16, 64))
    times = [r["swap_s"] for r in study["rows"]]
    assert times == sorted(times, reverse=True)           # fewer copies as blocks grow
    assert study["crossing"] is None                       # Flat recomputes for free: recompute always wins

    class Slow(Flat):
        def prefill_token_time(self):
            return 1e-3                                   # 64 ms to recompute 64 tokens
    study = swap_vs_recompute(swap, Slow(), tokens=64, block_sizes=(1, 4, 16, 64))
    # swap (out + in): bs 1: 2 x 64 x 5 ms = 640 ms; 4: 2 x 16 x 8 ms = 256; 16: 2 x 4 x 20 = 160; 64: 2 x 68 = 136
    assert [round(1e3 * r["swap_s"]) for r in study["rows"]] == [640, 256, 160, 136] and study["crossing"] is None
    swap = SwapCost(bytes_per_token=100, bytes_per_s=1e6, latency_s=1e-3, copies=4)
    crossing = swap_vs_recompute(swap, Slow(), tokens=64, block_sizes=(1, 4, 16, 64))["crossing"]
    assert 4 < crossing < 16                               # 88 ms at 4, 27 ms at 16 against 64 ms


def test_kernel_time_scales_the_roofline_by_the_models_block_size_ratio():
    modelled = {1: 3.0, 4: 1.5, 16: 1.0, 64: 0.9, 256: 0.8}     # us, a fake traffic model: small blocks slow

    def fake(name, block_size, context, shape):
        return modelled[block_size] * (2.0 if name == "slow" else 1.0) * context / 128

    table = KernelTable(("fast", "slow"), SHAPE, (1, 4, 64), max_len=2048, time_us=fake)
    assert table.contexts == (128, 512, 2048) and table.contiguous == 256
    assert table.ratio(REFERENCE, 300) == pytest.approx(1.0) and table.ratio(1, 300) == pytest.approx(3.0)
    assert table.ratio(0, 5000) == pytest.approx(0.8)             # contiguous: as the largest block counted
    cost, roof = KernelTimeCost(table, SHAPE), AnalyticCost(SHAPE)
    b = StepBatch(decode_tokens=10, decode_context=5000, block_size=4)
    assert cost.decode_time(b) == pytest.approx((1.5 * 5000 + 10) * 819_200 / roof.bandwidth)
    assert cost.decode_time(b._replace(block_size=16)) == pytest.approx(roof.decode_time(b))
    assert "fastest of fast, slow" in cost.source


def test_tensor_parallelism_splits_the_work_and_pays_two_all_reduces_per_layer():
    from sandbox.memory.budget import kv_budget
    from sandbox.serving import cost as C

    budget = kv_budget(model="66b")
    assert (budget.num_layers, budget.num_kv_heads, budget.tensor_parallel) == (64, 72, 4)
    assert 9_400 < budget.tokens < 9_800                                   # the paper's Table 1: 9.7K slots
    shape = budget.shape()
    one, four = AnalyticCost(dataclasses.replace(shape, tensor_parallel=1)), AnalyticCost(shape)
    assert four.bandwidth == pytest.approx(4 * one.bandwidth) and four.fixed == pytest.approx(one.fixed / 4)
    b = StepBatch(decode_tokens=100, decode_context=50_000)
    ring = 2 * 3 / 4 * 100 * 72 * 128 * 2
    comm = 2 * 64 * (C.ALLREDUCE_LATENCY_S + ring / C.LINK_BYTES_PER_S)
    assert four.linear_time(b) == pytest.approx(four.fixed + comm) and one.communication_time(100) == 0
    assert "tensor parallel over 4 GPUs" in four.source
    with pytest.raises(ValueError, match="--num-layers and --model 66b both set the model's shape"):
        kv_budget(num_layers=40, model="66b")


def test_paired_ratios_cancel_the_seeds_common_luck():
    paged = search.combine([search.Knee(8.0, False), search.Knee(9.0, False), search.Knee(6.4, False)])
    oracle = search.combine([search.Knee(4.0, False), search.Knee(4.5, False), search.Knee(3.2, False)])
    r = search.paired_ratio(paged, oracle)
    assert r["ratio_by_seed"] == pytest.approx([2.0, 2.0, 2.0]) and r["ratio_ci"] == pytest.approx([2.0, 2.0])
    assert paged["max_rate_ci"][1] - paged["max_rate_ci"][0] > 1                # the rates alone: wide
    assert search.paired_ratio(paged, search.combine([search.Knee(None, False)] * 3)) is None


def test_the_block_size_figure_draws_rates_and_paired_ratios(tmp_path):
    from sandbox.serving.plots import plot_block_size

    def entry(name, knees, censored=False):
        return dict(allocator=name, width=1, points=[], **search.combine([search.Knee(k, censored) for k in knees]))
    result = dict(meta=dict(widths=[1], seed=0, seeds=2, rel_tol=0.05, latency_bound=0.05, workload="sharegpt",
                            step_cost="test"),
                  allocators={"paged-1": entry("paged-1", [4, 5]), "paged-16": entry("paged-16", [5, 6]),
                              "paged-256": entry("paged-256", [9, 9], censored=True),
                              "contiguous-oracle": entry("contiguous-oracle", [3, 3.5])})
    assert plot_block_size(result, tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
