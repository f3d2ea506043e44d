"""Traffic facts of the Numba variants under the simulator's capture (numba_sim), at small problems.

numba.gqa reads each K/V sector once per KV head (distinct K and V sectors = the ideal K/V bytes / 32;
its V loads are coalesced, its K loads one sector per lane); numba.naive requests K/V once per query
head; numba.block's simulator-only reductions are marked; blocks counted once for identical-work
blocks give exactly the counts of simulating them all.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from sandbox.devices import backends

pytestmark = pytest.mark.skipif(not backends.numba_simulated(), reason="needs the Numba CUDA simulator (no GPU)")

from sandbox.analysis.traffic import count, numba_sample, numba_sim  # noqa: E402
from sandbox.problem.decode import DecodeProblem  # noqa: E402
from sandbox.variant import registry  # noqa: E402


def small_problem(**kwargs) -> DecodeProblem:
    args = dict(num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=8, context_lens=[20, 33],
                dtype="float16")
    return DecodeProblem.random(3, **dict(args, **kwargs))


def capture(name, problem, gpu_threads=False, prepare=None, **options):
    """The RawLaunch list of one call of variant `name` (prepared with `prepare` keyword arguments)."""
    with numba_sim.capture(**options) as launches:
        sizes = numba_sim.gpu_thread_counts() if gpu_threads else contextlib.nullcontext()
        with sizes:
            launch = registry.get(name).module.prepare(problem, "cpu", **(prepare or {}))
        launch.launch()
    return launches


def site_sum(launch, target, op="load", field="sectors"):
    ids = [i for i, s in enumerate(launch.sites) if s.target == target and s.op == op]
    return int(launch.site_block[np.isin(launch.site_block["site"], ids)][field].sum())


def distinct_sectors(launch, target) -> int:
    base, nbytes = launch.arrays[target]
    s = launch.sectors["sector"]
    return len(np.unique(s[(s >= base // 32) & (s < -(-(base + nbytes) // 32))]))


def ideal_kv_bytes(p) -> int:
    """K (or V) bytes of every token read, once per KV head."""
    tokens = int((p.context_lens.astype(np.int64) - p.first_read_tokens()).sum())
    return tokens * p.num_kv_heads * p.head_dim * p.key_cache.dtype.itemsize


def test_gqa_reads_each_kv_sector_once_per_kv_head():
    """Distinct K and V sectors are the ideal bytes / 32. V is read coalesced (one request covers a row's
    slice: its summed sectors are the ideal too); K is read one token per lane, so a request touches
    one sector per lane and each sector is requested once per 2-byte element in it (16x)."""
    p = small_problem()
    (launch,) = capture("numba.gqa", p, gpu_threads=True)
    ideal = ideal_kv_bytes(p) // 32
    assert distinct_sectors(launch, "key_cache") == distinct_sectors(launch, "value_cache") == ideal
    assert site_sum(launch, "value_cache") == ideal
    assert site_sum(launch, "key_cache") == site_sum(launch, "key_cache", field="lanes") == 16 * ideal
    assert site_sum(launch, "key_cache", field="bytes") == ideal_kv_bytes(p)
    reads = launch.sectors[launch.sectors["read"]]
    assert count([launch]).metrics["dram__bytes_read.sum"] == 32 * len(np.unique(reads["sector"]))
    assert launch.block == (64, 1, 1) and not any("SIM_MAX_THREADS" in n for n in launch.notes)


def test_naive_requests_kv_once_per_query_head():
    """One thread per (sequence, head), all in one warp: K bytes requested = group x ideal; a request
    is the k-th K load of every lane still running (max tokens x head_dim of them), and touches one
    sector per distinct (sequence, KV head) among its lanes."""
    p = small_problem()
    (launch,) = capture("numba.naive", p)
    group = p.num_heads // p.num_kv_heads
    width = p.key_cache.dtype.itemsize
    for cache in ("key_cache", "value_cache"):
        assert site_sum(launch, cache, field="bytes") == group * ideal_kv_bytes(p)
        assert site_sum(launch, cache, field="requests") == int(p.context_lens.max()) * p.head_dim
        assert site_sum(launch, cache) == ideal_kv_bytes(p) // width
        assert distinct_sectors(launch, cache) == ideal_kv_bytes(p) // 32
    assert any("cuda.local.array at kernels/numba_cuda/naive.py" in n for n in launch.notes)


def test_block_marks_the_simulator_only_reductions():
    """block_max / block_sum reduce through shared memory under the simulator: their sites (in
    reductions.py) are marked, the note says what a GPU does instead, and no other site is marked."""
    (launch,) = capture("numba.block", small_problem())
    marked = [s for s in launch.sites if s.simulator_only]
    assert marked and all(s.file == "kernels/numba_cuda/reductions.py" and s.space == "shared" for s in marked)
    assert all(not s.file.endswith("reductions.py") for s in launch.sites if not s.simulator_only)
    assert any("simulator-only path" in n and "shfl_xor_sync" in n for n in launch.notes)
    gpu = numba_sim.without_simulator_only(launch)
    kept = {gpu.sites[i] for i in np.unique(gpu.site_block["site"])}
    assert kept == {s for s in launch.sites if not s.simulator_only}
    assert site_sum(gpu, "key_cache") == site_sum(launch, "key_cache") and len(gpu.sectors) == len(launch.sectors)
    assert site_sum(gpu, "scratch", "load", "requests") == 0 < site_sum(launch, "scratch", "load", "requests")


@pytest.mark.parametrize("name", ["numba.gqa", "numba.split"])
def test_counting_one_block_per_kind_gives_the_counts_of_all(name):
    """Three sequences of 64 tokens and one of 40: represented blocks get exactly the rows a full
    simulation gives them (split: partitions of 32 tokens, so the grid's z is a partition too)."""
    p = DecodeProblem.random(5, num_seqs=4, num_heads=2, num_kv_heads=1, head_dim=32, block_size=8,
                             context_lens=[64, 64, 40, 64], dtype="float16", share_prefix=False)
    prepare = {"numba.split": dict(partition_size=32), "numba.gqa": {}}[name]
    full = capture(name, p, prepare=prepare)
    sampled = capture(name, p, prepare=prepare, represent=numba_sample.decode_representatives(p))
    assert len(full) == len(sampled) and full[0].grid[2] == (2 if name == "numba.split" else 1)
    for a, b in zip(full, sampled):
        assert a.sites == b.sites
        np.testing.assert_array_equal(a.site_block, b.site_block)
    first = sampled[0]
    rep = first.represented_by
    assert rep is not None and rep[1] == rep[3] == 0 and rep[2] == 2
    assert any("blocks counted once and scaled" in n for n in first.notes)
    assert set(first.sectors["block"]) == set(np.flatnonzero(rep == np.arange(len(rep))))


def test_representatives_refuse_what_they_cannot_show_exact():
    """A table row of 3 int32 (12 B) puts each sequence's row at a different offset within a sector:
    the KV heads of a sequence are grouped, the sequences are not. head_dim 24 in fp8 makes K/V rows
    24 B: nothing is grouped. Kernels whose blockIdx.x is not the sequence are never grouped."""
    represent = numba_sample.decode_representatives(small_problem(context_lens=[20, 20], share_prefix=False))
    assert represent("gqa_body", (2, 2, 1), (16, 1, 1), {}).blocks.tolist() == [0, 1, 0, 1]
    odd = DecodeProblem.random(5, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=24, block_size=8,
                               context_lens=[64, 64], dtype="float16", kv_dtype="float8_e4m3fn")
    assert numba_sample.decode_representatives(odd)("gqa_body", (2, 1, 1), (16, 1, 1), {}) is None
    even = DecodeProblem.random(5, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=32, block_size=8,
                                context_lens=[64, 64], dtype="float16", share_prefix=False)
    represent = numba_sample.decode_representatives(even)
    assert represent("gqa_body", (2, 1, 1), (16, 1, 1), {}).blocks.tolist() == [0, 0]
    assert represent("naive_body", (1, 1, 1), (4, 1, 1), {}) is None
    per_head = numba_sample.decode_representatives(even, across_heads=False)
    assert per_head("block_body", (2, 2, 1), (16, 1, 1), {}).blocks.tolist() == [0, 0, 2, 2]


def test_sequences_sharing_blocks_are_kinds_of_their_own():
    """Forked prompts (two groups of two sequences): each sequence's K/V may already be in L2 when its
    block runs, so none represents another; the groups' lengths alone would pair them."""
    p = DecodeProblem.shared(4, num_groups=2, group_size=2, prefix_len=32, suffix_lens=[0, 0, 0, 0],
                             num_heads=2, num_kv_heads=1, head_dim=32, block_size=8, dtype="float16")
    assert len(set(p.context_lens.tolist())) == 1
    represent = numba_sample.decode_representatives(p)
    assert represent("gqa_body", (4, 1, 1), (16, 1, 1), {}).blocks.tolist() == [0, 1, 2, 3]


def test_estimates_count_the_blocks_that_will_be_simulated():
    """One sequence per kind and one block of its grid row for the grouped variants, everything else
    for the others: a goal-like problem (2 x 4096 tokens, 32/8 heads, d128) is minutes for numba.gqa,
    hours for numba.naive."""
    p = DecodeProblem.random(1, num_seqs=2, num_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                             context_lens=[4096, 4096], dtype="float16", share_prefix=False)
    per_seq = 2 * 32 * 128 * 4096 * numba_sample.SECONDS_PER_MULTIPLY_ADD
    assert numba_sample.estimate_seconds(p, "numba.gqa") == pytest.approx(per_seq / 8)
    assert numba_sample.estimate_seconds(p, "numba.block") == pytest.approx(per_seq / 32)
    assert numba_sample.estimate_seconds(p, "numba.naive") == pytest.approx(2 * per_seq)


def test_numba_mla_is_counted_at_a_gpus_thread_count_and_reads_what_cupy_mla_reads():
    import sandbox
    from sandbox.problem.mla import MLAProblem

    problem = MLAProblem.random(seed=4, num_seqs=2, num_heads=4, block_size=16, max_context_len=24,
                                share_prefix=False)
    numba_mla = sandbox.traffic("numba.mla", problem, census=False)
    cupy_mla = sandbox.traffic("cupy.mla", problem, census=False)
    (kernel,) = numba_mla["kernels"]
    assert tuple(kernel["block"]) == (128, 1, 1)  # not the simulator's 8 threads: whole warps, as on a GPU
    assert numba_mla["ideal_bytes"] == cupy_mla["ideal_bytes"] == problem.bytes_moved()
    # every latent row once from DRAM in both families (they differ only in the query's and table's sectors)
    read = [r["metrics"]["dram__bytes_read.sum"] for r in (numba_mla, cupy_mla)]
    assert abs(read[0] - read[1]) <= 256 and min(read) >= len(problem.read_slots()) * problem.latent_cache.shape[2]
