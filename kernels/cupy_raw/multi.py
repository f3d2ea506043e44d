"""cupy.multi: one thread block per (tile of query tokens, KV head, partition) serving the whole GQA group.

Idea: a tile is up to 32 query rows (16 at head dim 256), each a (query token, query head) pair of one
sequence and one KV head: the tile's consecutive query tokens x the heads of the group (a chunk of 32
heads when the group is larger). The block stages chunks of K and V rows (16-byte loads, dequantized
to float) in shared memory and every row of the tile reads them there, so each K/V element is loaded
from global memory once per tile instead of once per query token and head. Online softmax over the
chunks (flash-attention style); each row masks with its own position (causal t <= p, window
t >= p - window_left) and ALiBi slope. The block size is a runtime value: every token row is found
through the table on its own (t / block_size), so one instantiation serves every block size (1..4096).
Split-KV: the tile's token range [window start of its first query token, position of its last + 1)
is cut into partitions of 512 tokens; a row with several partial results is merged by log-sum-exp
(paged_attention_merge), a row with one is written directly. Blocks wholly before the range are never
looked up or loaded (their table entries may be -1), nor tokens after the last position.
Limits: any block size (1..4096), head dims 32..512 (tiles of 8 query rows at 512), float32/float16/
bfloat16 queries, caches of the query's dtype, fp8 e4m3fn/e5m2 (per-tensor or per-token scales) or NVFP4
(8 bytes of e2m1 pairs and their e4m3 block scale per load, dequantized as staged), every option of
common.SUPPORT (sinks and lse finished where a row's partial results end: the tile kernel for one, the
merge for several), any query length (query_start) and decode. Threads per tile block: TUNABLES
(128, 64, 256; at least head_dim / 4). Output [total_q, num_heads, head_dim] in the query's dtype.
Template: paged_attention_multi<HEAD_DIM, T, C = T, OPTS = 0>: OPTS = 0 is the plain kernel.
prepare() returns a MultiPrepared: launch(), launch_parts() (tile kernel, merge when any row has
several partial results), bytes_moved() (= problem.bytes_moved()), bytes_loaded() (K/V bytes the
blocks load: the tiles' token ranges, once per KV head and head chunk).
Verdict: not measured on a GPU. Expected to pay off where several query rows share a KV head
(GQA groups, prefill/speculative query tokens); at MHA decode (one row per tile) most of the block is
idle and cupy.gqa/rows are the better choice. It is the no-sharing twin of cupy.cascade.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from sandbox.devices import backends
from sandbox.problem.dtypes import NVFP4
from sandbox.variant import Limits, Unsupported

from . import common

PATH = common.KERNEL_DIR / "multi.cu"
NAME = "cupy.multi"
LIMITS = Limits(block_sizes=None, max_query_len=None, head_dims=common.HEAD_DIMS,
                **dict(common.SUPPORT, kv_dtypes=common.SUPPORT["kv_dtypes"] + (NVFP4,)))
DEFAULT_PARTITION = 512
KERNEL = "paged_attention_multi"
# The tile kernel's threads per block, the default first (at least head_dim / 4: one float4 column each).
TUNABLES = {"threads": (128, 64, 256)}


def tile_rows(head_dim: int) -> int:
    """Query rows (token x head) per tile: mq::Shape<HEAD_DIM>::ROWS (the staged queries fit shared memory)."""
    return 32 if head_dim <= 128 else 16 if head_dim <= 256 else 8


def chunk_tokens(head_dim: int) -> int:
    """Tokens staged per step: mq::Shape<HEAD_DIM>::CHUNK (CHUNK * head_dim <= 2048 floats, at most 64)."""
    chunk = 64
    while chunk * head_dim > 2048:
        chunk //= 2
    return chunk


def static_shared_bytes(head_dim: int) -> int:
    """mq::tile_attention's static shared memory: q, K and V chunks, probabilities, per-row state."""
    rows, chunk = tile_rows(head_dim), chunk_tokens(head_dim)
    return 4 * (rows * head_dim + 2 * chunk * (head_dim + 4) + chunk * (rows + 1) + 9 * rows)


def kernel_name(head_dim: int, dtype, kv_dtype=None, flags: int = 0, kernel: str = KERNEL,
                threads: int = common.NUM_THREADS) -> str:
    return f"{kernel}<{head_dim}, {common.type_args(dtype, kv_dtype, flags, threads)}>"


def check_threads(name: str, head_dim: int, threads: int) -> None:
    """Refuse a thread count the tile kernel's mapping cannot use: a thread per float4 column of a row
    (head_dim / 4) and per staged token (mq::Shape<HEAD_DIM>::CHUNK)."""
    need = max(head_dim // 4, chunk_tokens(head_dim))
    if threads < need:
        raise Unsupported(f"{name}: threads={threads} is below the {need} threads the tile mapping needs at "
                          f"head_dim {head_dim} (one per float4 column and per staged token)")


def merge_name(head_dim: int, dtype, flags: int = 0) -> str:
    """The merge kernel (multi.cuh) for a head dim, output dtype and the problem's option bits (it takes
    their MERGE_FLAGS: sinks, lse)."""
    merge = int(flags) & common.MERGE_FLAGS
    return f"paged_attention_merge<{head_dim}, {common.ctype(dtype)}{f', {merge}' if merge else ''}>"


@dataclasses.dataclass(frozen=True)
class Layout:
    """How query rows map to tiles: head_chunk query heads (of one KV head) x tile_tokens query tokens."""
    head_chunk: int
    tile_tokens: int
    head_chunks: int  # blocks per KV head and tile

    @classmethod
    def for_problem(cls, problem) -> "Layout":
        group = problem.num_heads // problem.num_kv_heads
        rows = tile_rows(problem.head_dim)
        chunk = min(group, rows)
        return cls(chunk, rows // chunk, -(-group // chunk))


def query_rows(problem):
    """Per sequence: (first query row, positions int64 [q_s], window starts int64 [q_s])."""
    starts = np.concatenate([[0], np.cumsum(problem.query_lens)])
    window = problem.options.window_left
    out = []
    for s in range(problem.num_seqs):
        q = int(problem.query_lens[s])
        positions = int(problem.context_lens[s]) - q + np.arange(q, dtype=np.int64)
        lo = np.maximum(positions - window, 0) if window >= 0 else np.zeros(q, np.int64)
        out.append((int(starts[s]), positions, lo))
    return out


class WorkList:
    """Tiles (table row, query rows, token range) and each query row's count of partial results (slots).

    A tile whose range spans several partitions gives each of its rows one slot per partition,
    numbered from the row's slot count so far; a row with one slot in all is written directly.
    """

    def __init__(self, problem, layout: Layout, partition: int):
        self.layout = layout
        self.partition = partition
        self.slots = np.zeros(problem.query.shape[0], np.int64)
        self.tiles: list[tuple[int, int, int, int]] = []
        self.rows: list[list[tuple[int, int, int]]] = []

    def add(self, table_seq: int, rows, kv_start: int, kv_end: int) -> None:
        """A tile over tokens [kv_start, kv_end) of sequence table_seq's table; rows: (query row, position), at
        most layout.tile_tokens of them. An empty range adds nothing."""
        if kv_start >= kv_end:
            return
        rows = list(rows)
        assert 0 < len(rows) <= self.layout.tile_tokens
        parts = -(-(kv_end - kv_start) // self.partition)
        entries = []
        for qrow, position in rows:
            entries.append((int(qrow), int(position), int(self.slots[qrow])))
            self.slots[qrow] += parts
        self.tiles.append((int(table_seq), len(rows), int(kv_start), int(kv_end)))
        self.rows.append(entries)

    @property
    def max_parts(self) -> int:
        return max(-(-(end - start) // self.partition) for _, _, start, end in self.tiles)

    @property
    def max_slots(self) -> int:
        return int(self.slots.max())

    def tokens_loaded(self) -> int:
        """Token rows the tiles load, per KV head and head chunk (the sum of their ranges)."""
        return sum(end - start for _, _, start, end in self.tiles)

    def arrays(self):
        """(tiles int32 [n, 4], tile_rows int32 [n, tile_tokens, 3], row_slots int32 [total_q])."""
        if (self.slots < 1).any():
            raise AssertionError(f"query rows {np.flatnonzero(self.slots < 1).tolist()} are in no tile")
        tiles = np.asarray(self.tiles, np.int32).reshape(-1, 4)
        rows = np.full((len(self.tiles), self.layout.tile_tokens, 3), -1, np.int32)
        for i, entries in enumerate(self.rows):
            rows[i, : len(entries)] = entries
        return tiles, rows, self.slots.astype(np.int32)


def multi_work(problem, layout: Layout, partition: int, lookahead: int = 0) -> WorkList:
    """cupy.multi's tiles: tile_tokens consecutive query tokens of one sequence; range from the first one's
    window start to the last one's position + 1 (+ lookahead, clipped to the context: negative controls)."""
    work = WorkList(problem, layout, partition)
    for s, (row0, positions, lo) in enumerate(query_rows(problem)):
        for j in range(0, len(positions), layout.tile_tokens):
            pos = positions[j: j + layout.tile_tokens]
            end = min(int(pos[-1]) + 1 + lookahead, int(problem.context_lens[s]))
            work.add(s, zip(range(row0 + j, row0 + j + len(pos)), pos), int(lo[j]), end)
    return work


def kv_token_bytes(problem) -> int:
    """K and V bytes of one token (all KV heads): NVFP4's packed codes and block scales, else the elements."""
    if problem.kv_format == NVFP4:
        return 2 * problem.num_kv_heads * (problem.head_dim // 2 + problem.head_dim // 16)
    return 2 * problem.num_kv_heads * problem.head_dim * problem.kv_dtype.itemsize


class MultiPrepared(common.Prepared):
    """The tile kernel, then (when a row has several partial results) the merge."""

    def __init__(self, launches, out, keep, out_dtype, problem, work: WorkList, lse=None):
        super().__init__(launches, out, keep=keep, out_dtype=out_dtype, lse=lse)
        self.problem = problem
        self.work = work

    def launch_parts(self):
        names = ("partition", "merge")
        return [(names[i], (lambda launch=launch: launch[0](launch[1], launch[2], launch[3], shared_mem=launch[4])))
                for i, launch in enumerate(self.launches)]

    def bytes_moved(self) -> int:
        """What the step needs (problem.bytes_moved(): K/V of the tokens read, once each)."""
        return self.problem.bytes_moved()

    def bytes_loaded(self) -> int:
        """K/V bytes the thread blocks load: each tile's token range once per KV head and head chunk."""
        p = self.problem
        return self.work.tokens_loaded() * self.work.layout.head_chunks * kv_token_bytes(p)


def prepare_work(name: str, path, problem, backend: str, work: WorkList, kernel: str = KERNEL,
                 prepared_class=MultiPrepared, threads: int = common.NUM_THREADS, static_shared=None,
                 **extra) -> MultiPrepared:
    """Compile and build the launches of `work` (a WorkList) on the tile kernel `kernel` of `path`, with
    `threads` threads per tile block (the merge: 128).

    static_shared: (bytes, what) of that kernel's static shared memory (default: paged_attention_multi's)."""
    p = problem
    layout = work.layout
    flags = common.option_flags(p)
    check_threads(name, p.head_dim, threads)
    expression = kernel_name(p.head_dim, p.dtype, p.kv_dtype, flags, kernel=kernel, threads=threads)
    merge = merge_name(p.head_dim, p.dtype, flags)
    shared, what = static_shared or (static_shared_bytes(p.head_dim), f"a tile of {tile_rows(p.head_dim)} query rows")
    common.check_shared(name, 0, shared, what)
    tile_kernel = common.get_function(backend, path, expression, [expression, merge])
    merge_kernel = common.get_function(backend, path, merge, [expression, merge])

    tiles, rows, slots = work.arrays()
    max_slots = work.max_slots
    stats = (p.query.shape[0], p.num_heads, max_slots) if max_slots > 1 else (1,)
    scratch = tuple(backends_full(shape, backend) for shape in (stats + ((p.head_dim,) if max_slots > 1 else ()),
                                                                 stats, stats))
    query, key_cache, value_cache, block_tables, _ = common.upload_problem(p, backend)
    tiles_d, rows_d, slots_d = (common.to_device(a, backend) for a in (tiles, rows, slots))
    out = common.output_like(p, backend)
    options = common.option_args(p, backend)
    lse = common.lse_output(p, backend)
    args = (out, *scratch, query, key_cache, value_cache, block_tables, np.int32(p.max_blocks_per_seq), tiles_d,
            rows_d, slots_d, np.int32(layout.tile_tokens), np.int32(p.num_heads), np.int32(p.num_kv_heads),
            np.int32(layout.head_chunk), np.int32(p.block_size), common.kernel_scale(p),
            np.int32(work.partition), np.int32(max_slots), lse, *options)
    grid = (len(work.tiles), p.num_kv_heads * layout.head_chunks, work.max_parts)
    launches = [(tile_kernel, grid, (threads,), args, 0)]
    if max_slots > 1:
        common.check_shared(name, 4 * max_slots, 0, f"the merge of {max_slots} partial results")
        merge_args = (out, *scratch, slots_d, np.int32(p.num_heads), np.int32(max_slots), lse, *options)
        launches.append((merge_kernel, (p.query.shape[0], p.num_heads), (common.NUM_THREADS,), merge_args,
                         4 * max_slots))
    keep = (query, key_cache, value_cache, block_tables, tiles_d, rows_d, slots_d, *options, *scratch)
    return prepared_class(launches, out, keep, p.dtype, p, work, lse=lse if p.options.return_lse else None, **extra)


def backends_full(shape, backend):
    """A float32 scratch array filled with NaN: a slot the merge reads without a tile having written it
    poisons the output."""
    return backends.to_device(np.full(shape, np.nan, np.float32), backend)


def partition_tokens(partition_size: int | None) -> int:
    size = DEFAULT_PARTITION if partition_size is None else int(partition_size)
    if size < 1:
        raise ValueError(f"partition_size must be >= 1, got {size}")
    return size


def prepare(problem, backend: str, partition_size: int | None = None, *,
            threads: int = common.NUM_THREADS) -> MultiPrepared:
    layout = Layout.for_problem(problem)
    work = multi_work(problem, layout, partition_tokens(partition_size))
    return prepare_work(NAME, PATH, problem, backend, work, threads=threads)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0,
                   threads: int = common.NUM_THREADS) -> dict:
    """NVRTC -> cubin resources of the tile kernel with `threads` threads (one instantiation for every block
    size: it is a runtime value) and, in `kernels`, of the merge."""
    check_threads(NAME, head_dim, threads)
    expression = kernel_name(head_dim, dtype, kv_dtype, flags, threads=threads)
    merge = merge_name(head_dim, dtype, flags)
    main = common.compile_report(PATH, expression, arch, threads, 0, extra_expressions=[merge])
    second = common.compile_report(PATH, merge, arch, common.NUM_THREADS, 4 * 8, extra_expressions=[expression])
    fields = ("registers", "static_shared_bytes", "dynamic_shared_bytes", "local_bytes", "spill_stores",
              "spill_loads", "threads_per_block", "image")
    main["kernels"] = [dict(name="partition", **{f: main[f] for f in fields}),
                       dict(name="merge", **{f: second[f] for f in fields})]
    main["note"] = (f"{tile_rows(head_dim)} query rows per tile, {chunk_tokens(head_dim)}-token chunks; block size "
                    "is a runtime value; merge shown for 8 partial results")
    return main
