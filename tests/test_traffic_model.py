"""The performance model and the device table: bounds per level, Little's law, waves, launch cost, sources."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from sandbox.analysis import gpus, model
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
    return model.Kernel("k", m, blocks, threads, blocks_per_sm, loads, flops, loads != model.DEFAULT_LOADS_IN_FLIGHT)


@settings(max_examples=60, deadline=None)
@given(dram=st.integers(0, 10**10), l2=st.integers(0, 10**9), requests=st.integers(1, 10**7),
       per_request=st.integers(1, 32), shared=st.integers(0, 10**8), tensor=st.integers(0, 10**14),
       flops=st.floats(0, 1e13), blocks=st.integers(1, 10**5), bps=st.integers(1, 16), loads=st.integers(1, 16))
def test_the_time_is_never_below_any_levels_bytes_over_bandwidth(dram, l2, requests, per_request, shared, tensor,
                                                                  flops, blocks, bps, loads):
    k = kernel(dram, l2, requests, requests * per_request, shared, tensor, flops, blocks, 128, bps, loads)
    out = model.predict([k], H200)
    seconds = out["time_us"] / 1e6
    assert seconds >= dram / H200.dram_bytes_per_s
    assert seconds >= l2 * 32 / H200.l2_bytes_per_s
    assert seconds >= (requests * per_request / 4 + shared) / (H200.sms * H200.clock_hz) * (1 - 1e-9)
    assert seconds >= flops / H200.fp32_flops_per_s and seconds >= tensor / H200.tensor_flops_per_s
    assert seconds >= H200.launch_s and 0 <= out["fraction_of_dram_bw"] <= 1 + 1e-9
    assert out["bound"] in model.LEVELS


def test_a_streaming_kernel_with_enough_bytes_in_flight_is_dram_bound():
    gb = 10**9
    k = kernel(dram=gb, l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32, blocks=4096,
               blocks_per_sm=8, loads=8)
    out = model.predict([k], H200)
    assert out["bound"] == "dram"
    assert out["time_us"] == pytest.approx(gb / H200.dram_bytes_per_s * 1e6 + H200.launch_s * 1e6)
    assert out["fraction_of_dram_bw"] > 0.98


def test_littles_law_binds_when_too_few_bytes_are_in_flight():
    gb = 10**9
    busy = kernel(dram=gb, l2_sectors=gb // 32, load_requests=gb // 512, load_sectors=gb // 32,
                  blocks=H200.sms * 32, blocks_per_sm=1, loads=1)   # every SM runs 32 blocks, one at a time
    out = model.predict([busy], H200)
    assert out["bound"] == "latency"
    # 4 warps x 512 bytes per SM in flight: 132 * 2048 bytes per 600 ns
    in_flight = H200.sms * 4 * 512
    assert out["levels_us"]["latency"] == pytest.approx(gb / (in_flight / H200.dram_latency_s) * 1e6, rel=0.01)
    more = model.predict([dataclasses.replace(busy, loads_in_flight=8, loads_declared=True)], H200)
    assert more["levels_us"]["latency"] == pytest.approx(out["levels_us"]["latency"] / 8)
    assert any("LOADS_IN_FLIGHT)" in a and "8 global load requests" in a for a in more["assumptions"])
    assert any("the default" in a for a in out["assumptions"])


def test_one_block_more_than_the_sms_doubles_the_busiest_sms_work():
    per_block = 10**6
    def shared_bound(blocks):
        return model.predict([kernel(shared_wavefronts=per_block * blocks, blocks=blocks)], H200)["levels_us"]["l1_shared"]
    assert shared_bound(H200.sms + 1) == pytest.approx(2 * shared_bound(H200.sms))


def test_every_kernel_pays_a_launch_and_kernels_add_up():
    k = kernel(dram=10**6)
    one, two = model.predict([k], H200), model.predict([k, k], H200)
    assert two["time_us"] == pytest.approx(2 * one["time_us"])
    assert model.predict([kernel()], H200)["time_us"] == pytest.approx(H200.launch_s * 1e6)
    assert any("launch cost" in a for a in one["assumptions"]) and any("H200" in a for a in one["assumptions"])


def test_the_device_table_gives_a_source_for_every_figure():
    for gpu in gpus.GPUS.values():
        figures = [f.name for f in dataclasses.fields(gpu) if f.name not in ("name", "arch", "sources")]
        assert set(figures) <= set(gpu.sources), set(figures) - set(gpu.sources)
        assert all(len(gpu.sources[f]) > 20 for f in figures)
    h200, h100 = gpus.get("h200"), gpus.get("H100")
    assert (h200.sms, h200.l2_bytes, h200.dram_bytes_per_s) == (132, 60 * 2**20, 4.8e12)
    assert h100.dram_bytes_per_s == 3.35e12 and h100.l2_bytes == 50 * 2**20
    with pytest.raises(ValueError, match="device must be one of h200, h100"):
        gpus.get("a100")
