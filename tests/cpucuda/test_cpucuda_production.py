"""The executor features production headers (FlashInfer's decode, CCCL) need, each on a hand-made kernel:
CUDA's version macros and host runtime API, the shared-memory window, cp.async with its wait_group ordering
(normal, racecheck and traffic modes), .approx math against the exact function rounded once, setp and @p guards,
shl/shr/bfind, trap, prefetch, the template keyword g++ needs, same-value races as findings, and CCCL from the
FlashInfer wheel (when installed)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from sandbox.cpucuda import CpuKernelError, CpuKernelRaceError, CpuRawKernel, CpuRawModule, last_traffic, racecheck
from sandbox.cpucuda import template_keyword

CODE = r"""
#include <cuda_runtime.h>
#include <driver_types.h>
#include <cuda_device_runtime_api.h>
#include <cuda_fp16.h>

// Host code a library header carries beside its kernels: it must compile (never runs here).
inline cudaError_t host_side_launch(void* kernel) {
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return cudaErrorUnknown;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config;
    config.attrs = attribute;
    config.numAttrs = 1;
    int cluster = 0;
    cudaOccupancyMaxPotentialClusterSize(&cluster, kernel, &config);
    return cudaLaunchKernel(kernel, dim3(1), dim3(1), nullptr, 0, (cudaStream_t)0);
}

extern "C" __global__ void versions(int* out) {
    out[0] = __CUDACC_VER_MAJOR__;
    out[1] = __CUDACC_VER_MINOR__;
    out[2] = CUDA_VERSION;
    out[3] = CUDART_VERSION;
    int dev = -1;
    out[4] = (int)cudaGetDevice(&dev) + 10 * dev;
    out[5] = (int)__byte_perm(0x33221100u, 0x77665544u, 0x5140u);
    nv_half h = __float2half(1.5f);
    out[6] = (int)(__half2float(h) * 2.f);
}

// op 0..4: ex2, lg2, rcp, rsqrt, tanh (.approx.f32, with .ftz for the first four)
extern "C" __global__ void approx_f32(float* out, const float* in, int op, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float y, x = in[i];
    switch (op) {
    case 0: asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    case 1: asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    case 2: asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    case 3: asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    default: asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); break;
    }
    out[i] = y;
}

// ex2/tanh on f16 and on both halves of f16x2
extern "C" __global__ void approx_f16(unsigned short* out, const unsigned short* in, int op, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 >= n) return;
    unsigned short a = in[2 * i], b;
    unsigned pair = in[2 * i] | ((unsigned)in[2 * i + 1] << 16), pair_out;
    if (op == 0) {
        asm("ex2.approx.f16 %0, %1;" : "=h"(b) : "h"(a));
        asm("ex2.approx.f16x2 %0, %1;" : "=r"(pair_out) : "r"(pair));
    } else {
        asm("tanh.approx.f16 %0, %1;" : "=h"(b) : "h"(a));
        asm("tanh.approx.f16x2 %0, %1;" : "=r"(pair_out) : "r"(pair));
    }
    out[3 * i] = b;
    out[3 * i + 1] = (unsigned short)(pair_out & 0xffffu);
    out[3 * i + 2] = (unsigned short)(pair_out >> 16);
}

// setp + @p, shl/shr past the width, bfind
extern "C" __global__ void bits(unsigned* out, unsigned a, unsigned n) {
    unsigned r = 0;
    asm("{\n .reg .pred p;\n setp.lt.u32 p, %1, 10;\n @p mov.u32 %0, 1;\n @!p mov.u32 %0, 2;\n}" : "+r"(r) : "r"(a));
    out[0] = r;
    asm("shl.b32 %0, %1, %2;" : "=r"(out[1]) : "r"(a), "r"(n));
    asm("shr.u32 %0, %1, %2;" : "=r"(out[2]) : "r"(a), "r"(n));
    int s = -(int)a;
    asm("shr.s32 %0, %1, %2;" : "=r"(out[3]) : "r"(s), "r"(n));
    asm("bfind.u32 %0, %1;" : "=r"(out[4]) : "r"(a));
    asm("bfind.shiftamt.u32 %0, %1;" : "=r"(out[5]) : "r"(a));
    asm volatile("prefetch.global.L2 [%0];" :: "l"(out));
    float f = 0.f / 0.f;
    unsigned is_nan = 0;
    asm("{\n .reg .pred q;\n setp.nan.f32 q, %1, %1;\n selp.u32 %0, 1, 0, q;\n}" : "=r"(is_nan) : "f"(f));
    out[6] = is_nan;
}

extern "C" __global__ void traps(int* out, int go) {
    out[0] = 1;
    if (go) asm volatile("trap;");
}

// Each thread copies its 16 bytes into shared memory with cp.async and reads its neighbour's.
// wait: 1 waits (wait_group 0) before the barrier; 0 reads first (the copy has not landed), then waits.
// fill: src-size 0 from a null source (nothing read, zeros written); pred: the ignore-src form.
extern "C" __global__ void async_copy(float4* out, const float4* in, int wait, int fill, int pred) {
    extern __shared__ float4 tile[];
    const int t = threadIdx.x, n = blockDim.x;
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(tile + t);
    const float4* src = fill ? nullptr : in + blockIdx.x * n + t;
    const int src_size = fill ? 0 : 16;
    if (pred) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n cp.async.ca.shared.global [%1], [%2], 16, p;\n}"
                     :: "r"(fill), "r"(dst), "l"(src));
    } else {
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_size));
    }
    asm volatile("cp.async.commit_group;");
    if (wait) asm volatile("cp.async.wait_group %0;" :: "n"(0));
    __syncthreads();
    out[blockIdx.x * n + t] = tile[(t + 1) % n];
    if (!wait) asm volatile("cp.async.wait_all;");
}

// Two groups in flight: wait_group 1 completes the older one only.
extern "C" __global__ void async_groups(float* out, const float4* in) {
    __shared__ float4 a, b;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"((uint32_t)__cvta_generic_to_shared(&a)), "l"(in));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"((uint32_t)__cvta_generic_to_shared(&b)), "l"(in + 1));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 1;");
    out[0] = a.x;
    out[1] = b.x;  // not waited for: still what the block found there
    asm volatile("cp.async.wait_group 0;");
    out[2] = b.x;
}

// ld/st.shared through window addresses; `off` past the array's end is a shared out-of-bounds access.
extern "C" __global__ void window(unsigned* out, unsigned off) {
    __shared__ unsigned words[8];
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(words);
    asm volatile("st.shared.u32 [%0], %1;" :: "r"(base + 4 * threadIdx.x), "r"(threadIdx.x * 3u));
    __syncthreads();
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(base + off + 4 * (7 - threadIdx.x)));
    out[threadIdx.x] = v;
    out[8 + threadIdx.x] = (unsigned)__isShared(words) + 2u * (unsigned)__isGlobal(out);
}

// Every thread writes one value to out[0]: the same value (same=1) or its own.
extern "C" __global__ void one_slot(float* out, int same) {
    out[0] = same ? 2.5f : (float)threadIdx.x;
}
"""

KERNELS = ["versions", "approx_f32", "approx_f16", "bits", "traps", "async_copy", "async_groups", "window", "one_slot"]


@pytest.fixture(scope="module")
def mod():
    return CpuRawModule(code=CODE, name_expressions=KERNELS)


def test_cuda_version_macros_host_api_and_device_names(mod):
    out = np.zeros(8, np.int32)
    mod.get_function("versions")(1, 1, (out,))
    assert out[:4].tolist() == [13, 5, 13050, 13050]
    assert out[4] == 0                               # cudaGetDevice: success, device 0
    assert out[5] == 0x55114400                      # __byte_perm: bytes 0, 4, 1, 5 of {y, x}
    assert out[6] == 3


def _rounded(values: np.ndarray, dtype) -> np.ndarray:
    return values.astype(dtype)  # float64 -> dtype rounds once, to nearest even


@pytest.mark.parametrize("op, fn, lo, hi", [(0, np.exp2, -20, 20), (1, np.log2, 1e-3, 1e3),
                                            (2, lambda x: 1 / x, 0.01, 50), (3, lambda x: 1 / np.sqrt(x), 1e-3, 1e3),
                                            (4, np.tanh, -6, 6)])
def test_approx_f32_is_the_exact_function_rounded_once(mod, op, fn, lo, hi):
    rng = np.random.default_rng(op)
    x = rng.uniform(lo, hi, 256).astype(np.float32)
    out = np.zeros_like(x)
    mod.get_function("approx_f32")(2, 128, (out, x, np.int32(op), np.int32(x.size)))
    np.testing.assert_array_equal(out, _rounded(fn(x.astype(np.float64)), np.float32))



@pytest.mark.parametrize("op, fn", [(0, np.exp2), (1, np.tanh)])
def test_approx_f16_and_f16x2_round_each_half_once(mod, op, fn):
    rng = np.random.default_rng(10 + op)
    x = rng.uniform(-8, 8, 128).astype(np.float16)
    out = np.zeros(3 * 64, np.uint16)
    mod.get_function("approx_f16")(1, 64, (out, x.view(np.uint16), np.int32(op), np.int32(x.size)))
    want = _rounded(fn(x.astype(np.float64)), np.float16).view(np.uint16)
    got = out.reshape(64, 3)
    np.testing.assert_array_equal(got[:, 0], want[0::2])
    np.testing.assert_array_equal(got[:, 1], want[0::2])
    np.testing.assert_array_equal(got[:, 2], want[1::2])


@pytest.mark.parametrize("a, n", [(5, 3), (40, 33), (0x80000000, 31)])
def test_setp_guards_shifts_and_bfind(mod, a, n):
    out = np.zeros(8, np.uint32)
    mod.get_function("bits")(1, 1, (out, np.uint32(a), np.uint32(n)))
    mask = 0xFFFFFFFF
    signed = np.uint32((-a) & mask).view(np.int32)   # -(int)a
    want_shr_s = (int(signed) >> min(n, 31)) & mask
    want = [1 if a < 10 else 2, (a << n) & mask if n < 32 else 0, a >> n if n < 32 else 0, want_shr_s,
            a.bit_length() - 1, 32 - a.bit_length(), 1]
    assert out[:7].tolist() == want


def test_trap_stops_the_launch_naming_the_line(mod):
    out = np.zeros(1, np.int32)
    k = mod.get_function("traps")
    k(1, 4, (out, np.int32(0)))
    assert out[0] == 1
    with pytest.raises(CpuKernelError, match=r"__trap\(\) at \S+\.cu:\d+ in thread"):
        k(1, 4, (out, np.int32(1)))


def _async(mod, wait, fill=0, pred=0, blocks=2, threads=64, **modes):
    k = CpuRawKernel(CODE, "async_copy", **modes) if modes else mod.get_function("async_copy")
    x = np.arange(blocks * threads * 4, dtype=np.float32).reshape(-1, 4)
    out = np.zeros_like(x)
    k(blocks, threads, (out, x, np.int32(wait), np.int32(fill), np.int32(pred)), shared_mem=16 * threads)
    return out, x


def test_cp_async_lands_at_wait_group(mod):
    out, x = _async(mod, wait=1)
    want = x.reshape(2, 64, 4)[:, (np.arange(64) + 1) % 64].reshape(-1, 4)
    np.testing.assert_array_equal(out, want)
    out, _ = _async(mod, wait=0)  # read before the wait: the poison, not the data (the last thread of a block
    assert np.isnan(out.reshape(2, 64, 4)[:, :63]).all()  # reads thread 0's copy, landed at thread 0's wait)


@pytest.mark.parametrize("pred", [0, 1])
def test_cp_async_zero_fill_reads_nothing(mod, pred):
    out, _ = _async(mod, wait=1, fill=1, pred=pred)  # a null source: any read would crash
    assert (out == 0).all()


def test_cp_async_wait_group_keeps_the_newest_groups(mod):
    src = np.array([[1, 0, 0, 0], [2, 0, 0, 0]], np.float32)
    out = np.zeros(3, np.float32)
    mod.get_function("async_groups")(1, 1, (out, src), poison="finite")
    assert out[0] == 1 and out[2] == 2 and out[1] != 2


def test_racecheck_flags_a_read_before_the_matching_wait():
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write|write-after-read"):
        _async(None, wait=0, racecheck=True)
    _async(None, wait=1, racecheck=True)           # waited, then the barrier: clean


def test_traffic_counts_cp_async_as_a_global_load_and_a_shared_store():
    out, x = _async(None, wait=1, blocks=2, threads=64, traffic=True)
    m = last_traffic().metrics
    warps = 2 * 64 // 32
    assert m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == warps
    assert m["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == warps * 32 * 16 // 32
    assert m["smsp__inst_executed_op_shared_st.sum"] == warps
    assert m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"] == warps * 4   # 512 bytes: 4 wavefronts


def test_shared_window_addresses_round_trip_and_are_bounds_checked(mod):
    out = np.zeros(16, np.uint32)
    k = mod.get_function("window")
    k(1, 8, (out, np.uint32(0)))
    assert out[:8].tolist() == [3 * (7 - t) for t in range(8)]
    assert out[8:].tolist() == [3] * 8            # __isShared(words), __isGlobal(out)
    with pytest.raises(CpuKernelError, match=r"ld\.shared\.u32 at \S+\.cu:\d+ .*outside every shared region"):
        k(1, 8, (out, np.uint32(4)))


def test_same_value_write_races_are_findings_not_failures():
    k = CpuRawKernel(CODE, "one_slot", racecheck=True)
    out = np.zeros(1, np.float32)
    k(1, 64, (out, np.int32(1)))
    (finding,) = racecheck.last_findings()
    assert "same-value race (write-after-write of identical bytes" in finding and "argument 0" in finding
    with pytest.raises(CpuKernelRaceError, match=r"data race \(write-after-write\) on argument 0"):
        k(1, 64, (out, np.int32(0)))


def test_template_keyword_is_inserted_for_member_template_calls_only(tmp_path):
    src = ("template <int N> struct cast { template <int M> static int go(int x) { return x * N + M; } };\n"
           "template <int N, int M> __device__ int call(int x) { return cast<N>::go<M>(x); }\n"
           "__device__ bool cmp(int a, int b) { return a < b && b > (a); }\n")
    assert template_keyword.insert(src).count("::template go<M>(x)") == 1
    assert "template" not in template_keyword.insert(src).splitlines()[2]
    (tmp_path / "dep.cuh").write_text(src)
    code = ('#include "dep.cuh"\nextern "C" __global__ void k(int* out) { out[0] = call<3, 4>(5); '
            'out[1] = cast<2>::go<1>(1); }\n')
    out = np.zeros(2, np.int32)
    CpuRawKernel(code, "k", options=(f"-I{tmp_path}",))(1, 1, (out,))
    assert out.tolist() == [19, 3]


def _wheel_cccl() -> Path | None:
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "data" / "cccl" / "libcudacxx" / "include"
    return path if path.is_dir() else None


@pytest.mark.skipif(_wheel_cccl() is None, reason="the flashinfer-python wheel (and its CCCL) is not installed")
def test_libcudacxx_from_the_flashinfer_wheel_compiles_and_runs():
    code = ("#include <cuda/std/limits>\n#include <cuda/cmath>\n"
            'extern "C" __global__ void k(unsigned* out, unsigned d) {\n'
            "    cuda::fast_mod_div<unsigned> div(d);\n"
            "    out[threadIdx.x] = (threadIdx.x * 977u) / div;\n"
            "    out[64 + threadIdx.x] = cuda::std::numeric_limits<float>::infinity() > 1e38f;\n}\n")
    out = np.zeros(128, np.uint32)
    CpuRawKernel(code, "k", options=(f"-I{_wheel_cccl()}",))(1, 64, (out, np.uint32(7)))
    assert out[:64].tolist() == [t * 977 // 7 for t in range(64)] and (out[64:] == 1).all()
