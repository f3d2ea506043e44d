"""The CPU executor's traffic mode on hand-made kernels whose counts are known by construction.

One kernel (one traffic build) holds every pattern, chosen by its first argument, each marked `// @tag`
(L: tag -> line); each test launches one pattern and derives the expected requests, sectors, wavefronts and DRAM bytes from the launch geometry.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from sandbox.cpucuda import CpuRawKernel, last_traffic, last_traffic_raw, modes, traffic_capture
from sandbox.analysis import traffic as T

CODE = r"""
__device__ __noinline__ float fetch(const float* p, int i) {
    return p[i];                                                   // @fetch: reached through a call
}

extern "C" __global__ void handmade(int pattern, float* out, const float* in, float4* out4, const float4* in4,
                                    unsigned* counter, int n) {
    __shared__ float tile[1024];
    __shared__ float4 tile4[128];
    __shared__ unsigned hits[4];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    switch (pattern) {
    case 0: out4[i] = in4[i]; break;                               // @copy4: coalesced vector copy
    case 1: out[i] = in[i * 32]; break;                            // @strided: strided load
    case 2: out[i] = in[i + 1]; break;                             // @misaligned: misaligned by one float
    case 3: out[i] = in[0]; break;                                 // @broadcast: broadcast
    case 4:
        tile[t] = (float)t;                                        // @store1: 1 wavefront per warp
        __syncthreads();
        out[i] = tile[(2 * t) & 1023]                              // @conflict2: 2-way conflict
               + tile[(32 * t) & 1023];                            // @conflict32: 32-way conflict
        break;
    case 5:
        tile4[t] = in4[i];                                         // @store4: vector store to shared
        __syncthreads();
        out4[i] = tile4[t ^ 1];                                    // @load4: vector load from shared
        break;
    case 6: out[i] = in[t]; break;                                 // @reuse: every block reads the same bytes
    case 7:
        if (t < 4) hits[t] = 0;
        __syncthreads();
        atomicAdd(&counter[t % 4], 1u);                            // @atomic: global atomic
        atomicAdd(&hits[t % 4], 1u);                               // @shared_atomic: shared atomic
        break;
    case 8:
#ifdef CPUCUDA_TRAFFIC
        if (t % 32 == 0) cpucuda_traffic_mma(16, 16, 16);          // @mma: what wmma's mma_sync will call
#endif
        break;
    case 9: memcpy(out + 4 * i, in + 4 * i, n); break;              // @memcpy: libc, invisible
    case 10: out[i] = fetch(in, i); break;                         // @call
    case 11:
        for (int k = 0; k < 4; ++k) out[i + k * n] = in[i + k * n]; // @loop: 4 requests per warp
        break;
    }
}
"""

# source line of each `// @tag` comment
L = {m.group(1): CODE.count("\n", 0, m.start()) + 1 for m in re.finditer(r"// @(\w+)", CODE)}
LD_REQ, LD_SEC = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
ST_REQ, ST_SEC = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
SH = {op: (f"smsp__inst_executed_op_shared_{op}.sum", f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum",
           f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum") for op in ("ld", "st", "atom")}


@pytest.fixture(scope="module")
def kernel():
    return CpuRawKernel(CODE, "handmade", traffic=True)


def run(kernel, pattern, blocks=2, threads=128, n=0, size=1 << 16):
    """Launch a float pattern: returns (Traffic, site rows by line, out, in)."""
    out = np.zeros(size, np.float32)
    src = np.arange(size, dtype=np.float32)
    spare = np.zeros((1, 4), np.float32)
    kernel((blocks,), (threads,), (np.int32(pattern), out, src, spare, spare, np.zeros(4, np.uint32), np.int32(n)))
    result = last_traffic()
    return result, {(s["line"], s["op"]): s for s in result.sites}, out, src


def launch4(kernel, pattern, blocks=2, threads=128):
    """Launch a float4 pattern: returns (Traffic, site rows by line, out4, in4)."""
    out = np.zeros((1 << 14, 4), np.float32)
    src = np.arange(out.size, dtype=np.float32).reshape(-1, 4)
    spare = np.zeros(1, np.float32)
    kernel((blocks,), (threads,), (np.int32(pattern), spare, spare, out, src, np.zeros(4, np.uint32), np.int32(0)))
    result = last_traffic()
    return result, {(s["line"], s["op"]): s for s in result.sites}, out, src


def test_coalesced_vector_copy_and_partial_warps(kernel):
    result, sites, out, src = launch4(kernel, 0, blocks=3, threads=40)   # warps of 32 + 8 lanes
    assert (out[:120] == src[:120]).all()
    m = result.metrics
    requests = 3 * 2
    sectors = 3 * (32 * 16 // 32 + 8 * 16 // 32)
    assert (m[LD_REQ], m[LD_SEC], m[ST_REQ], m[ST_SEC]) == (requests, sectors, requests, sectors)
    for op, target in (("load", "in4"), ("store", "out4")):
        site = sites[L["copy4"], op]
        assert site["lanes_per_request"] == 20 and site["bytes_per_request"] == 320 and site["target"] == target
    assert m["dram__bytes_read.sum"] == m["dram__bytes_write.sum"] == 3 * 40 * 16


@pytest.mark.parametrize("pattern, tag, sectors_per_request", [(1, "strided", 32), (2, "misaligned", 5), (3, "broadcast", 1)])
def test_strided_misaligned_and_broadcast_loads(kernel, pattern, tag, sectors_per_request):
    result, sites, out, src = run(kernel, pattern)
    load = sites[L[tag], "load"]
    assert load["target"] == "in" and load["sectors_per_request"] == sectors_per_request and load["requests"] == 8
    assert result.metrics[ST_SEC] == 8 * 4   # the stores stay coalesced: 128 bytes per warp


def test_shared_bank_conflicts_one_two_and_thirty_two_way(kernel):
    result, sites, *_ = run(kernel, 4)
    store, two, thirty_two = sites[L["store1"], "store"], sites[L["conflict2"], "load"], sites[L["conflict32"], "load"]
    assert store["space"] == "shared" and store["target"] == "tile"
    assert store["wavefronts_per_request"] == 1 and store["bank_conflicts"] == 0
    assert two["wavefronts_per_request"] == 2 and two["bank_conflicts"] == 8
    assert thirty_two["wavefronts_per_request"] == 32 and thirty_two["bank_conflicts"] == 8 * 31
    ld, waves, conflicts = SH["ld"]
    assert result.metrics[ld] == 16 and result.metrics[waves] == 8 * (2 + 32)
    assert result.metrics[conflicts] == 8 * (1 + 31) and result.metrics[SH["st"][2]] == 0


def test_vector_shared_accesses_take_their_ideal_wavefronts(kernel):
    result, sites, out, src = launch4(kernel, 5)
    assert (out[:256] == src[np.arange(256) ^ 1]).all()
    for key in ((L["store4"], "store"), (L["load4"], "load")):
        assert sites[key]["space"] == "shared" and sites[key]["target"] == "tile4"
        assert sites[key]["wavefronts_per_request"] == 4 == sites[key]["ideal_wavefronts_per_request"]
    assert result.metrics[SH["st"][2]] == result.metrics[SH["ld"][2]] == 0


def test_l2_reuse_across_blocks(kernel):
    result, sites, *_ = run(kernel, 6, blocks=16)
    assert result.metrics[LD_SEC] == 16 * 4 * 4 == result.metrics["lts__t_sectors_op_read.sum"]
    assert result.metrics["dram__bytes_read.sum"] == 128 * 4   # the 512 bytes come from DRAM once
    per_block = [b["dram__bytes_read.sum"] for b in result.blocks]
    assert per_block[0] == 512 and sum(per_block[1:]) == 0


def test_atomics_global_and_shared(kernel):
    counter = np.zeros(4, np.uint32)
    kernel((2,), (64,), (np.int32(7), np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros((1, 4), np.float32),
                         np.zeros((1, 4), np.float32), counter, np.int32(0)))
    assert (counter == 32).all()
    result = last_traffic()
    sites = {(s["line"], s["op"]): s for s in result.sites}
    m = result.metrics
    atomic, shared = sites[L["atomic"], "atomic"], sites[L["shared_atomic"], "atomic"]
    assert atomic["space"] == "global" and atomic["target"] == "counter" and atomic["sectors_per_request"] == 1
    assert m["l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum"] == 4
    assert m["lts__t_sectors_op_atom.sum"] == 4 and m["dram__bytes_write.sum"] == 32
    assert shared["space"] == "shared" and shared["target"] == "hits" and m[SH["atom"][0]] == 4
    assert m[LD_REQ] == 0  # an atomic is not a load plus a store


def test_tensor_core_hook_counts_warp_level_mmas(kernel):
    result, *_ = run(kernel, 8, blocks=3, threads=96)
    assert result.metrics["smsp__inst_executed_pipe_tensor.sum"] == 3 * 3 * 2   # 16x16x16 = 2 x m16n8k16
    assert result.metrics["sandbox__tensor_flops.sum"] == 3 * 3 * 2 * 16 ** 3
    assert [b["smsp__inst_executed_pipe_tensor.sum"] for b in result.blocks] == [6, 6, 6]


def test_libc_memcpy_is_reported_not_dropped(kernel):
    result, sites, out, src = run(kernel, 9, n=16)
    assert (out[:1024] == src[:1024]).all()
    (note,) = result.notes
    assert f"libc memcpy at <code>:{L['memcpy']}" in note and "4096 bytes" in note and "not in these counts" in note


def test_sites_name_the_call_chain_and_requests_follow_execution_counts(kernel):
    result, sites, *_ = run(kernel, 10)
    assert sites[L["fetch"], "load"]["chain"] == [f"<code>:{L['call']}"] and sites[L["fetch"], "load"]["requests"] == 8
    result, sites, *_ = run(kernel, 11, n=256)
    assert sites[L["loop"], "load"]["requests"] == 2 * 4 * 4 and sites[L["loop"], "load"]["sectors_per_request"] == 4


def test_blocks_are_in_launch_order_and_sum_to_the_totals(kernel):
    result, *_ = run(kernel, 1, blocks=5)
    assert len(result.blocks) == 5
    assert {k: sum(b[k] for b in result.blocks) for k in T.METRICS} == result.metrics
    raw = last_traffic_raw()
    assert raw.grid == (5, 1, 1) and raw.block == (128, 1, 1)
    assert list(np.unique(raw.sectors["block"])) == [0, 1, 2, 3, 4]


def test_capture_keeps_an_array_at_one_address_across_launches():
    code = r"""
    extern "C" __global__ void produce(float* buf) { buf[threadIdx.x] = 1.0f; }
    extern "C" __global__ void consume(const float* buf, float* out) { out[threadIdx.x] = buf[threadIdx.x] * 2; }
    """
    from sandbox.cpucuda import CpuRawModule
    mod = CpuRawModule(code=code)
    buf, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with modes(traffic=True), traffic_capture() as launches:
        mod.get_function("produce")((1,), (64,), (buf,))
        mod.get_function("consume")((1,), (64,), (buf, out))
    assert (out == 2).all() and [r.kernel for r in launches] == ["produce", "consume"]
    produce, consume = T.count(launches).launches
    assert consume.metrics["dram__bytes_read.sum"] == 0            # the buffer is still in L2
    assert produce.metrics["dram__bytes_write.sum"] == consume.metrics["dram__bytes_write.sum"] == 256


def test_traffic_refuses_to_share_a_launch_with_a_sanitizer():
    for extra in ({"asan": True}, {"racecheck": True}):
        k = CpuRawKernel("extern \"C\" __global__ void k(float* x) { x[0] = 1; }", "k", traffic=True, **extra)
        with pytest.raises(ValueError, match="traffic mode cannot share a launch with "
                                             f"{'asan' if 'asan' in extra else 'racecheck'}"):
            k((1,), (1,), (np.zeros(1, np.float32),))


def test_parameter_names_come_from_the_signature_or_not_at_all():
    """Sites and arrays are named after the kernel's parameters; a parameter list written by a macro (the
    negative controls' WRONG_V1_PARAMS) cannot be read without the preprocessor, so its arrays are
    "argument i" rather than misnamed."""
    from sandbox.cpucuda.traffic import param_names

    code = """
    template <int B> __global__ void __launch_bounds__(128) k(float* __restrict__ out, const int* table, int n) {}
    #define PARAMS(w) float* out, int w
    __global__ void m(PARAMS(width)) {}
    """
    assert param_names(code, "k<16>") == ["out", "table", "n"]
    assert param_names(code, "m") == []
    assert param_names(code, "absent") == []
