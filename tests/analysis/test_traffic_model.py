"""The performance model and the device table: bounds per level, Little's law with queueing, waves, fixed costs,
the measured ceilings, sources."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from sandbox.analysis import gpus, model, occupancy
from sandbox.analysis.traffic import metrics as M

H200 = gpus.get("h200")


def kernel(dram=0, l2_sectors=0, load_requests=0, load_sectors=0, shared_wavefronts=0, tensor_flops=0, flops=0.0,
           blocks=1024, threads=128, blocks_per_sm=4, loads=1):
    m = M.zero()
    m[M.DRAM_READ] = dram
    m["lts__t_sectors_op_read.sum"] = l2_sectors
    m[M.GLOBAL_LOAD_REQUESTS] = load_requests
    m[M.GLOBAL_LOAD_SECTORS] = load_sectors
    m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] = shared_wavefronts
    m["sandbox__tensor_flops.sum"] = tensor_flops
    return model.Kernel("k", m, blocks, threads, blocks_per_sm, loads, flops, "sass")


@settings(max_examples=60, deadline=None)
@given(dram=st.integers(0, 10**10), l2=st.integers(0, 10**9), requests=st.integers(1, 10**7),
       per_request=st.integers(1, 32), shared=st.integers(0, 10**8), tensor=st.integers(0, 10**14),
       flops=st.floats(0, 1e13), blocks=st.integers(1, 10**5), bps=st.integers(1, 16), loads=st.integers(1, 16))
def test_the_time_is_never_below_any_levels_bytes_over_bandwidth(dram, l2, requests, per_request, shared, tensor,
                                                                  flops, blocks, bps, loads):
    k = kernel(dram, l2, requests, requests * per_request, shared, tensor, flops, blocks, 128, bps, loads)
    out = model.predict([k], H200)
    seconds = out["time_us"] / 1e6
    assert seconds >= dram / H200.read_bytes_per_s  # never faster than the measured read stream
    assert seconds >= l2 * 32 / H200.l2_bytes_per_s
    assert seconds >= (requests * per_request / 4 + shared) / (H200.sms * H200.clock_hz) * (1 - 1e-9)
    assert seconds >= flops / H200.fp32_flops_per_s and seconds >= tensor / H200.tensor_flops_per_s
    assert seconds >= H200.launch_s and 0 <= out["fraction_of_achievable"] <= 1 + 1e-9
    assert out["fraction_of_dram_bw"] == pytest.approx(out["fraction_of_achievable"] * H200.read_bytes_per_s
                                                       / H200.dram_bytes_per_s)
    assert out["bound"] in model.LEVELS


def test_a_streaming_kernel_with_enough_bytes_in_flight_approaches_the_read_stream():
    """The queue's latency grows without bound as DRAM fills, so many bytes in flight come close to the measured
    read stream (the DRAM level) and never pass it."""
    gb = 10**9
    k = kernel(dram=gb, l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32,
               blocks=H200.sms * 32, blocks_per_sm=8, loads=64)  # whole waves: no tail
    out = model.predict([k], H200)
    assert out["bound"] in ("dram", "latency")
    fixed = H200.launch_s + H200.dram_latency_s  # the launch and the ramp-up
    assert out["time_us"] == pytest.approx((gb / H200.read_bytes_per_s + fixed) * 1e6, rel=0.03)
    assert out["fraction_of_achievable"] > 0.96 and out["fraction_of_dram_bw"] < H200.read_bytes_per_s / 4.8e12
    no_latency = dict(out["levels_us"], latency=0.0)
    seconds, bound, ramp = model.kernel_time({n: v / 1e6 for n, v in no_latency.items()}, H200)
    assert bound == "dram" and ramp == H200.dram_latency_s


def test_littles_law_binds_when_too_few_bytes_are_in_flight():
    gb = 10**9
    busy = kernel(dram=gb, l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32,
                  blocks=H200.sms * 32, blocks_per_sm=1, loads=1)   # every SM runs 32 blocks, one at a time
    out = model.predict([busy], H200)
    assert out["bound"] == "latency"
    # 4 warps x 512 bytes per SM in flight: little bandwidth, so almost no queueing: the idle latency rules.
    in_flight = H200.sms * 4 * 512
    idle = gb / (in_flight / H200.dram_latency_s) + 32 * H200.block_overhead_s
    assert out["levels_us"]["latency"] == pytest.approx(idle * 1e6, rel=0.05)
    assert out["levels_us"]["latency"] > idle * 1e6
    more = model.predict([dataclasses.replace(busy, loads_in_flight=8)], H200)
    assert more["levels_us"]["latency"] < out["levels_us"]["latency"] / 4
    assert any("8 global loads back to back" in a and "read from its SASS" in a for a in more["assumptions"])
    assumed = model.predict([dataclasses.replace(busy, loads_source="no SASS: because")], H200)
    assert any("assumed (no SASS: because)" in a for a in assumed["assumptions"])


def test_the_latency_grows_as_the_memory_system_fills():
    """Queueing: more bytes in flight buy less than proportionally more bandwidth, never past the read stream."""
    gb = 10**9

    def bandwidth(loads):
        k = kernel(dram=gb, l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32,
                   blocks=H200.sms * 8, blocks_per_sm=8, loads=loads)
        return gb / (model.predict([k], H200)["levels_us"]["latency"] / 1e6)
    rates = [bandwidth(n) for n in (1, 2, 4, 8, 64)]
    assert rates == sorted(rates) and rates[-1] < H200.read_bytes_per_s
    assert rates[1] / rates[0] > rates[4] / rates[3]


def test_loads_that_l2_serves_wait_the_l2_latency():
    gb = 10**9
    args = dict(l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32, blocks=H200.sms * 32,
                blocks_per_sm=1, loads=1)
    from_dram = model.predict([kernel(dram=gb, **args)], H200)["levels_us"]["latency"]
    from_l2 = model.predict([kernel(dram=0, **args)], H200)["levels_us"]["latency"]
    assert from_l2 / from_dram == pytest.approx(H200.l2_latency_s / H200.dram_latency_s, rel=0.1)


def test_one_block_more_than_the_sms_doubles_the_busiest_sms_work():
    per_block = 10**6
    def shared_bound(blocks):
        return model.predict([kernel(shared_wavefronts=per_block * blocks, blocks=blocks)], H200)["levels_us"]["l1_shared"]
    assert shared_bound(H200.sms + 1) == pytest.approx(2 * shared_bound(H200.sms))


def test_every_kernel_pays_a_launch_and_kernels_add_up():
    k = kernel(dram=10**6)
    one, two = model.predict([k], H200), model.predict([k, k], H200)
    assert two["time_us"] == pytest.approx(2 * one["time_us"])
    empty = model.predict([kernel(blocks=1)], H200)  # one block that loads nothing: its launch and its block
    assert empty["time_us"] == pytest.approx((H200.launch_s + H200.block_overhead_s) * 1e6)
    many = model.predict([kernel(blocks=10**6, blocks_per_sm=32)], H200)  # a million empty blocks: the launch rate
    assert many["bound"] == "blocks" and many["levels_us"]["blocks"] == pytest.approx(1e6 / H200.block_rate_per_s * 1e6)
    assert any("launch 2.45 us per kernel" in a for a in one["assumptions"]) and any("H200" in a for a in one["assumptions"])


def test_the_device_table_gives_a_source_for_every_figure():
    assert gpus.NAMES == ("h200", "h100", "gh200", "h100-pcie", "a100")
    for gpu in gpus.GPUS.values():
        figures = [f.name for f in dataclasses.fields(gpu) if f.name not in ("name", "sources")]
        assert set(figures) <= set(gpu.sources), set(figures) - set(gpu.sources)
        assert all(len(gpu.sources[f]) > 20 for f in figures if f != "arch")
        assert gpu.arch in occupancy.ARCHS
        # measured below nominal, and a copy stream below the read stream
        assert gpu.copy_bytes_per_s <= gpu.read_bytes_per_s <= gpu.dram_bytes_per_s * 1.01
    h200, h100 = gpus.get("h200"), gpus.get("H100")
    assert (h200.sms, h200.l2_bytes, h200.dram_bytes_per_s, h200.read_bytes_per_s) == (132, 60 * 2**20, 4.8e12, 4.48e12)
    assert h100.dram_bytes_per_s == 3.35e12 and h100.l2_bytes == 50 * 2**20 and h100.read_bytes_per_s == 3.18e12
    assert gpus.get("a100").arch == "sm_80"
    with pytest.raises(ValueError, match="device must be one of h200, h100, gh200, h100-pcie, a100"):
        gpus.get("v100")


def test_the_architecture_list_is_written_once():
    from sandbox.analysis import nvrtc, resources
    assert nvrtc.ARCHS == resources.ARCHS == tuple(occupancy.ARCHS)
    assert resources.LINKER_EXTRA_SMEM == {"sm_80": 0, "sm_90": 1024}


def test_sensitivity_moves_the_time_the_right_way_and_finds_flips():
    from sandbox.analysis import sensitivity
    gb = 10**9
    k = kernel(dram=gb, l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32, blocks=H200.sms * 32,
               blocks_per_sm=1, loads=2)
    result = dict(kernels=[dict(name="k", metrics=k.metrics, grid=(k.num_blocks, 1, 1), block=(128, 1, 1),
                                blocks_per_sm=1, loads_in_flight=2, loads_per_wait=2.0, loads_in_flight_source="sass",
                                flops=0.0)])
    t = sensitivity.times(result, "h200")
    assert t["latency -25%"] < t["model"] < t["latency +25%"]
    assert t["loads +1"] < t["model"] < t["loads -1"]
    assert t["model"] == pytest.approx(model.predict([k], H200)["time_us"])
    near = dict(model=100.0, **{c: 100.0 for c in sensitivity.CASES})
    assert sensitivity.flips([("a", near), ("b", dict(near, model=101.0))]) == []
    assert sensitivity.flips([("a", near), ("b", dict(near, model=101.0, **{"loads +1": 90.0}))]) == [
        "loads +1: b is fastest, not a"]


def test_a_new_gpu_of_a_known_architecture_is_one_table_entry(monkeypatch):
    """An entry is all a GPU needs: its arch picks the compile target and the SM's resources."""
    import sandbox
    from sandbox.commands.traffic import problem_for
    from sandbox.sweep import shapes
    entry = dataclasses.replace(gpus.get("h100"), name="H800 SXM (an example entry)", sms=132,
                                read_bytes_per_s=3.0e12)
    monkeypatch.setitem(gpus.GPUS, "h800", entry)
    problem = problem_for(shapes.parse_any("2x64x4/2x64xfp16"), 16, seed=0)
    result = sandbox.traffic("cupy.gqa", problem, device="h800")
    assert result["device"] == "H800 SXM (an example entry)"
    assert all(k["loads_in_flight_detail"].startswith("sm_90:") for k in result["kernels"])
    assert result["model"]["fraction_of_achievable"] == pytest.approx(
        result["model"]["fraction_of_dram_bw"] * entry.dram_bytes_per_s / 3.0e12)
