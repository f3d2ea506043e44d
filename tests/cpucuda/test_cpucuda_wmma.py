"""Tensor cores on the CPU executor: <mma.h> with nvcuda::wmma (include/mma.h). A tiled GEMM in __half and
__nv_bfloat16 at m16n16k16, m32n8k16 and m8n32k16 with float accumulators (and __half accumulators), checked bit for
bit against NumPy doing the documented arithmetic (exact products, float sums in k order); the warp-collective rules
(every lane, the same pointer, an aligned pointer) reported with the line; the same kernels compiled by NVRTC for
sm_80 and sm_90 (crt/mma.h from nvidia-cuda-crt), whose SASS holds tensor-core instructions."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from sandbox.cpucuda import CpuKernelError, CpuRawModule

GEMM = r"""
#include <mma.h>
using namespace nvcuda;
template <class L> struct is_row { static constexpr bool value = false; };  // NVRTC has no <type_traits>
template <> struct is_row<wmma::row_major> { static constexpr bool value = true; };

// D = 2 (C + A B) for A [rows x depth], B [depth x cols], C and D [rows x cols]; each warp one M x N tile.
// A in row-major or column-major memory as LA says (ldm: depth or rows), B likewise (cols or depth), C and D
// in MEM order.
template <int M, int N, int K, typename T, typename TC, typename LA, typename LB, int MEM>
__global__ void gemm(const T* a, const T* b, const TC* c, TC* d, int rows, int cols, int depth) {
    const int tr = blockIdx.y, tc = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const wmma::layout_t mem = MEM ? wmma::mem_col_major : wmma::mem_row_major;
    const int ldc = MEM ? rows : cols;
    const int tile = MEM ? tc * N * rows + tr * M : tr * M * cols + tc * N;
    wmma::fragment<wmma::matrix_a, M, N, K, T, LA> fa;
    wmma::fragment<wmma::matrix_b, M, N, K, T, LB> fb;
    wmma::fragment<wmma::accumulator, M, N, K, TC> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(acc, c + tile, ldc, mem);
    for (int k = 0; k < depth; k += K) {
        const bool a_row = is_row<LA>::value, b_row = is_row<LB>::value;
        wmma::load_matrix_sync(fa, a + (a_row ? tr * M * depth + k : k * rows + tr * M), a_row ? depth : rows);
        wmma::load_matrix_sync(fb, b + (b_row ? k * cols + tc * N : tc * N * depth + k), b_row ? cols : depth);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    for (int e = 0; e < acc.num_elements; ++e) acc.x[e] = acc.x[e] + acc.x[e];
    wmma::store_matrix_sync(d + tile, acc, ldc, mem);
}

// Misuse: lanes that pass different pointers; half a warp that never arrives; a misaligned pointer; an ldm of
// 24 bytes; a correct load (in a partial warp).
extern "C" __global__ void misuse(const __half* a, int how) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    if (how == 0) wmma::load_matrix_sync(fa, a + (threadIdx.x % 2) * 256, 16);
    if (how == 1 && threadIdx.x < 16) wmma::load_matrix_sync(fa, a, 16);
    if (how == 2) wmma::load_matrix_sync(fa, a + 8, 16);
    if (how == 3) wmma::load_matrix_sync(fa, a, 12);
    if (how == 4) wmma::load_matrix_sync(fa, a, 16);
}
"""

SHAPES = [(16, 16, 16), (32, 8, 16), (8, 32, 16)]
# (input type, accumulator type, A layout, B layout, C/D memory order: 0 row-major, 1 column-major)
CASES = [("__half", "float", "row_major", "col_major", 0), ("__nv_bfloat16", "float", "col_major", "row_major", 1),
         ("__half", "__half", "row_major", "row_major", 0)]
NUMPY = {"__half": np.float16, "__nv_bfloat16": ml_dtypes.bfloat16, "float": np.float32}


def _layouts(shape, case):
    """The case's layouts, except where CUDA's 256-bit alignment of every tile's pointer forbids them: an 8-wide
    dimension keeps its tiles 32 bytes apart only along the other one."""
    m, n, _ = shape
    _, _, la, lb, mem = case
    if n == 8:
        return la, "col_major", 1
    if m == 8:
        return "row_major", lb, 0
    return la, lb, mem


def _name(shape, case) -> str:
    m, n, k = shape
    t, tc = case[:2]
    la, lb, mem = _layouts(shape, case)
    return f"gemm<{m}, {n}, {k}, {t}, {tc}, wmma::{la}, wmma::{lb}, {mem}>"


@pytest.fixture(scope="module")
def module():
    return CpuRawModule(code=GEMM, options=("-std=c++17",),
                        name_expressions=[_name(s, c) for s in SHAPES for c in CASES])


def _reference(a, b, c, k_step, acc_type):
    """The documented arithmetic: per mma_sync, C widened to float, k = 0..K-1 products (exact) added in order with
    one float rounding each, the result rounded to the accumulator type."""
    af, bf = a.astype(np.float32), b.astype(np.float32)
    acc = c.copy()
    for k0 in range(0, a.shape[1], k_step):
        s = acc.astype(np.float32)
        for k in range(k0, k0 + k_step):
            s = (s + af[:, k:k + 1] * bf[k:k + 1, :]).astype(np.float32)
        acc = s.astype(acc_type)
    return (acc + acc).astype(acc_type)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"m{m}n{n}k{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("case", CASES, ids=["half-float", "bf16-float", "half-half"])
def test_wmma_gemm_matches_numpy_bit_for_bit(module, shape, case):
    m, n, k = shape
    t, tc = case[:2]
    la, lb, mem = _layouts(shape, case)
    rows, cols, depth = 2 * m, 4 * n, 3 * k
    rng = np.random.default_rng(m * 100 + n + len(t))
    a = rng.uniform(-1, 1, (rows, depth)).astype(NUMPY[t])
    b = rng.uniform(-1, 1, (depth, cols)).astype(NUMPY[t])
    c = rng.uniform(-1, 1, (rows, cols)).astype(NUMPY[tc])
    expected = _reference(a, b, c, k, NUMPY[tc])
    a_mem = a if la == "row_major" else np.ascontiguousarray(a.T)
    b_mem = b if lb == "row_major" else np.ascontiguousarray(b.T)
    c_mem = c if mem == 0 else np.ascontiguousarray(c.T)
    d = np.zeros_like(c_mem)
    module.get_function(_name(shape, case))((cols // n // 2, rows // m), (64,),
                                           (a_mem, b_mem, c_mem, d, np.int32(rows), np.int32(cols), np.int32(depth)))
    got = d if mem == 0 else d.T
    np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))
    exact = (c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)) * 2
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=0.01 if tc == "__half" else 1e-5, atol=0.02)


@pytest.mark.parametrize("how, block, message", [
    (0, 32, r"load_matrix_sync at \S+:\d+: lanes of warp 0 disagree on the pointer \(lane \d+: 0x[0-9a-f]+, "
            r"lane \d+: 0x[0-9a-f]+\); every lane of the warp must pass the same"),
    (4, 48, r"load_matrix_sync at \S+:\d+: a warp-collective operation needs all 32 lanes of the warp; warp 1 of "
            r"this block has 16 thread\(s\)"),
    (1, 32, r"deadlock in block \(0,0,0\): lanes 0x0000ffff of warp 0 wait at load_matrix_sync at \S+:\d+ for lanes "
            r"0xffff0000, which have exited"),
    (2, 32, r"load_matrix_sync at \S+:\d+: mptr 0x[0-9a-f]+ is not 256-bit \(32-byte\) aligned"),
    (3, 32, r"load_matrix_sync at \S+:\d+: ldm 12 must be a multiple of 8 for 2-byte elements"),
], ids=["pointer", "partial-warp", "half-warp", "misaligned", "ldm"])
def test_warp_collective_misuse_is_reported_with_the_line(module, how, block, message):
    a = np.zeros(1024, np.float16)
    line = next(i for i, ln in enumerate(GEMM.splitlines(), 1) if f"if (how == {how}" in ln)
    with pytest.raises(CpuKernelError, match=message) as info:
        module.get_function("misuse")(1, block, (a, np.int32(how)))
    assert f":{line}" in str(info.value)


def test_nvrtc_compiles_wmma_kernels_for_sm80_and_sm90():
    """The compile reports cover wmma kernels: NVRTC finds crt/mma.h, ptxas reports resources, the SASS census counts
    the tensor-core instructions (HMMA)."""
    from sandbox.analysis import nvrtc, sass

    names = [_name(SHAPES[1], CASES[1])]
    for arch in ("sm_80", "sm_90"):
        compiled = nvrtc.compile_cubin(GEMM, names, arch=arch, options=("--std=c++17",))
        for name in names:
            assert compiled.resources[name].registers > 0
        listing = sass.disassemble(compiled.cubin)
        hmma = sum(len(re.findall(r"\bHMMA\.", text)) for text in listing.values())
        assert hmma > 0, f"no HMMA in the {arch} SASS"
        census = [sass.census(text) for text in listing.values()]
        assert sum(c.instructions for c in census) > hmma
