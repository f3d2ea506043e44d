"""Triton traffic from the interpreter on hand-made kernels whose counts are known, and at a variant's scale.

Each kernel runs one program of 1024 fp32 elements with 4 warps. Triton's coalescing pass gives a contiguous
access 4 elements (16 bytes) per thread (the layouts are asserted too), so a warp's request covers
32 x 16 B = 512 B = 16 sectors and a program issues 1024 / (32 x 4) = 8 requests per access; a stride of 8
floats puts every element in its own sector (one request per element per warp: 32 requests of 32 sectors);
a masked tail drops the lanes past n; a broadcast costs one sector per request.
"""
from __future__ import annotations

import numpy as np
import pytest
import triton
import triton.language as tl

from kernels.triton import census, launch, layouts, traffic
from sandbox.analysis.traffic import count
from sandbox.analysis.traffic import metrics as M
from sandbox.problem import DecodeProblem

N = 1024


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < n, other=0.0), mask=offsets < n)


@triton.jit
def strided_kernel(src, dst, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets * 8))


@triton.jit
def broadcast_kernel(src, dst, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets * 0))


def _count(kernel, src_elements: int, scalars=()):
    args = launch.Arguments("test.kernel", "cpu")
    src = args.pointer("src", np.arange(src_elements, dtype=np.float32))
    dst = args.output("dst", N, np.float32)
    call = launch.Call("kernel", kernel, (1,), (src, dst) + tuple(scalars), dict(BLOCK=N), num_warps=4)
    (raw,) = traffic.capture(launch.Launch("test.kernel", None, args, [call]))
    (result,) = count([raw], "h200").launches
    sites = {(s["op"], s["target"]): s for s in result.sites}
    return result.metrics, sites, layouts.memory_ops(census.compile_call(call, "sm_90")["ttgir"])


def _layouts(ops, kind):
    return [op.layout.size_per_thread for ops_at in ops.values() for op in ops_at if op.kind == kind]


def test_coalesced_copy_is_16_sectors_per_request():
    metrics, sites, ops = _count(copy_kernel, N, (N,))
    assert _layouts(ops, "tt.load") == [(4,)] and _layouts(ops, "tt.store") == [(4,)]
    load, store = sites["load", "src"], sites["store", "dst"]
    assert (load["requests"], load["sectors"], load["lanes_per_request"]) == (8, 128, 32)
    assert (store["requests"], store["sectors"]) == (8, 128)
    assert metrics[M.GLOBAL_LOAD_SECTORS] == N * 4 // 32


def test_masked_tail_drops_the_lanes_past_n():
    metrics, sites, _ = _count(copy_kernel, N, (1000,))
    load = sites["load", "src"]
    # 1000 floats = 4000 B = 125 sectors; the last request (elements 896..1023 of warp 3) keeps 26 lanes
    assert (load["requests"], load["sectors"]) == (8, 125)
    assert load["lanes_per_request"] == pytest.approx((7 * 32 + 26) / 8)


def test_stride_of_eight_floats_is_one_sector_per_lane():
    _, sites, _ = _count(strided_kernel, 8 * N)
    load = sites["load", "src"]
    assert (load["requests"], load["sectors_per_request"]) == (32, 32.0)


def test_broadcast_is_one_sector_per_request():
    _, sites, _ = _count(broadcast_kernel, 1)
    load = sites["load", "src"]
    assert load["sectors_per_request"] == 1.0 and load["lanes_per_request"] == 32


def test_split_reads_each_kv_head_once_and_its_dram_is_near_ideal():
    from sandbox.analysis.traffic.variant import summary, traffic as variant_traffic

    problem = DecodeProblem.random(4, num_seqs=2, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16,
                                   max_context_len=160, dtype="float16", nan_fill=False)
    result = variant_traffic("triton.split", problem)
    columns = summary(result)
    assert 15.5 <= columns["kv_sectors_per_request"] <= 16.0  # whole 16-byte runs; the last tiles are partial
    assert 0.95 <= columns["bytes_over_ideal"] <= 1.1, columns


@pytest.mark.parametrize("name", ["triton.naive", "triton.unified"])
def test_every_access_of_an_option_kernel_finds_its_ttgir_operation(name):
    """Option kernels add loads (slopes, sinks, per-token scales): each is mapped to its compiled operation."""
    from sandbox.analysis.traffic.variant import traffic as variant_traffic

    query_lens = 3 if name == "triton.unified" else None
    problem = DecodeProblem.random(8, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=8,
                                   max_context_len=24, dtype="float16", kv_dtype="float8_e5m2", query_lens=query_lens,
                                   alibi_slopes="random", sinks="random", per_token_scales=True, return_lse=True)
    result = variant_traffic(name, problem, census=False)
    targets = {s["target"] for k in result["kernels"] for s in k["sites"]}
    assert {"alibi_slopes", "sinks", "k_scales", "v_scales", "key_cache", "value_cache", "lse", "out"} <= targets


def test_the_models_loads_in_flight_are_read_from_the_triton_sass():
    """Each Triton kernel of a call (split's partition and reduce) carries the loads in flight read from the SASS of
    the very cubin Triton compiled for the device's architecture, as a CUDA C kernel's are (issue #33 item 5):
    the model's and the sweep's source is "sass", and the reading is the one sandbox.analysis.loads_in_flight
    gives for that cubin. Without a census nothing is read, and the model says what it assumed."""
    from sandbox.analysis import loads_in_flight, sass
    from sandbox.analysis.traffic.variant import summary, traffic as variant_traffic
    from sandbox.variant import registry

    problem = DecodeProblem.random(4, num_seqs=2, num_heads=8, num_kv_heads=2, head_dim=64, block_size=16,
                                   max_context_len=160, dtype="float16", nan_fill=False)
    for device, arch in (("h200", "sm_90"), ("a100", "sm_80")):
        result = variant_traffic("triton.split", problem, device)
        kernels, modelled = result["kernels"], result["model"]["kernels"]
        assert len(kernels) == 2 and [k["loads_in_flight_source"] for k in modelled] == ["sass", "sass"], modelled
        assert all(k["loads_in_flight_detail"].startswith(f"{arch}: ") for k in kernels)
        assert all("image" not in k for k in kernels)  # the cubin is read, not reported
        assert summary(result)["model_loads_source"] == "sass"
        prepared = registry.get("triton.split").prepare(problem, "cpu")
        for kernel, call in zip(kernels, prepared.calls):
            cubin, function = census.compile_call(call, arch)["image"]
            reading = loads_in_flight.read(sass.function_sass(cubin, function))
            assert (kernel["loads_in_flight"], kernel["loads_per_wait"]) == (reading.loads_in_flight,
                                                                            round(reading.per_wait, 3))
    assumed = variant_traffic("triton.split", problem, census=False)["model"]["kernels"]
    assert all(k["loads_in_flight_source"].startswith("assumed") for k in assumed)
