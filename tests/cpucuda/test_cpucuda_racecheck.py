"""Racecheck (racecheck.py, race_checker.cpp): what it reports, what it must not report, what orders memory in
CUDA (intervals, warp operations with partial masks, tiles), and the mutation test: every __syncthreads() of the
CUDA C kernels removed one at a time is reported.

Racecheck launches run in this process; compiled objects are cached on disk, so only a cold run pays for g++.
"""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from kernels.cupy_raw import common
from sandbox.variant import registry
from sandbox.cpucuda import CpuKernelRaceError, CpuRawKernel, CpuRawModule, modes, substitute_source
from sandbox.cpucuda.source import tokenize
from sandbox.problem import DecodeProblem, MLAProblem

RACY = r"""
// Each thread writes its slot, then reads its neighbour's: a barrier between them, or not.
extern "C" __global__ void neighbour(float* out, int use_barrier) {
    __shared__ float tile[64];
    tile[threadIdx.x] = (float)threadIdx.x;
    if (use_barrier) __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + 1) % 64];
}

// Two threads write one global element (write-after-write), or one reads what another wrote.
extern "C" __global__ void global_clash(float* x, int read) {
    if (threadIdx.x == 3) x[5] = 1.0f;
    if (threadIdx.x == 9) { if (read) x[0] = x[5]; else x[5] = 2.0f; }
}

// The same through dynamic shared memory.
extern "C" __global__ void dynamic_neighbour(float* out) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = 1.0f;
    out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}

// Atomics are not races: a shared counter, a global sum, a float max built from atomicCAS.
extern "C" __global__ void atomics(int* count, float* sum, float* peak, const float* x) {
    __shared__ int local;
    if (threadIdx.x == 0) local = 0;
    __syncthreads();
    atomicAdd(&local, 1);
    atomicAdd(sum, x[threadIdx.x]);
    int* bits = (int*)peak;
    int old = *bits, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= x[threadIdx.x]) break;
        old = atomicCAS(bits, assumed, __float_as_int(x[threadIdx.x]));
    } while (old != assumed);
    __syncthreads();
    if (threadIdx.x == 0) count[blockIdx.x] = local;
}

// Lane 0 publishes a value in shared memory; the other lanes read it after a warp operation:
// `sync` 0: a shuffle (orders lanes by default, not in strict mode), 1: __syncwarp (orders always).
extern "C" __global__ void publish(int* out, int sync) {
    __shared__ int slot[32];
    const int lane = threadIdx.x % 32;
    if (lane == 0) slot[threadIdx.x / 32] = 42;
    if (sync) __syncwarp();
    else (void)__shfl_sync(0xffffffffu, lane, 0);
    out[threadIdx.x] = slot[threadIdx.x / 32];
}

// Blocks write the same element one after another: not a race here (blocks are not checked).
extern "C" __global__ void every_block_writes(int* x) { if (threadIdx.x == 0) x[0] = blockIdx.x; }
"""


@pytest.fixture(scope="module")
def racy():
    return CpuRawModule(code=RACY, racecheck=True)


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def test_missing_barrier_on_shared_memory_is_reported_with_both_lines(racy):
    k = racy.get_function("neighbour")
    out = np.zeros(64, np.float32)
    k(1, 64, (out, np.int32(1)))  # with the barrier: clean
    np.testing.assert_array_equal(out, (np.arange(64) + 1) % 64)
    with pytest.raises(CpuKernelRaceError) as info:
        k(1, 64, (out, np.int32(0)))
    msg = str(info.value).splitlines()[0]
    write, read = _line(RACY, "tile[threadIdx.x] = "), _line(RACY, "out[threadIdx.x] = tile[")
    assert msg.startswith("kernel 'neighbour': data race (write-after-read) on __shared__ tile (byte offset 4) "
                          "in block (0,0,0): thread (1,0,0) wrote 4 bytes at <code>:"), msg
    assert f"<code>:{write} in neighbour" in msg and f"<code>:{read} in neighbour" in msg
    assert "thread (0,0,0) read 4 bytes" in msg


@pytest.mark.parametrize("read, kind", [(1, "read-after-write"), (0, "write-after-write")])
def test_global_memory_race_names_the_argument(racy, read, kind):
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(CpuKernelRaceError, match=rf"\({kind}\) on argument 0 \(float32, shape \(2, 4\), element 5 "
                                                 rf"of the flattened array\) in block \(0,0,0\): thread \(9,0,0\)"):
        racy.get_function("global_clash")(1, 16, (x, np.int32(read)))
    assert x[1, 1] == (1.0 if read else 2.0)  # the written arrays still come back


def test_dynamic_shared_memory_race_is_named(racy):
    with pytest.raises(CpuKernelRaceError, match=r"on dynamic shared memory \(buf; byte offset \d+\)"):
        racy.get_function("dynamic_neighbour")(1, 32, (np.zeros(32, np.float32),), shared_mem=128)


TWO_KERNELS = r"""
__global__ void reduce_kernel(float* out) {
    extern __shared__ float weights[];
    weights[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = weights[(threadIdx.x + 1) % blockDim.x];
}
template <int N, typename T>
__device__ void stage(T* out) {
    extern __shared__ char smem[];
    T* buf = reinterpret_cast<T*>(smem);
    buf[threadIdx.x] = (T)1;
    out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}
template <int N, typename T>
__global__ void main_kernel(T* out) { if (N > 0) { stage<N, T>(out); } }
"""


def test_a_race_names_the_launched_kernels_array_and_demangled_functions():
    """The main kernel's race in its dynamic shared memory names its own `smem`, not the reduce kernel's
    `weights`; template functions read whole (`stage<16, float>`, not `float>`)."""
    module = CpuRawModule(code=TWO_KERNELS, racecheck=True, name_expressions=["main_kernel<16, float>", "reduce_kernel"])
    with pytest.raises(CpuKernelRaceError) as info:
        module.get_function("main_kernel<16, float>")(1, 32, (np.zeros(32, np.float32),), shared_mem=128)
    msg = str(info.value).splitlines()[0]
    write, read = _line(TWO_KERNELS, "buf[threadIdx.x] = "), _line(TWO_KERNELS, "out[threadIdx.x] = buf[")
    assert "on dynamic shared memory (smem; byte offset 4)" in msg, msg
    assert f"<code>:{write} in stage<16, float>;" in msg and f"<code>:{read} in stage<16, float>," in msg, msg


def test_atomics_and_consecutive_blocks_are_not_races(racy):
    x = np.random.default_rng(0).random(64).astype(np.float32)
    count, total, peak = np.zeros(2, np.int32), np.zeros(1, np.float32), np.zeros(1, np.float32)
    racy.get_function("atomics")(2, 64, (count, total, peak, x))
    np.testing.assert_array_equal(count, 64)
    np.testing.assert_allclose(total[0], 2 * x.sum(), rtol=1e-5)
    assert peak[0] == x.max()
    blocks = np.zeros(1, np.int32)
    racy.get_function("every_block_writes")(4, 32, (blocks,))
    assert blocks[0] == 3


def test_strict_mode_only_trusts_syncwarp():
    out = np.zeros(64, np.int32)
    default = CpuRawModule(code=RACY, racecheck=True).get_function("publish")
    default(1, 64, (out, np.int32(0)))  # a shuffle orders the lanes it joins
    default(1, 64, (out, np.int32(1)))
    strict = CpuRawModule(code=RACY, racecheck="strict").get_function("publish")
    strict(1, 64, (out, np.int32(1)))
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write.*__shared__ slot"):
        strict(1, 64, (out, np.int32(0)))  # warp-synchronous code relying on lockstep


def test_racecheck_from_environment_and_modes(monkeypatch):
    k = CpuRawModule(code=RACY).get_function("neighbour")
    out = np.zeros(64, np.float32)
    monkeypatch.setenv("SANDBOX_CPUCUDA_RACECHECK", "1")
    with pytest.raises(CpuKernelRaceError):
        k(1, 64, (out, np.int32(0)))
    monkeypatch.setenv("SANDBOX_CPUCUDA_RACECHECK", "0")
    k(1, 64, (out, np.int32(0)))  # normal mode: no check
    with modes(racecheck="strict"):
        publish = CpuRawModule(code=RACY).get_function("publish")
        with pytest.raises(CpuKernelRaceError):
            publish(1, 32, (np.zeros(32, np.int32), np.int32(0)))
    with pytest.raises(ValueError, match="asan and racecheck"):
        CpuRawKernel(RACY, "neighbour", asan=True, racecheck=True)(1, 64, (out, np.int32(1)))


def test_launches_run_in_process_and_each_reports_its_race(racy):
    """No child process: a launch that reported a race leaves nothing behind, the same race is reported again by
    the next launch, and a clean launch after it passes with its results."""
    from sandbox.cpucuda import child

    k = racy.get_function("neighbour")
    out = np.zeros(64, np.float32)
    children = dict(child._SERVERS)  # other tests' ASan child, if any
    k(1, 64, (out, np.int32(1)))
    for _ in range(2):
        with pytest.raises(CpuKernelRaceError, match=r"write-after-read\) on __shared__ tile"):
            k(1, 64, (out, np.int32(0)))
    out[:] = 0
    k(1, 64, (out, np.int32(1)))
    np.testing.assert_array_equal(out, (np.arange(64) + 1) % 64)
    assert child._SERVERS == children  # no sanitizer child started or replaced


# What the checker itself decides: intervals, warp clocks with partial masks and their transitivity, tiles wider
# than a warp, bytes of one word, libc memcpy.
ORDERS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Thread r % 64 writes x[0] in round r; `barrier` 1: a __syncthreads between rounds (earlier intervals never race).
extern "C" __global__ void rounds(int* x, int barrier) {
    for (int r = 0; r < 4; ++r) {
        if (threadIdx.x == r % 64) x[0] = r;
        if (barrier) __syncthreads();
    }
}

// Lane 0 writes; lanes 0-15 meet at __syncwarp(0x0000ffff), lanes 16-31 at __syncwarp(0xffff0000); then lanes
// below `readers` read lane 0's value (`readers` 32: lanes 16-31 too, which nothing ordered after the write).
extern "C" __global__ void half_warps(int* out, int readers) {
    __shared__ int slot;
    const unsigned lane = threadIdx.x;
    if (lane == 0) slot = 7;
    __syncwarp(lane < 16 ? 0x0000ffffu : 0xffff0000u);
    if (lane < (unsigned)readers) out[lane] = slot;
}

// Lane 0 writes; lanes 0-1 and 2-3 meet; then lanes 1-2; then lane `reader` reads: lane 2 is ordered after the
// write through lane 1, lane 3 is not.
extern "C" __global__ void relay(int* out, int reader) {
    __shared__ int slot;
    const unsigned lane = threadIdx.x;
    if (lane == 0) slot = 5;
    for (int step = 0; step < 2; ++step) {
        const unsigned group = step == 0 ? (lane < 2 ? 0x3u : 0xcu) : 0x6u;
        if ((group >> lane) & 1u) __syncwarp(group);
    }
    if (lane == (unsigned)reader) out[0] = slot;
}

// Thread 0 writes; the first 64-thread tile syncs; thread `reader` reads (64 or more: another tile).
extern "C" __global__ void tile64(int* out, int reader) {
    __shared__ int slot;
    auto tile = cg::tiled_partition<64>(cg::this_thread_block());
    if (threadIdx.x == 0) slot = 9;
    tile.sync();
    if (threadIdx.x == (unsigned)reader) out[0] = slot;
}

// Each thread writes its own 2-byte half of a word, then reads its neighbour's half (`barrier`: after a sync).
extern "C" __global__ void halves(unsigned short* out, int barrier) {
    __shared__ unsigned short h[64];
    h[threadIdx.x] = (unsigned short)threadIdx.x;
    if (barrier) __syncthreads();
    out[threadIdx.x] = h[threadIdx.x ^ 1];
}

// Threads 0-3 each write one byte of a word; thread `reader` then reads byte 0 (no barrier).
extern "C" __global__ void bytes_of_a_word(unsigned char* out, int reader) {
    __shared__ unsigned char b[4];
    if (threadIdx.x < 4) b[threadIdx.x] = (unsigned char)(10 + threadIdx.x);
    if (threadIdx.x == (unsigned)reader) out[0] = b[0];
}

// An input behind a pointer to const that thread 0 writes anyway (a cast) and thread 1 then reads.
extern "C" __global__ void through_const(const int* x, int* out) {
    if (threadIdx.x == 0) const_cast<int*>(x)[2] = 1;
    if (threadIdx.x == 1) out[0] = x[2];
}

// Every thread counts itself in a __device__ variable: plainly (a race) or with atomicAdd. A file-scope
// __shared__ array stays shared memory.
__device__ int tally;
__shared__ int file_scope[32];

extern "C" __global__ void file_scope_neighbour(int* out) {
    file_scope[threadIdx.x] = 1;
    out[threadIdx.x] = file_scope[(threadIdx.x + 1) % 32];
}

extern "C" __global__ void count_in_global(int* out, int atomic) {
    if (atomic) atomicAdd(&tally, 1);
    else tally += 1;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = tally;
}

// Thread 0 fills shared memory with libc memcpy (n bytes: not inlined); every thread reads its slot.
extern "C" __global__ void staged(float* out, const float* in, unsigned long n, int barrier) {
    __shared__ float s[64];
    if (threadIdx.x == 0) memcpy(s, in, n);
    if (barrier) __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


@pytest.fixture(scope="module")
def orders():
    return CpuRawModule(code=ORDERS, racecheck=True)


def test_an_access_of_an_earlier_interval_never_races(orders):
    x = np.zeros(1, np.int32)
    orders.get_function("rounds")(1, 64, (x, np.int32(1)))
    assert x[0] == 3
    with pytest.raises(CpuKernelRaceError, match=r"write-after-write\) on argument 0 .*: thread \(1,0,0\) wrote 4 "
                                                 r"bytes at <code>:\d+ in rounds; thread \(0,0,0\) wrote 4 bytes"):
        orders.get_function("rounds")(1, 64, (x, np.int32(0)))


def test_a_partial_warp_mask_orders_only_its_lanes(orders):
    k = orders.get_function("half_warps")
    out = np.zeros(32, np.int32)
    k(1, 32, (out, np.int32(16)))
    np.testing.assert_array_equal(out[:16], 7)
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write\) on __shared__ slot .*: thread \(16,0,0\) read "
                                                 r"4 bytes at <code>:\d+ in half_warps; thread \(0,0,0\) wrote"):
        k(1, 32, (out, np.int32(32)))


def test_warp_orders_are_transitive(orders):
    out = np.zeros(1, np.int32)
    orders.get_function("relay")(1, 4, (out, np.int32(2)))
    assert out[0] == 5
    with modes(racecheck="strict"):  # __syncwarp orders in strict mode too
        CpuRawModule(code=ORDERS).get_function("relay")(1, 4, (out, np.int32(2)))
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write\) on __shared__ slot .*thread \(3,0,0\) read"):
        orders.get_function("relay")(1, 4, (out, np.int32(3)))


def test_a_tile_sync_orders_its_own_threads_only(orders):
    k = orders.get_function("tile64")
    out = np.zeros(1, np.int32)
    k(1, 128, (out, np.int32(63)))
    assert out[0] == 9
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write\) on __shared__ slot .*thread \(64,0,0\) read"):
        k(1, 128, (out, np.int32(64)))


def test_halves_of_one_word_are_separate(orders):
    k = orders.get_function("halves")
    out = np.zeros(64, np.uint16)
    k(1, 64, (out, np.int32(1)))  # 32 words, each written by two threads: no race
    np.testing.assert_array_equal(out, np.arange(64) ^ 1)
    with pytest.raises(CpuKernelRaceError, match=r"\) on __shared__ h \(byte offset [02]\) in block \(0,0,0\): "
                                                 r"thread \(1,0,0\) (read|wrote) 2 bytes"):
        k(1, 64, (out, np.int32(0)))


def test_each_byte_of_a_word_keeps_its_own_writer(orders):
    """Four threads write the four bytes of one word: a read of byte 0 races with its writer, thread 0, whichever
    thread wrote the word last."""
    k = orders.get_function("bytes_of_a_word")
    out = np.zeros(1, np.uint8)
    k(1, 8, (out, np.int32(0)))  # thread 0 reads its own byte
    assert out[0] == 10
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write\) on __shared__ b \(byte offset 0\) in block "
                                                 r"\(0,0,0\): thread \(5,0,0\) read 1 bytes .*; thread \(0,0,0\) wrote 1 bytes"):
        k(1, 8, (out, np.int32(5)))


def test_a_const_input_written_through_a_cast_is_checked_from_then_on(orders):
    """Reads of a pointer-to-const argument are not recorded until something writes to it; after that they are."""
    x = np.zeros(4, np.int32)
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write\) on argument 0 \(int32, shape \(4,\), element 2 "
                                                 r"of the flattened array\) .*thread \(1,0,0\) read 4 bytes"):
        orders.get_function("through_const")(1, 32, (x, np.zeros(1, np.int32)))


def test_a_global_device_variable_is_checked(orders):
    k = orders.get_function("count_in_global")
    out = np.zeros(1, np.int32)
    k(1, 32, (out, np.int32(1)))  # atomics: no race
    with pytest.raises(CpuKernelRaceError, match=r"\(read-after-write\) on global variable tally \(byte offset 0\) in "
                                                 r"block \(0,0,0\): thread \(1,0,0\) read 4 bytes"):
        k(1, 32, (out, np.int32(0)))
    with pytest.raises(CpuKernelRaceError, match=r"\(write-after-read\) on __shared__ file_scope \(byte offset 4\)"):
        orders.get_function("file_scope_neighbour")(1, 32, (np.zeros(32, np.int32),))


def test_libc_memcpy_into_shared_memory_races(orders):
    k = orders.get_function("staged")
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    k(1, 64, (out, x, np.uint64(x.nbytes), np.int32(1)))
    np.testing.assert_array_equal(out, x)
    with pytest.raises(CpuKernelRaceError, match=r"read-after-write\) on __shared__ s \(byte offset 4\) .*: "
                                                 r"thread \(1,0,0\) read 4 bytes at <code>:\d+ in staged; "
                                                 r"thread \(0,0,0\) wrote 256 bytes at <code>:\d+ in staged"):
        k(1, 64, (out, x, np.uint64(x.nbytes), np.int32(0)))


def test_race_in_a_user_header_names_the_header(tmp_path):
    (tmp_path / "stage.cuh").write_text("#pragma once\n__device__ float stage(float v) {\n"
                                        "    __shared__ float s[32];\n    s[threadIdx.x] = v;\n"
                                        "    return s[31 - threadIdx.x];\n}\n")
    code = '#include "stage.cuh"\nextern "C" __global__ void k(float* out) { out[threadIdx.x] = stage(1.f); }\n'
    k = CpuRawKernel(code, "k", options=(f"-I{tmp_path}",), racecheck=True)
    with pytest.raises(CpuKernelRaceError, match=rf"__shared__ s .*{tmp_path / 'stage.cuh'}:[45] in stage"):
        k(1, 32, (np.zeros(32, np.float32),))


# ---------------------------------------------------------------- mutation test

def _barriers(text: str) -> list[int]:
    """Offsets of the `__syncthreads` calls of a source (comments skipped)."""
    return [t.start for t in tokenize(text) if t.kind == "word" and t.text == "__syncthreads"]


def _cuda_c_sources():
    return sorted(common.KERNEL_DIR.glob("*.cu")) + sorted(common.KERNEL_DIR.glob("*.cuh"))


MUTATIONS = [(path.name, k) for path in _cuda_c_sources() for k in range(len(_barriers(path.read_text())))]
# Variants whose launches the mutations run through: the CUDA C attention variants (decode and MLA), registry order.
VARIANTS = [n for n in registry.variants("cupy", problem=None)]
# Per kind of problem, the small problem first; the larger one (several chunks and partitions, a GQA group)
# only when the small one did not reach the barrier's code.
PROBLEMS = {"decode": [(DecodeProblem.random, dict(seed=71, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=32,
                                                   block_size=16, context_lens=[40], dtype="float32")),
                       (DecodeProblem.random, dict(seed=72, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64,
                                                   block_size=16, context_lens=[600, 5], dtype="float32"))],
            "mla": [(MLAProblem.random, dict(seed=73, num_seqs=1, num_heads=2, block_size=16, context_lens=[40])),
                    (MLAProblem.random, dict(seed=74, num_seqs=2, num_heads=2, block_size=16, context_lens=[600, 5]))]}


def test_mutations_are_enumerated():
    assert len(MUTATIONS) >= 7, MUTATIONS  # attend.cuh: 5 in attend, reductions.cuh: 2 in the reduce kernel


@pytest.mark.slow
@pytest.mark.parametrize("filename, index", MUTATIONS, ids=[f"{f}#{k}" for f, k in MUTATIONS])
def test_every_removed_barrier_is_reported(tmp_path, filename, index):
    """Remove one __syncthreads() (a copy of kernels/cupy_raw in a temp folder, line numbers kept) and run the
    variants that include the file under racecheck until one reports the race."""
    for path in _cuda_c_sources():
        shutil.copy(path, tmp_path / path.name)
    target = tmp_path / filename
    text = target.read_text()
    at = _barriers(text)[index]
    end = text.index(";", at) + 1
    target.write_text(text[:at] + ";" + text[end:])  # `__syncthreads();` -> `;`
    line = text.count("\n", 0, at) + 1
    tried = []
    for size in (0, 1):
        for name in VARIANTS:
            module = registry.get(name).module
            original = common.load_source(module.PATH)
            if f'kernels/cupy_raw/{filename}"' not in original:  # load_source's #line names every file it inlines
                continue
            make, spec = PROBLEMS[registry.get(name).problem][size]
            problem = make(**spec)
            if not registry.get(name).limits.supports(problem) and "dtype" in spec:  # cupy.tc: 16-bit queries only
                spec = dict(spec, dtype=registry.get(name).limits.dtypes[0])
                problem = make(**spec)
            if not registry.get(name).limits.supports(problem):
                continue  # a variant that declares less than the problem cannot reach the barrier here
            mutated = common.load_source(tmp_path / module.PATH.name)
            assert mutated != original
            tried.append(f"{name} on context {spec['context_lens']}")
            with substitute_source(original, mutated), modes(racecheck=True):
                try:
                    prepared = module.prepare(problem, "cpu")
                    prepared.launch()
                except CpuKernelRaceError as exc:
                    assert re.search(r"data race \((read|write)-after-(read|write)\)", str(exc))
                    return
    pytest.fail(f"removing the __syncthreads() at {filename}:{line} was not reported (ran {tried})")


def test_racecheck_optimisation_level_comes_from_its_variable(monkeypatch):
    """SANDBOX_CPUCUDA_RACECHECK_OPT replaces the racecheck build's level (the suite compiles at -O0), and a
    bad value is refused naming the variable; the normal mode's variable does not reach it."""
    from sandbox.cpucuda.compiler import mode_flags

    monkeypatch.setenv("SANDBOX_CPUCUDA_OPT", "-O3")
    monkeypatch.setenv("SANDBOX_CPUCUDA_RACECHECK_OPT", "-O1")
    flags = mode_flags("race")
    assert "-O1" in flags and not {"-O0", "-O2", "-O3"} & set(flags) and "-fsanitize=thread" in flags
    monkeypatch.delenv("SANDBOX_CPUCUDA_RACECHECK_OPT")
    assert "-O2" in mode_flags("race") and "-O3" not in mode_flags("race")
    monkeypatch.setenv("SANDBOX_CPUCUDA_RACECHECK_OPT", "fast")
    with pytest.raises(ValueError, match="SANDBOX_CPUCUDA_RACECHECK_OPT='fast'"):
        mode_flags("race")
    monkeypatch.setenv("SANDBOX_CPUCUDA_ASAN_OPT", "-O0")  # ASan's -O1 likewise
    flags = mode_flags("asan")
    assert "-O0" in flags and "-O1" not in flags and "-fsanitize=address" in flags
