"""cupy.tc: cupy.multi's tiles of query rows with Q.K^T and P.V on tensor cores (nvcuda::wmma).

Idea: a tile is 16 query rows (the MMA's M), each a (query token, query head) pair of one sequence and
one KV head: the heads of the GQA group (a chunk of 16 when the group is larger) x consecutive query
tokens. K and V rows of a chunk of tokens are staged in shared memory in the query's 16-bit type (fp8
caches dequantized there: every e4m3/e5m2 value is exact in fp16 and bf16); S = Q.K^T and O += P.V are
m16n16k16 MMAs with float accumulators; the online softmax (scale, soft-cap, ALiBi, causal and window
masks) runs in float on S in shared memory and splits P into two 16-bit parts (P_hi + P_lo, one MMA each). Work list, split-KV
partitions (512 tokens) and the exact log-sum-exp merge are cupy.multi's (multi.py, multi.cuh), and so is the
finish of a row (mq::row_factor): a sink joins the denominator once, in the tile kernel for a row with one
partial result, else in the merge, which also gives the lse. Per-token fp8 scales leave the staged K and V
exact: K's multiplies S, V's the probability (relative to the partition's largest V scale, which multiplies
the output).
Limits: block sizes 1..256 (powers of two), head dims 32..256 (multiples of 16), float16/bfloat16
queries (float32 has no 16-bit MMA input: not declared), caches of the query's dtype or fp8
e4m3fn/e5m2 (per tensor or per token and KV head), options window, softcap, alibi, kv_scale, sinks, lse,
kv_scales (common.SUPPORT's: every option of the other CUDA C variants; NVFP4 caches are not declared), any
query length.
Template: paged_attention_tc<HEAD_DIM, T, C = T, OPTS = 0> in tc.cu; merge paged_attention_merge.
Accuracy: Q, K and V are exact in the MMA's inputs and S, O accumulate in float; P = P_hi + P_lo keeps ~22
(fp16) or 16 (bf16) bits. P rounded once to 16 bits put 48 of 6144 outputs of tests/kernels/test_tc_variants.py's
every-option problem outside compare.py's fp16 tolerance; with the pair none (docs/tensor-cores.md).
Verdict: not measured on a GPU; its modelled time at the goal shape is in docs/performance-model.md's
generated table, and docs/tensor-cores.md names the commands for the other shapes.
"""
from __future__ import annotations

from sandbox.problem.dtypes import FP8_DTYPES
from sandbox.variant import Limits

from . import common, multi

PATH = common.KERNEL_DIR / "tc.cu"
NAME = "cupy.tc"
KERNEL = "paged_attention_tc"
ROWS = 16  # query rows per tile (tc::ROWS: the MMA's M)
MMA_SHAPE = (16, 16, 16)
# Head dims up to 256: at 512 a chunk would hold 8 tokens (CHUNK * head_dim <= 4096), under the MMA's 16.
LIMITS = Limits(max_query_len=None, head_dims=tuple(d for d in common.HEAD_DIMS if d <= 256),
                dtypes=("float16", "bfloat16"), kv_dtypes=FP8_DTYPES, options=common.SUPPORT["options"])


def chunk_tokens(head_dim: int) -> int:
    """Tokens staged per step: tc::Shape<HEAD_DIM>::CHUNK (CHUNK * head_dim <= 4096, at most 64)."""
    chunk = 64
    while chunk * head_dim > 4096:
        chunk //= 2
    return chunk


assert all(d % 16 == 0 and chunk_tokens(d) % 16 == 0 for d in LIMITS.head_dims), \
    "head dims must be multiples of the MMA's K, and a chunk a whole number of 16-token blocks"


def static_shared_bytes(head_dim: int, flags: int = 0) -> int:
    """tc::tile_attention's static shared memory: q, K, V, P_hi and P_lo (16-bit), the warps' O scratch and S
    (float), row state; with per-token scales (OPT_KV_SCALES in flags) the chunk's K and V scales and the
    warps' max V scale (float)."""
    chunk = chunk_tokens(head_dim)
    ks = head_dim + 8
    scales = 4 * (2 * chunk + common.NUM_WARPS) if int(flags) & common.OPT["OPT_KV_SCALES"] else 0
    return 2 * (ROWS * ks + 2 * chunk * ks + 2 * ROWS * (chunk + 8)) + 4 * (4 * 16 * 16 + ROWS * (chunk + 4)) \
        + 4 * 10 * ROWS + scales


def layout_for(problem) -> multi.Layout:
    """16 rows per tile: min(group, 16) heads x 16 // that many query tokens."""
    group = problem.num_heads // problem.num_kv_heads
    chunk = min(group, ROWS)
    return multi.Layout(chunk, ROWS // chunk, -(-group // chunk))


def work_for(problem, partition_size: int | None = None) -> multi.WorkList:
    return multi.multi_work(problem, layout_for(problem), multi.partition_tokens(partition_size))


def mma_count(problem, work: multi.WorkList) -> int:
    """The m16n16k16 MMAs the tile kernel issues: per chunk of a block's partition and per 16-token block
    holding tokens of the range, head_dim / 16 k-steps of Q.K^T and twice as many of P.V (P_hi and P_lo, for
    each of head_dim / 16 column blocks)."""
    per_block = 0
    for _, _, kv_start, kv_end in work.tiles:
        for start in range(kv_start, kv_end, work.partition):
            end = min(start + work.partition, kv_end)
            chunk = chunk_tokens(problem.head_dim)
            for c0 in range(start, end, chunk):
                per_block += 3 * (-(-min(chunk, end - c0) // 16)) * (problem.head_dim // 16)
    return per_block * problem.num_kv_heads * work.layout.head_chunks


def kernel_name(head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
    return multi.kernel_name(head_dim, dtype, kv_dtype, flags, kernel=KERNEL)


def prepare(problem, backend: str, partition_size: int | None = None) -> multi.MultiPrepared:
    shared = (static_shared_bytes(problem.head_dim, common.option_flags(problem)),
              f"a tile of {ROWS} query rows, {chunk_tokens(problem.head_dim)}-token chunks")
    return multi.prepare_work(NAME, PATH, problem, backend, work_for(problem, partition_size), kernel=KERNEL,
                              static_shared=shared)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0) -> dict:
    """NVRTC -> cubin resources of the tile kernel (one instantiation for every block size) and, in `kernels`,
    of the merge."""
    expression = kernel_name(head_dim, dtype, kv_dtype, flags)
    merge = multi.merge_name(head_dim, dtype)
    main = common.compile_report(PATH, expression, arch, common.NUM_THREADS, 0, extra_expressions=[merge])
    second = common.compile_report(PATH, merge, arch, common.NUM_THREADS, 4 * 8, extra_expressions=[expression])
    fields = ("registers", "static_shared_bytes", "dynamic_shared_bytes", "local_bytes", "spill_stores",
              "spill_loads", "threads_per_block", "image")
    main["kernels"] = [dict(name="partition", **{f: main[f] for f in fields}),
                       dict(name="merge", **{f: second[f] for f in fields})]
    main["note"] = (f"{ROWS} query rows per tile on m16n16k16 MMAs, {chunk_tokens(head_dim)}-token chunks; block "
                    "size is a runtime value; merge shown for 8 partial results")
    return main
