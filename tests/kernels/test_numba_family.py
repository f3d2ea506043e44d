"""What the shared suite (tests/kernels/test_variants.py) does not cover for the numba.* kernels: every block
size explicitly, split-KV partition independence, declared bounds refused before launch, the block
reduction helper, compilation for sm_80/sm_90 (real-mode child), occupancy and the resources CLI;
the bfloat16 / fp8 decoders and encoders against ml_dtypes for every code, sliding windows that
never touch the blocks before them, and each attention option on small problems."""
from __future__ import annotations

import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from numba import cuda, float32  # after conftest imported sandbox: simulator exactly when no GPU

import reference
from kernels.numba_cuda import codecs, launch, options, reductions, reports, simulator
from kernels.numba_cuda.reductions import REDUCE_SCRATCH, block_max, block_sum
from sandbox.problem import dtypes
from sandbox.variant import registry
from sandbox.analysis import resources, sass
from sandbox import run_problem
from sandbox.devices.backends import numba_simulated
from sandbox.checking.check import expected_output
from sandbox.checking.compare import assert_close
from sandbox.analysis.occupancy import occupancy
from sandbox.problem import DecodeProblem
from sandbox.variant import POW2_BLOCK_SIZES, Unsupported

from declared import declares, require, within

NUMBA = registry.variants("numba")
# The ones with a compile report (an optional part of a variant): what the compile tests walk.
REPORTED = [n for n in NUMBA if hasattr(registry.get(n).module, "compile_report")]


def _expected(problem):
    """The truth with the problem's options (reference.paged_attention); plain problems as check does."""
    if problem.options.features:
        return reference.paged_attention(*problem.arrays(), **problem.kwargs())
    return expected_output(problem)


def _check(name, problem):
    assert_close(run_problem(name, problem), _expected(problem), problem.dtype, f"{name} on {problem}")


@pytest.mark.parametrize("name", NUMBA)
def test_every_block_size_with_context_traps(name):
    """Each power-of-two block size with lengths 1, k*bs and k*bs+1 in one problem (GQA 2, 2 KV heads), the
    ones the variant declares."""
    problems = []
    for i, block_size in enumerate(POW2_BLOCK_SIZES):
        k = 2 if block_size <= 16 else 1
        problems.append(DecodeProblem.random(100 + i, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=32,
                                             block_size=block_size, context_lens=[1, k * block_size, k * block_size + 1],
                                             dtype=("float32", "float16")[i % 2], extreme_logits=bool(i % 3 == 0)))
    for problem in within(name, problems):
        _check(name, problem)


@pytest.mark.parametrize("name", NUMBA)
@pytest.mark.parametrize("head_dim", [96, 256])
def test_declared_head_dims_beyond_the_random_suite(name, head_dim):
    problem = DecodeProblem.random(7, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=head_dim, block_size=8,
                                   context_lens=[9, 20], dtype="float16")
    require(name, problem)
    _check(name, problem)


def test_split_results_do_not_depend_on_partition_size():
    """Partitions of 4..64 tokens and the default 512; the short sequences leave partitions empty."""
    from kernels.numba_cuda import split

    problem = DecodeProblem.random(21, num_seqs=4, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4,
                                   context_lens=[1, 5, 60, 23], dtype="float32", extreme_logits=True)
    expected = expected_output(problem)
    outputs = {}
    for size in (4, 12, 64, None):
        prepared = split.prepare(problem, registry.family("numba").resolve("auto"), partition_size=size)
        prepared.launch()
        outputs[size] = prepared.result()
        assert_close(outputs[size], expected, problem.dtype, f"partition_size={size}")
        if size == 4:
            assert prepared.num_partitions == 15  # sequence 0 (1 token) has 14 empty partitions
            part_max, part_sum, _ = (a.copy_to_host() for a in prepared.partials)
            assert np.isneginf(part_max[0, :, 1:]).all() and (part_sum[0, :, 1:] == 0).all()
    for size, out in outputs.items():
        np.testing.assert_allclose(out, outputs[4], rtol=0, atol=1e-6, err_msg=f"partition_size={size} vs 4")


def test_split_refuses_a_partition_that_is_not_a_multiple_of_the_block_size():
    from kernels.numba_cuda import split

    problem = DecodeProblem.random(3, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=32, block_size=8, max_context_len=20)
    with pytest.raises(Unsupported, match=r"numba.split: partition_size must be a positive multiple of block_size \(8\)"):
        split.prepare(problem, registry.family("numba").resolve("auto"), partition_size=12)
    assert split.default_partition_size(16) == 512 and split.default_partition_size(1024) == 1024


def test_block_refuses_a_context_beyond_its_shared_memory_before_launch():
    from kernels.numba_cuda.block import MAX_CONTEXT_LEN

    problem = DecodeProblem.random(4, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=32, block_size=256,
                                   context_lens=[MAX_CONTEXT_LEN + 1], nan_fill=False)
    with pytest.raises(Unsupported, match=f"numba.block .* context_len <= {MAX_CONTEXT_LEN} tokens read "
                                          r"\(the context, or its sliding window\); got 8193"):
        run_problem("numba.block", problem)


def test_block_takes_a_long_context_through_a_sliding_window():
    """What numba.block keeps in shared memory is the tokens read: a window of 100 makes 8293 tokens fit."""
    from kernels.numba_cuda.block import MAX_CONTEXT_LEN

    problem = DecodeProblem.random(4, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, block_size=16,
                                   context_lens=[MAX_CONTEXT_LEN + 101], window_left=100)
    _check("numba.block", problem)


def test_gqa_refuses_a_group_beyond_its_shared_memory_before_launch():
    problem = DecodeProblem.random(4, num_seqs=1, num_heads=64, num_kv_heads=1, head_dim=256, block_size=16,
                                   context_lens=[3])
    with pytest.raises(Unsupported, match=r"numba.gqa needs \d+ bytes of shared memory for a group of 64"):
        run_problem("numba.gqa", problem)


@pytest.mark.parametrize("threads, group, head_dim", [(64, 3, 32), (128, 12, 32), (32, 8, 80)])
def test_gqa_with_more_threads_than_head_dim(monkeypatch, threads, group, head_dim):
    """The GPU's 128 threads split V accumulation into token slices; the simulator's default 16 never does."""
    monkeypatch.setattr(launch, "SIM_MAX_THREADS", threads)
    problem = DecodeProblem.random(group, num_seqs=2, num_heads=2 * group, num_kv_heads=2, head_dim=head_dim,
                                   block_size=16, context_lens=[1, 150], dtype="float16")
    _check("numba.gqa", problem)


def reduce_body(values, out):
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i, 0] = block_max(values[i], scratch)
    out[i, 1] = block_sum(values[i], scratch)


def shuffle_reduce_body(values, out):
    scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i, 0] = reductions.shuffle_block_max(values[i], scratch)
    out[i, 1] = reductions.shuffle_block_sum(values[i], scratch)


def _emulated_shfl_xor_sync(fake_cuda, mask, value, lane_mask):
    """shfl_xor_sync for the simulator: every thread of the block posts its value, then reads its partner's."""
    import threading

    tid = threading.current_thread().threadIdx.x
    board = fake_cuda.__dict__.setdefault("_shuffle_board", {})
    board[tid] = value
    fake_cuda.syncthreads()
    partner = board[tid ^ lane_mask]
    fake_cuda.syncthreads()
    return partner


def _reduce_and_check(kernel, threads, blocks=3):
    rng = np.random.default_rng(threads)
    values = rng.standard_normal(blocks * threads).astype(np.float32)
    values[0] = -np.inf  # a thread without tokens contributes -inf to the max
    out = np.zeros((blocks * threads, 2), np.float32)
    with simulator.simulator_switching():
        kernel[blocks, threads](values, out)
    for b in range(blocks):
        chunk = values[b * threads:(b + 1) * threads]
        np.testing.assert_array_equal(out[b * threads:(b + 1) * threads, 0], chunk.max())
        np.testing.assert_allclose(out[b * threads:(b + 1) * threads, 1], chunk.sum(), rtol=1e-5)


@pytest.mark.skipif(not numba_simulated(), reason="runs the reductions under the simulator")
@pytest.mark.parametrize("threads", [1, 2, 5, 16, 64])
def test_block_reductions(threads):
    _reduce_and_check(cuda.jit(reduce_body), threads)


@pytest.mark.skipif(not numba_simulated(), reason="runs the reductions under the simulator")
@pytest.mark.parametrize("threads", [32, 64, 128])
def test_shuffle_block_reductions_with_emulated_shuffles(monkeypatch, threads):
    """The GPU path (warp butterflies, one slot per warp) on the simulator, with shfl_xor_sync emulated."""
    from numba.cuda.simulator import kernelapi

    monkeypatch.setattr(kernelapi.FakeCUDAModule, "shfl_xor_sync", _emulated_shfl_xor_sync, raising=False)
    _reduce_and_check(cuda.jit(shuffle_reduce_body), threads, blocks=2)


def _slow_poisoned_allocations(monkeypatch):
    """Adversarial simulator memory: every float shared or local array starts as NaN (what a kernel
    reads before writing shows up), and each static shared allocation sleeps 10 ms, so all threads of
    a block ask for it at once: a simulator that hands two threads different arrays always fails."""
    import time

    from numba.cuda.simulator import kernelapi

    empty = np.empty
    slow = [0]

    def poisoned(shape, dtype=float, *args, **kwargs):
        out = empty(shape, dtype, *args, **kwargs)
        owner = sys._getframe(1).f_locals.get("self")
        if isinstance(owner, (kernelapi.FakeCUDAShared, kernelapi.FakeCUDALocal)) and out.dtype.kind == "f":
            out.fill(np.nan)
            if isinstance(owner, kernelapi.FakeCUDAShared):
                slow[0] += 1
                time.sleep(0.01)
        return out

    monkeypatch.setattr(np, "empty", poisoned)
    return slow


def neighbour_body(out):
    shared = cuda.shared.array(REDUCE_SCRATCH, float32)
    tid = cuda.threadIdx.x
    shared[tid] = tid
    cuda.syncthreads()
    out[cuda.blockIdx.x, tid] = shared[(tid + 1) % cuda.blockDim.x]


@pytest.mark.skipif(not numba_simulated(), reason="a simulator race")
def test_every_thread_of_a_block_gets_the_same_static_shared_array(monkeypatch):
    """numba 0.68's simulator allocated a static shared array with an unlocked check-then-store, so
    under GIL switches two threads of a launch's first block could get different arrays (NaN from
    numba.split at (seq 0, head 0) once in a sweep). kernels/numba_cuda/simulator.py serialises it; this forces the race."""
    kernel = cuda.jit(neighbour_body)
    out = np.full((2, 16), -1.0, np.float32)
    slow = _slow_poisoned_allocations(monkeypatch)
    with simulator.simulator_switching():
        kernel[2, 16](out)
    assert slow[0] == 1  # one allocation per shared array and launch, however the threads interleave
    np.testing.assert_array_equal(out, np.tile((np.arange(16) + 1) % 16, (2, 1)))


@pytest.mark.skipif(not numba_simulated(), reason="a simulator race")
@pytest.mark.parametrize("name", NUMBA)
def test_variants_with_racing_allocations_and_nan_poisoned_memory(monkeypatch, name):
    """Each kernel with its static shared and local arrays born NaN and allocated by all threads at
    once: also catches reading such memory before this launch wrote it (dynamic shared starts zeroed)."""
    from sandbox.variant import runner

    problem = DecodeProblem.random(11, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, block_size=16,
                                   context_lens=[40])
    require(name, problem)
    prepared, _ = runner.prepare(name, problem, "cpu")
    _slow_poisoned_allocations(monkeypatch)
    prepared.launch()
    monkeypatch.undo()
    assert_close(prepared.result(), expected_output(problem), problem.dtype, f"{name} on {problem}")


@pytest.mark.skipif(not numba_simulated(), reason="runs the GPU configuration under the simulator")
@pytest.mark.parametrize("name", NUMBA)
def test_gpu_launch_configuration_under_the_simulator(monkeypatch, name):
    """What a GPU runs, minus the hardware: GPU thread counts (32..128, whole warps) and the shuffle
    reductions (shfl_xor_sync emulated), on a problem with a 1-token and a 200-token sequence."""
    from numba.cuda.simulator import kernelapi

    from kernels.numba_cuda import block, split

    monkeypatch.setattr(kernelapi.FakeCUDAModule, "shfl_xor_sync", _emulated_shfl_xor_sync, raising=False)
    sizing = launch.launch_threads
    monkeypatch.setattr(launch, "launch_threads",
                        lambda work, simulated=None, threads="auto": sizing(work, simulated=False, threads=threads))
    for module in (block, split):
        monkeypatch.setattr(module, "block_max", reductions.shuffle_block_max)
        monkeypatch.setattr(module, "block_sum", reductions.shuffle_block_sum)
    problem = DecodeProblem.random(8, num_seqs=2, num_heads=4, num_kv_heads=1, head_dim=64, block_size=16,
                                   context_lens=[1, 200], dtype="float16")
    require(name, problem)
    _check(name, problem)


# Each architecture once and each dtype once (every pair cost ~15 s of compiling per test run);
# bfloat16 with an e4m3 cache at sm_90 is the test after this one.
@pytest.mark.parametrize("arch, dtype", [("sm_80", "float32"), ("sm_90", "float16")])
def test_every_numba_kernel_compiles_for_real_gpus(arch, dtype):
    """compile_ptx + nvJitLink in a real-mode child: resources parsed, no float64 math, shuffles in the
    block reductions (the GPU path of the helper is the one compiled); the same in the machine code."""
    names = [n for n in REPORTED if declares(n, dtype, 16, 128)] + registry.cache_writers("numba")
    rows = resources.collect(names, block_sizes=(16,), head_dim=128, dtype=dtype, arch=arch, images=True)
    census = {(r["variant"], r["kernel"]): r for r in sass.census_rows(rows)}
    assert len(census) == sum(len(r["kernels"]) for r in rows)
    for (variant, kernel), counts in census.items():  # generic LD/ST would hide which memory is read
        assert counts["fp64"] == 0 and counts["generic"] == 0 and counts["instructions"] > 0, (variant, kernel, counts)
    assert census[("numba.block", "block")]["shuffles"] > 0 and census[("numba.split", "partition")]["shuffles"] > 0
    assert [r["variant"] for r in rows] == names
    for row in rows:
        assert "error" not in row, row
        assert row["path"] == "numba compile_ptx -> nvJitLink"
        for kernel in row["kernels"]:
            assert 0 < kernel["registers"] <= 255, (row["variant"], kernel)
            assert kernel["fp64_instructions"] == 0, (row["variant"], kernel)
            assert kernel["spill_stores"] == 0 and kernel["spill_loads"] == 0, (row["variant"], kernel)
            assert 0 < kernel["occupancy"] <= 1
    by_name = {r["variant"]: r for r in rows}
    assert by_name["numba.block"]["kernels"][0]["shuffles"] > 0
    assert by_name["numba.split"]["kernels"][0]["shuffles"] > 0
    assert [k["name"] for k in by_name["numba.split"]["kernels"]] == ["partition", "merge"]
    assert by_name["numba.block"]["dynamic_shared_bytes"] == 4 * 4096
    # static shared of numba.block: the staged query (MAX_HEAD_DIM = 512 floats) + one reduction slot per warp (32)
    assert by_name["numba.block"]["static_shared_bytes"] == 4 * (512 + 32)


def test_parse_link_log_subtracts_the_sm90_linker_kilobyte():
    log = ("ptxas info    : Function properties for k\n"
           "ptxas         .     1200 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 36 registers, used 1 barriers, 468 bytes cmem[0]\n"
           "info    : used 36 registers, used 1 barriers, 1200 stack, 1280 bytes smem, 644 bytes cmem[0], 0 bytes lmem\n")
    assert resources.parse_link_log(log, "sm_90") == dict(registers=36, static_shared_bytes=256, local_bytes=1200,
                                                          spill_stores=8, spill_loads=4)
    assert resources.parse_link_log(log.replace("1280 bytes smem", "256 bytes smem"), "sm_80")["static_shared_bytes"] == 256


@pytest.mark.parametrize("regs, shared, threads, arch, blocks, fraction, limiter", [
    (32, 0, 256, "sm_90", 8, 1.0, "warps"),          # 8 warps/block: 64 warps; registers also allow exactly 64
    (64, 0, 128, "sm_90", 8, 0.5, "registers"),      # 64*32 = 2048 regs/warp -> 32 warps -> 8 blocks of 4
    (40, 0, 128, "sm_90", 12, 0.75, "registers"),    # 1280 regs/warp -> 51 warps, in 4s: 48 -> 12 blocks
    (32, 50176, 128, "sm_90", 4, 0.25, "shared"),    # 49 KB + 1 KB reserve = 50 KB: 228 // 50 = 4 blocks
    (32, 50176, 128, "sm_80", 3, 0.1875, "shared"),  # 164 // 50 = 3 blocks
    (16, 0, 32, "sm_90", 32, 0.5, "blocks"),         # one warp per block, at most 32 blocks per SM
    (255, 0, 1024, "sm_90", 0, 0.0, "registers (none fit)"),
])
def test_occupancy_against_hand_computed_cases(regs, shared, threads, arch, blocks, fraction, limiter):
    occ = occupancy(regs, shared, threads, arch)
    assert (occ.blocks_per_sm, occ.fraction, occ.limiter) == (blocks, fraction, limiter)


def test_occupancy_refuses_what_cannot_launch():
    assert occupancy(32, 300 * 1024, 128, "sm_90").limiter.startswith("invalid")
    assert occupancy(32, 0, 2048, "sm_90").limiter.startswith("invalid")
    with pytest.raises(ValueError, match="arch must be one of sm_80, sm_90"):
        occupancy(32, 0, 128, "sm_70")


def test_resources_cli_json_and_table():
    args = [sys.executable, "-m", "sandbox", "resources", "--variants", "numba.naive", "numba.split",
            "--block-sizes", "1,16", "--arch", "sm_80", "--dtype", "float32"]
    proc = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["variant"], r["block_size"]) for r in rows] == [("numba.naive", 1), ("numba.naive", 16),
                                                               ("numba.split", 1), ("numba.split", 16)]
    for row in rows:
        assert set(resources.COLUMNS) <= set(row) and row["arch"] == "sm_80" and row["dtype"] == "float32"
    assert "compiling for" in proc.stderr
    # the table the command prints without --json, from the same rows (one more child process would recompile)
    from sandbox.commands import resources as resources_command
    text = resources_command.table(rows)
    assert "numba.split [partition]" in text and "+ [merge]" in text and text.startswith("variant")


def test_resources_refuses_unknown_names_and_archs():
    with pytest.raises(ValueError, match="unknown variant 'numba.nope'; valid names: .*numba.naive"):
        resources.collect(["numba.nope"])
    with pytest.raises(ValueError, match="arch must be one of sm_80, sm_90"):
        resources.collect(["numba.naive"], arch="sm_75")


# ---------------------------------------------------------------------------------------------
# Precisions: the device functions that decode bfloat16 / fp8 and encode bfloat16 / fp8, run as a
# 1-D kernel over a vector (the simulator here; compiled on a GPU machine), against ml_dtypes.
def _map_kernel(fn):
    def body(x, out):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            out[i] = fn(x[i])
    return cuda.jit(body)


def _scaled_map_kernel(fn):
    def body(x, scale, out):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            out[i] = fn(x[i], scale)
    return cuda.jit(body)


def _run_map(kernel, *args):
    with simulator.simulator_switching():
        kernel[2, 8](*args)
    return args[-1]


def _assert_bits_equal(got, expected, inputs, what):
    differ = np.flatnonzero(got != expected)
    if differ.size:
        i = differ[0]
        raise AssertionError(f"{what}: {differ.size} of {got.size} differ; first input {inputs[i]!r}: "
                             f"got {int(got[i]):#x}, expected {int(expected[i]):#x}")


def test_bf16_decoding_equals_ml_dtypes_for_every_code():
    codes = np.arange(2**16, dtype=np.uint16)
    got = _run_map(_map_kernel(codecs.bf16_to_float32), codes, np.zeros(codes.size, np.float32))
    expected = codes.view(ml_dtypes.bfloat16).astype(np.float32)
    _assert_bits_equal(got.view(np.uint32), expected.view(np.uint32), codes, "bfloat16 -> float32")


@pytest.mark.parametrize("name", dtypes.FP8_DTYPES)
def test_fp8_decoding_equals_ml_dtypes_for_every_code(name):
    """All 256 codes bit for bit: subnormals, both zeros, max, inf (e5m2) and NaN (sign kept, quiet)."""
    codes = np.arange(256, dtype=np.uint8)
    got = _run_map(_map_kernel(codecs.DECODE[name]), codes, np.zeros(256, np.float32))
    expected = codes.view(name).astype(np.float32)
    _assert_bits_equal(got.view(np.uint32), expected.view(np.uint32), codes, f"{name} -> float32")


def _float32_neighbours(values):
    """values and the next float32 up and down from each (one ulp off a tie on either side)."""
    with np.errstate(over="ignore"):  # what exceeds float32 is inf, one more trap
        v = np.asarray(values, np.float32)
    return np.concatenate([v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))])


def _rounding_traps(grid_values, limit, rng, random_count):
    """Every representable value of a format, every midpoint between neighbours (the ties), a float32
    ulp either side of each, both signs; values past the max, inf, NaN of both signs, float32
    denormals; and random float32 bit patterns."""
    finite = np.unique(np.abs(grid_values[np.isfinite(grid_values)]).astype(np.float64))
    midpoints = (finite[:-1] + finite[1:]) / 2          # exact in float32: formats of <= 8 significant bits
    beyond = [limit * 1.0001, limit * 1.5, limit * 2, 3.0e38, np.inf, finite[-1] + (finite[-1] - finite[-2]) / 2]
    tiny = [finite[1] / 2, finite[1] / 4, finite[1] * 0.75, 1e-40, 1e-45, 0.0]  # half the smallest subnormal: a tie to 0
    magnitudes = _float32_neighbours(np.concatenate([finite, midpoints, beyond, tiny]))
    values = np.concatenate([magnitudes, -magnitudes, np.array([np.nan, -np.nan], np.float32)])
    random_bits = rng.integers(0, 2**32, size=random_count, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([values.astype(np.float32), random_bits])


def test_bf16_encoding_rounds_to_nearest_even_like_ml_dtypes():
    rng = np.random.default_rng(16)
    grid = np.arange(2**16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    picks = rng.choice(grid[np.isfinite(grid) & (grid > 0)], size=1500, replace=False)
    values = _rounding_traps(np.concatenate([picks, [grid[1], grid[2], np.float32(3.3895314e38)]]),
                             3.3895314e38, rng, 2000)
    got = _run_map(_map_kernel(codecs.float32_to_bf16), values, np.zeros(values.size, np.uint16))
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    _assert_bits_equal(got, expected, values, "float32 -> bfloat16")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # x / scale past float32: inf, saturated
@pytest.mark.parametrize("name", dtypes.FP8_DTYPES)
def test_fp8_encoding_equals_quantize_fp8_on_every_tie_and_trap(name):
    """codecs.ENCODE_FP8 is sandbox.problem.dtypes.quantize_fp8 (the write_cache contract) bit for bit: every
    fp8 value, every midpoint (ties to even), one float32 ulp either side, subnormals, saturation
    past the max and at inf, NaN with its sign, float32 denormals, random bit patterns; at scale 1
    (where the ties are exact) and at scales that are not powers of two."""
    rng = np.random.default_rng(len(name))
    grid = np.arange(256, dtype=np.uint8).view(name).astype(np.float32)
    values = _rounding_traps(grid, dtypes.FP8_MAX_FINITE[name], rng, 3000)
    kernel = _scaled_map_kernel(codecs.ENCODE_FP8[name])
    for scale in (1.0, 0.37, 1 / dtypes.FP8_MAX_FINITE[name]):
        got = _run_map(kernel, values, np.float32(scale), np.zeros(values.size, np.uint8))
        with np.errstate(over="ignore", invalid="ignore"):
            expected = dtypes.quantize_fp8(values, name, scale).view(np.uint8)
        _assert_bits_equal(got, expected, values, f"float32 -> {name} at scale {scale}")


def test_compile_report_precision_arguments():
    assert reports.report_dtypes("bfloat16") == ("bfloat16", "bfloat16")
    assert reports.report_dtypes("float16:e4m3") == ("float16", "float8_e4m3fn")
    assert reports.report_dtypes("bf16", kv_dtype="float8_e5m2") == ("bfloat16", "float8_e5m2")
    with pytest.raises(ValueError, match="the cache must have the query's dtype"):
        reports.report_dtypes("float16:bfloat16")
    with pytest.raises(ValueError, match="give the cache dtype once"):
        reports.report_dtypes("float16:e4m3", kv_dtype="e5m2")


# ---------------------------------------------------------------------------------------------
# Sliding windows: blocks wholly before the window are freed (-1 in the table, NaN in the cache)
# and must be neither looked up nor read.
class _RecordingArray:
    """A stand-in for a simulated device array that records every index read (simulator only: a
    kernel argument that is not an array reaches the kernel as is)."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape
        self.reads = []

    def __getitem__(self, index):
        self.reads.append(index)
        return self.array[index]


def _attention_launch(prepared):
    """The launch whose kernel reads the block table and the cache (split: the partition kernel)."""
    return getattr(prepared, "partition", prepared)


@pytest.mark.skipif(not numba_simulated(), reason="records reads through the simulator")
@pytest.mark.parametrize("name", NUMBA)
def test_window_never_touches_the_blocks_before_it(name):
    """Windows starting at k*bs, k*bs + 1 and mid-block, with the freed blocks at -1 and NaN: the
    output matches, and every table lookup and K/V load is inside a sequence's window."""
    from kernels.numba_cuda import split
    from sandbox.variant import runner

    problem = DecodeProblem.random(31, num_seqs=4, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4,
                                   context_lens=[37, 30, 23, 9], window_left=12, dtype="bfloat16", kv_dtype="e4m3",
                                   alibi_slopes="paper", share_prefix=False)
    require(name, problem)
    first = problem.first_read_tokens()
    assert first.tolist() == [24, 17, 10, 0]  # k*bs, k*bs + 1, mid-block, no block before the window
    for s in range(problem.num_seqs):
        assert (problem.block_tables[s, : int(first[s]) // 4] == -1).all()
    if name == "numba.split":  # partitions of 8 tokens from each window's start: 13 tokens -> 2
        prepared = split.prepare(problem, "cpu", partition_size=8)
        assert prepared.num_partitions == 2
    else:
        prepared, _ = runner.prepare(name, problem, "cpu")
    launch = _attention_launch(prepared)
    q, k, v, tables = launch.args[:4]
    recorders = [_RecordingArray(a.copy_to_host()) for a in (k, v, tables)]
    launch.args = (q, *recorders) + launch.args[4:]
    prepared.launch()
    assert_close(prepared.result(), _expected(problem), problem.dtype, f"{name} on {problem}")

    k_reads, v_reads, table_reads = (r.reads for r in recorders)
    bs = problem.block_size
    looked_up = {(int(s), int(c)) for s, c in table_reads}
    allowed = {(s, c) for s in range(problem.num_seqs)
               for c in range(int(first[s]) // bs, -(-int(problem.context_lens[s]) // bs))}
    assert looked_up <= allowed, f"{name} looked up table entries before a window: {sorted(looked_up - allowed)}"
    readable = {(int(problem.block_tables[s, t // bs]), t % bs) for s in range(problem.num_seqs)
                for t in range(int(first[s]), int(problem.context_lens[s]))}
    for what, reads in (("key_cache", k_reads), ("value_cache", v_reads)):
        slots = {(int(i[0]), int(i[1])) for i in reads}
        assert slots and slots <= readable, f"{name} read {what} slots outside every window: {sorted(slots - readable)[:5]}"


def test_split_refuses_more_partitions_than_the_grid_takes_before_launch(monkeypatch):
    """Partition count is grid z (<= 65535): 65536 one-token partitions are refused before any kernel
    runs; with a window, partitions count from its start, so the same context fits."""
    from kernels.numba_cuda import split

    monkeypatch.setattr(split, "default_partition_size", lambda block_size: block_size)
    problem = DecodeProblem.random(2, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=32, block_size=1,
                                   context_lens=[65536], nan_fill=False, spare_blocks=1)

    def never(*args, **kwargs):
        raise AssertionError("a kernel was launched")

    monkeypatch.setattr(launch.Launch, "launch", never)
    with pytest.raises(Unsupported, match=r"kernel 'numba.split partition': grid.z = 65536 exceeds CUDA's limit of 65535"):
        run_problem("numba.split", problem)
    windowed = DecodeProblem.random(2, num_seqs=1, num_heads=1, num_kv_heads=1, head_dim=32, block_size=1,
                                    context_lens=[65536], nan_fill=False, spare_blocks=1, window_left=99)
    assert split.prepare(windowed, registry.family("numba").resolve("auto")).num_partitions == 100


# ---------------------------------------------------------------------------------------------
# Each option, and the precisions, on small problems per variant (reference.paged_attention with
# the problem's options is the truth).
OPTION_CASES = {
    "kv_scale_fp32": dict(dtype="float32", k_scale=0.25, v_scale=3.0),
    "fp8_e4m3_default_scales": dict(dtype="float16", kv_dtype="e4m3"),
    "fp8_e5m2_bf16_query": dict(dtype="bfloat16", kv_dtype="e5m2", k_scale=1 / 20000, v_scale=1 / 50000),
    "softcap_extreme_logits": dict(dtype="float32", logits_soft_cap=4.0, extreme_logits=True),
    "alibi_paper_bf16": dict(dtype="bfloat16", alibi_slopes="paper"),
    "window_and_alibi_random": dict(dtype="float16", window_left=9, alibi_slopes="random", block_size=4),
    "everything_bf16_e4m3": dict(dtype="bfloat16", kv_dtype="e4m3", window_left=20, logits_soft_cap=8.0,
                                 alibi_slopes="random", k_scale=1 / 300, v_scale=1 / 100, extreme_logits=True),
}


@pytest.mark.parametrize("name", NUMBA)
@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_each_option_matches_the_reference(name, case):
    shape = dict(num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=8, max_context_len=45)
    shape.update(OPTION_CASES[case])
    problem = DecodeProblem.random(50 + len(case), **shape)
    require(name, problem)
    _check(name, problem)


def test_options_off_builds_the_plain_kernel():
    """Soft-cap and ALiBi are compiled in only when a problem uses them: a plain problem and one
    with only scales and a window share the plain kernel."""
    from kernels.numba_cuda import naive

    plain = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=8)
    scaled = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=8,
                                  k_scale=2.0, window_left=3)
    capped = DecodeProblem.random(1, num_seqs=1, num_heads=2, num_kv_heads=1, head_dim=32, max_context_len=8,
                                  logits_soft_cap=5.0)
    assert options.kernel_key(plain) == options.kernel_key(scaled) == ("float32", "float32", 0)
    assert options.kernel_key(capped) == ("float32", "float32", options.OPT_SOFTCAP)
    assert naive.kernel_for(*options.kernel_key(plain)) is not naive.kernel_for(*options.kernel_key(capped))


def test_numba_kernels_compile_for_bf16_queries_and_e4m3_caches_at_sm_90():
    """Every numba kernel with a bfloat16 query and output, an e4m3 cache and soft-cap, ALiBi, sinks, lse and
    per-token scales compiled in (and the writer bf16 -> e4m3), compile_ptx + nvJitLink in a real-mode child:
    no float64, no spills, no generic LD/ST in the machine code, shuffles in block/split."""
    from sandbox.devices.other_mode import call_in_numba_mode

    every = options.OPT_SOFTCAP | options.OPT_ALIBI | options.OPT_SINKS | options.OPT_LSE | options.OPT_KV_SCALES
    names = [n for n in REPORTED if declares(n, "bfloat16", 16, 128, "float8_e4m3fn")] + registry.cache_writers("numba")
    by_name = call_in_numba_mode(False, "kernels.numba_cuda.reports:compile_reports", names, 16, 128,
                                 "bfloat16", "sm_90", "float8_e4m3fn", every)
    assert list(by_name) == names
    rows = []
    for name, report in by_name.items():
        for kernel in report["kernels"]:
            assert 0 < kernel["registers"] <= 255, (name, kernel)
            assert kernel["fp64_instructions"] == 0, (name, kernel)
            assert kernel["spill_stores"] == 0 and kernel["spill_loads"] == 0, (name, kernel)
        rows.append(dict(variant=name, block_size=16, head_dim=128, dtype="bfloat16:float8_e4m3fn", arch="sm_90",
                         images=resources._take_images(report)))
    census = {(r["variant"], r["kernel"]): r for r in sass.census_rows(rows)}
    for key, counts in census.items():
        assert counts["fp64"] == 0 and counts["generic"] == 0 and counts["instructions"] > 0, (key, counts)
    assert census[("numba.block", "block")]["shuffles"] > 0 and census[("numba.split", "partition")]["shuffles"] > 0


def test_numba_nvfp4_and_per_token_writer_kernels_compile_at_sm_90():
    """numba.multi with sinks and lse beside an NVFP4 cache, and the writer's per-token and NVFP4 kernels,
    compiled (compile_ptx + nvJitLink, real-mode child): no float64, no spills."""
    from sandbox.devices.other_mode import call_in_numba_mode

    reports_by_name = {"numba.multi nvfp4": call_in_numba_mode(
        False, "kernels.numba_cuda.reports:compile_reports", ["numba.multi"], 61, 128, "bfloat16", "sm_90", "nvfp4",
        options.OPT_SINKS | options.OPT_LSE)["numba.multi"]}
    for kv, per_token in (("float8_e4m3fn", True), ("nvfp4", False)):
        reports_by_name[f"numba.write_cache {kv}"] = call_in_numba_mode(
            False, "kernels.numba_cuda.write_cache:compile_report", 16, 128, "bfloat16", "sm_90", kv, per_token=per_token)
    for name, report in reports_by_name.items():
        for kernel in report["kernels"]:
            assert 0 < kernel["registers"] <= 255, (name, kernel)
            assert kernel["fp64_instructions"] == 0, (name, kernel)
            assert kernel["spill_stores"] == 0 and kernel["spill_loads"] == 0, (name, kernel)
