"""numba.multi: one thread block per (sequence, KV head, tile of query tokens) serving the whole GQA group.

For several query tokens per sequence (chunked prefill, speculative decoding, mixed batches) and decode.

Idea (one, over numba.gqa): the block's rows are (query token, query head) pairs - a tile of up to
`tile_tokens` query tokens of one sequence times the group of query heads of one KV head - so a K
row and a V row are loaded from global memory (and dequantized) once per tile, not once per query
token and head. The tile's causal span is walked in chunks: each chunk of K is staged in shared
memory (float32), every row's logits are computed from it, the per-row online softmax (running max
and sum, float32) is updated, the chunk of V replaces K in the same shared buffer, and the rows'
accumulators absorb it. Query token j of sequence s (q_s tokens, context L_s) sits at position
p = L_s - q_s + j: its row masks tokens t > p (causal) and, with a window, t < p - window_left.
The walk runs from the window's start of the tile's first query token to the tile's last position:
blocks wholly before it are never looked up (their table entries may be -1) nor read.
A decode problem (no query_start) is q_s = 1 for every sequence: tiles of one token, rows = group.

Layout of a block (dynamic shared float32, `rows` = tile_tokens * group padded to the register tile):
    q    [rows, head_dim]      the tile's queries, times scale * k_scale
    acc  [rows, head_dim]      output accumulators
    p    [rows, chunk]         logits, then softmax weights of the chunk
    kv   [chunk, head_dim + 1] the chunk's K, then its V (rows padded by one float: no bank conflicts
                               when threads of phase A read different tokens at the same d)
    max, sum, correction [rows]
Per chunk four barriers: stage K | logits (each thread one token, rows in register tiles of
`tile` = min(8, next pow2 of rows), the tile a compile-time constant) | per-row softmax update (one
thread per row, serial over the chunk: no cross-thread reduction, so no shuffles, the same code
simulated and compiled) and stage V | rescale and accumulate (each thread one (dim, row tile)).
Tiles are scheduled by a host-made table (prepare, untimed): block x serves tiles[x] = (sequence,
first query row, query tokens in the tile, the sequence's end row); block y is the KV head.

Limits: any block size 1..4096 (runtime); head dims 32..512 (device.HEAD_DIMS); queries float32,
float16, bfloat16, caches of the query's dtype, fp8 (e4m3fn, e5m2, per tensor or per token and KV
head) or NVFP4, math in float32; the options window, softcap, alibi, kv_scale, sinks, lse, kv_scales;
any query length (query_start), decode included; any context length. Caches are dequantized once, when
a chunk is staged (stage_rows): fp8 codes times the slot's per-token scale, NVFP4 bytes as two e2m1
values times their group's e4m3 block scale (k_scale stays folded into the softmax scale, v_scale in
the output), so the rest of the kernel never sees the format. Shared memory is kept within 48 KB by halving the chunk (to 8), then the tile's
query tokens (to 1), then the chunk (to 1); a group that still does not fit (e.g. 32 query heads
per KV head at head_dim 256) is refused by prepare() before launch (Unsupported).
Precisions and options as numba.gqa (codecs.py, options.py): one kernel per (register tile, query
dtype, cache format, option flags); the sink joins each row's final denominator (options.finish).
Tile size: tile_tokens = TARGET_ROWS (16) // group query tokens (at least 1, at most the longest
query rounded up to a power of two), so decode runs tiles of one token.
Debugging: prepare(..., count_loads=True) builds the kernel with a global-load counter
(load_counts(launch): int32 [2, num_blocks, block_size, num_kv_heads, head_dim], K then V); the
tests check that every K/V element is loaded exactly once per tile whose span holds it, never
outside one.
Verdict: matches the reference on every problem the suites draw (simulator only; never run on a
GPU). Compiled for sm_90 (fp16, group 4, 4 query tokens per tile, chunk 32): 168 registers, no
spills nor local memory, 35 KB dynamic shared, so 18.8% theoretical occupancy (register-limited; K and
V staged by one device function, stage_rows: two separate stagings take 181 registers and 12.5%; 32-bit
indices or launch bounds are untried). Design-level
expectation, not a measurement: K/V bytes per query token drop by the tile's rows (16) against one
block per query token and head; the causal walk stops at the tile's last position, so masking
wastes at most the tile's own diagonal (plus, with a window, the tokens before later rows' windows).
Under the simulator the work is that of the reference (rows x visible tokens x head_dim, twice), at
about 1 us per multiply-add: the shared suite's largest draws (62 query tokens x 16 heads x 225
tokens at head_dim 128) take ~45 s of CPU.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32

from sandbox.problem.dtypes import FP8_DTYPES, NVFP4
from sandbox.variant import Unsupported

from . import codecs, device, launch, options, reports
from .device import NEG_INF, ZERO

LIMITS = device.limits(kv_dtypes=FP8_DTYPES + (NVFP4,), max_query_len=None)
TUNABLES = {"threads": launch.THREADS}  # "auto" or threads per block (launch.launch_threads)
NAME = "numba.multi"
ROW_TILE = 8       # rows (query token, head) whose dot products / accumulators a thread keeps in registers
TARGET_ROWS = 16   # rows per block the tile of query tokens aims at (tile_tokens = TARGET_ROWS // group)
MIN_CHUNK = 8      # the chunk is halved to this before the tile of query tokens shrinks
SHARED_LIMIT = 48 * 1024  # dynamic shared bytes a block gets without an opt-in
K_LOADS, V_LOADS = 0, 1   # first index of the load counter


def make_body(tile: int, dtype: str = "float32", kv_dtype: str = "float32", flags: int = 0,
              count_loads: bool = False, causal_slip: int = 0):
    """The kernel body with `tile` (rows per register tile), the dtypes, soft-cap/ALiBi, the load
    counter and `causal_slip` fixed at compile time. causal_slip = 0 is the causal mask (t <= p);
    the negative control kernels/wrong/numba_causal_off_by_one.py builds it with 1 (t <= p + 1)."""
    nvfp4 = kv_dtype == NVFP4
    load_q = codecs.DECODE[dtype]
    load_kv = codecs.e2m1_to_float32 if nvfp4 else codecs.DECODE[kv_dtype]
    load_block_scale = codecs.e4m3_to_float32
    store = codecs.ENCODE[dtype]
    # The per-element conversions of native (float32/float16) elements are written out here rather than
    # called: the compiled kernel inlines either way, but under the simulator a call per element is a Python
    # call per element, most of a simulated launch. stage_rows (once per chunk and thread) is a function, and
    # so is the score hook (options.score_hook), called only when a score modifier is in use.
    scored, score = options.score_hook(flags)
    native_q = dtype in ("float32", "float16")
    native_kv = kv_dtype in ("float32", "float16")
    per_token = bool(flags & options.OPT_KV_SCALES)
    use_sink = bool(flags & options.OPT_SINKS)
    use_lse = bool(flags & options.OPT_LSE)

    @cuda.jit(device=True, inline="always")
    def stage_rows(cache, counter, block_tables, seq, kv_head, chunk_start, n, my_slice, slices, lane, lanes,
                   sh, kv_at, stride, counts, token_scales, block_scales):
        """Tokens chunk_start + i (i < n) of K or V as float32 into sh[kv_at + i * stride + d]: this thread
        takes tokens my_slice, my_slice + slices, ... and elements lane, lane + lanes, ... of each row (counter:
        K_LOADS or V_LOADS, the load counter's first index when counting loads). A row element is a value, or
        with NVFP4 a byte of two e2m1 codes (dims 2b, 2b + 1) times its group's e4m3 block scale (block_scales:
        flattened [slot, KV head, head_dim // 16]); with per-token scales each value times token_scales[slot,
        KV head] (flattened)."""
        num_blocks, block_size, num_kv_heads, row = cache.shape  # row: head_dim, or head_dim // 2 bytes (NVFP4)
        for i in range(my_slice, n, slices):
            t = chunk_start + i
            physical = block_tables[seq, t // block_size]
            offset = t % block_size
            slot = (physical * block_size + offset) * num_kv_heads + kv_head
            token_scale = token_scales[slot] if per_token else float32(1.0)
            for d in range(lane, row, lanes):
                element = cache[physical, offset, kv_head, d]
                if nvfp4:
                    group_scale = load_block_scale(block_scales[slot * (row // 8) + d // 8])
                    sh[kv_at + i * stride + 2 * d] = load_kv(element) * group_scale
                    sh[kv_at + i * stride + 2 * d + 1] = load_kv(element >> 4) * group_scale
                elif per_token:
                    sh[kv_at + i * stride + d] = (float32(element) if native_kv else load_kv(element)) * token_scale
                else:
                    sh[kv_at + i * stride + d] = float32(element) if native_kv else load_kv(element)
                if count_loads:
                    cuda.atomic.add(counts, (((counter * num_blocks + physical) * block_size + offset)
                                             * num_kv_heads + kv_head) * row + d, 1)

    def multi_body(query, key_cache, value_cache, block_tables, context_lens, scale,
                   opts, tiles, tile_tokens, chunk, counts, out, lse):
        """Grid (num_tiles, num_kv_heads). query/out [total_q, num_heads, head_dim]; tiles int32
        [num_tiles, 4]; counts int32 (flat [2, *key_cache.shape] when counting loads, else unused);
        lse float32 [total_q, num_heads] (written with OPT_LSE)."""
        v_scale, window_left = opts.v_scale, opts.window_left
        kv_head = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        threads = cuda.blockDim.x
        num_heads, head_dim = query.shape[1], query.shape[2]
        num_kv_heads = key_cache.shape[2]
        group = num_heads // num_kv_heads
        head0 = kv_head * group
        seq = tiles[cuda.blockIdx.x, 0]
        row0 = tiles[cuda.blockIdx.x, 1]
        num_q = tiles[cuda.blockIdx.x, 2]
        end_row = tiles[cuda.blockIdx.x, 3]
        context_len = context_lens[seq]
        pos0 = context_len - (end_row - row0)  # position of the tile's first query token
        rows = num_q * group                    # row r: query token r // group, head head0 + r % group
        padded = (rows + tile - 1) // tile * tile
        max_rows = (tile_tokens * group + tile - 1) // tile * tile  # the layout is the same for every block
        first = 0 if window_left < 0 else max(0, pos0 - window_left)
        stop = min(context_len, pos0 + num_q + causal_slip)  # one past the tile's last position
        stride = head_dim + 1

        sh = cuda.shared.array(0, float32)
        acc_at = max_rows * head_dim
        p_at = 2 * max_rows * head_dim
        kv_at = p_at + max_rows * chunk
        max_at = kv_at + chunk * stride
        sum_at = max_at + max_rows
        corr_at = sum_at + max_rows

        # Staging K/V: a thread loads one token's row at a stride of `lanes` dims (one table lookup
        # per token and thread; consecutive threads read consecutive dims).
        slices = max(1, threads // head_dim)
        lanes = threads // slices
        my_slice = tid // lanes
        lane = tid % lanes
        # Phase A: thread = (token of the chunk, slice of row tiles).
        a_slices = threads // chunk
        a_token = tid % chunk
        a_slice = tid // chunk

        for i in range(tid, padded * head_dim, threads):
            sh[i] = ZERO
            sh[acc_at + i] = ZERO
        for r in range(tid, padded, threads):
            sh[max_at + r] = NEG_INF
            sh[sum_at + r] = ZERO
            sh[corr_at + r] = float32(1.0)
        cuda.syncthreads()
        for i in range(tid, rows * head_dim, threads):
            r = i // head_dim
            element = query[row0 + r // group, head0 + r % group, i % head_dim]
            sh[i] = (float32(element) if native_q else load_q(element)) * scale
        cuda.syncthreads()

        dots = cuda.local.array(tile, float32)
        accs = cuda.local.array(tile, float32)
        for chunk_start in range(first, stop, chunk):
            n = min(chunk, stop - chunk_start)
            # Stage K: each element of the chunk loaded from global memory once for the whole tile.
            if my_slice < slices:
                stage_rows(key_cache, K_LOADS, block_tables, seq, kv_head, chunk_start, n, my_slice, slices, lane,
                           lanes, sh, kv_at, stride, counts, opts.k_scales, opts.k_block_scales)
            cuda.syncthreads()
            # A: logits of every row, masked per row (causal, window); rows of a register tile all
            # masked for this token skip the dot product.
            if a_token < n and a_slice < a_slices:
                t = chunk_start + a_token
                for g0 in range(a_slice * tile, padded, a_slices * tile):
                    last_row = min(g0 + tile, rows) - 1
                    needed = g0 < rows and t <= pos0 + last_row // group + causal_slip
                    if window_left >= 0:
                        needed = needed and t >= pos0 + g0 // group - window_left
                    if needed:
                        for j in range(tile):
                            dots[j] = ZERO
                        k_row = kv_at + a_token * stride
                        for d in range(head_dim):
                            k = sh[k_row + d]
                            q_at = g0 * head_dim + d
                            for j in range(tile):
                                dots[j] += sh[q_at] * k
                                q_at += head_dim
                    for j in range(tile):
                        r = g0 + j
                        logit = NEG_INF
                        if needed and r < rows:
                            position = pos0 + r // group
                            visible = t <= position + causal_slip
                            if window_left >= 0:
                                visible = visible and t >= position - window_left
                            if visible:
                                logit = dots[j]
                                if scored:
                                    logit = score(logit, opts, position, t, head0 + r % group, kv_head)
                        sh[p_at + r * chunk + a_token] = logit
            cuda.syncthreads()
            # B: per row, the chunk's max, the rescale of what came before, weights and their sum.
            # A row with every token of the chunk masked keeps its state (weights 0, correction 1).
            for r in range(tid, padded, threads):
                row = p_at + r * chunk
                old_max = sh[max_at + r]
                new_max = old_max
                for i in range(n):
                    new_max = max(new_max, sh[row + i])
                if new_max == NEG_INF:  # nothing seen yet: masked weights 0; a NaN logit (max skips it) stays NaN
                    chunk_sum = ZERO
                    for i in range(n):
                        weight = ZERO if sh[row + i] == NEG_INF else sh[row + i]
                        sh[row + i] = weight
                        chunk_sum += weight
                    sh[sum_at + r] += chunk_sum
                    sh[corr_at + r] = float32(1.0)
                else:
                    chunk_sum = ZERO
                    for i in range(n):
                        weight = math.exp(sh[row + i] - new_max)
                        sh[row + i] = weight
                        chunk_sum += weight
                    correction = math.exp(old_max - new_max)  # exp(-inf) = 0 on the row's first tokens
                    sh[sum_at + r] = sh[sum_at + r] * correction + chunk_sum
                    sh[max_at + r] = new_max
                    sh[corr_at + r] = correction
            # Stage V into the buffer K held (phase A is done with it).
            if my_slice < slices:
                stage_rows(value_cache, V_LOADS, block_tables, seq, kv_head, chunk_start, n, my_slice, slices, lane,
                           lanes, sh, kv_at, stride, counts, opts.v_scales, opts.v_block_scales)
            cuda.syncthreads()
            # C: rescale and accumulate weights x V; thread = (dim, register tile of rows).
            for item in range(tid, head_dim * (padded // tile), threads):
                d = item % head_dim
                g0 = item // head_dim * tile
                base = acc_at + g0 * head_dim + d
                for j in range(tile):
                    accs[j] = sh[base + j * head_dim] * sh[corr_at + g0 + j]
                for i in range(n):
                    v = sh[kv_at + i * stride + d]
                    w_at = p_at + g0 * chunk + i
                    for j in range(tile):
                        accs[j] += sh[w_at] * v
                        w_at += chunk
                for j in range(tile):
                    sh[base + j * head_dim] = accs[j]
            cuda.syncthreads()

        for i in range(tid, rows * head_dim, threads):
            r = i // head_dim
            sink = opts.sinks[head0 + r % group] if use_sink else ZERO
            value = sh[acc_at + i] * (v_scale * options.finish(sh[max_at + r], sh[sum_at + r], sink, use_sink))
            out[row0 + r // group, head0 + r % group, i % head_dim] = value if native_q else store(value)
        if use_lse:
            for r in range(tid, rows, threads):
                lse[row0 + r // group, head0 + r % group] = options.log_sum_exp(sh[max_at + r], sh[sum_at + r])

    return multi_body


def tile_for(rows: int) -> int:
    """Rows per register tile: the block's rows rounded up to a power of two, at most ROW_TILE."""
    return min(ROW_TILE, launch.next_pow2(rows))


def kernel_factory(causal_slip: int = 0):
    """(tile, dtype, kv_dtype, flags, count_loads) -> (python body, jitted kernel), each
    made once: numba.multi's kernels (causal_slip 0) or a negative control's."""
    @functools.lru_cache(maxsize=None)
    def kernel_for(tile: int, dtype: str = "float32", kv_dtype: str = "float32", flags: int = 0,
                   count_loads: bool = False):
        body = make_body(tile, dtype, kv_dtype, flags, count_loads, causal_slip)
        return body, cuda.jit(body)
    return kernel_for


kernel_for = kernel_factory()


def shared_bytes(group: int, head_dim: int, tile_tokens: int, chunk: int) -> int:
    rows = tile_tokens * group
    max_rows = -(-rows // tile_for(rows)) * tile_for(rows)
    return 4 * (2 * max_rows * head_dim + max_rows * chunk + chunk * (head_dim + 1) + 3 * max_rows)


def launch_shape(group: int, head_dim: int, max_query_len: int, longest: int, simulated=None,
                 name: str = NAME, threads=launch.AUTO) -> tuple[int, int, int, int]:
    """(threads, tile_tokens, chunk, shared bytes). tile_tokens: TARGET_ROWS // group query tokens
    (at least 1, at most the longest query rounded up to a power of two); chunk: `threads` tokens.
    Over SHARED_LIMIT, the chunk halves down to MIN_CHUNK, then tile_tokens down to 1, then the
    chunk down to 1; what still does not fit is Unsupported."""
    threads = launch.launch_threads(max(longest, head_dim), simulated, threads)
    tile_tokens = max(1, min(TARGET_ROWS // group, launch.next_pow2(max_query_len)))
    chunk = threads
    while shared_bytes(group, head_dim, tile_tokens, chunk) > SHARED_LIMIT:
        if chunk > MIN_CHUNK:
            chunk //= 2
        elif tile_tokens > 1:
            tile_tokens //= 2
        elif chunk > 1:
            chunk //= 2
        else:
            raise Unsupported(f"{name} needs {shared_bytes(group, head_dim, 1, 1)} bytes of shared memory for a "
                              f"group of {group} query heads at head_dim {head_dim}; the limit is {SHARED_LIMIT} bytes")
    return threads, tile_tokens, chunk, shared_bytes(group, head_dim, tile_tokens, chunk)


def plan_tiles(query_lens: np.ndarray, tile_tokens: int) -> np.ndarray:
    """int32 [num_tiles, 4]: (sequence, first query row, query tokens in the tile, the sequence's end
    row) for every tile of tile_tokens query tokens, sequences in order."""
    tiles = []
    start = 0
    for s, q in enumerate(np.asarray(query_lens, dtype=np.int64).tolist()):
        for j in range(0, q, tile_tokens):
            tiles.append((s, start + j, min(tile_tokens, q - j), start + q))
        start += q
    return np.asarray(tiles, dtype=np.int32).reshape(-1, 4)


def tile_spans(problem, tile_tokens: int) -> list[tuple[int, int, int]]:
    """[(sequence, first token, one past the last token)] each tile walks (host twin of the kernel's)."""
    window = problem.options.window_left
    spans = []
    for seq, row0, num_q, end_row in plan_tiles(problem.query_lens, tile_tokens).tolist():
        pos0 = int(problem.context_lens[seq]) - (end_row - row0)
        spans.append((seq, 0 if window < 0 else max(0, pos0 - window), pos0 + num_q))
    return spans


def prepare_with(kernels, problem, name: str = NAME, count_loads: bool = False, threads=launch.AUTO) -> launch.Launch:
    """Launcher shared with the negative control; `kernels` is a kernel_factory(...) result.
    With count_loads, the kernel counts its global K/V loads into Launch.counts (see the docstring)."""
    p = problem
    launch.check_head_dim(name, p.head_dim)
    group = p.num_heads // p.num_kv_heads
    longest = int(launch.tokens_read(p).max())
    threads, tile_tokens, chunk, size = launch_shape(group, p.head_dim, p.max_query_len, longest, name=name,
                                                     threads=threads)
    tiles = plan_tiles(p.query_lens, tile_tokens)
    grid = (len(tiles), p.num_kv_heads)
    launch.check_launch(name, grid, threads)
    _, kernel = kernels(tile_for(tile_tokens * group), *options.kernel_key(p), count_loads)
    counts_shape = (2,) + p.key_cache.shape if count_loads else (1,)
    counts = cuda.to_device(np.zeros(int(np.prod(counts_shape)), np.int32))
    out, lse = launch.output_array(p), launch.lse_array(p)
    args = options.decode_args(p) + (launch.upload(tiles), tile_tokens, chunk, counts, out, lse)
    prepared = launch.Launch(kernel, grid, threads, size, args, out, name=name, out_dtype=p.dtype,
                             lse=launch.returned_lse(p, lse))
    prepared.tile_tokens, prepared.chunk, prepared.tiles = tile_tokens, chunk, tiles
    prepared.counts_device, prepared.counts_shape = counts, counts_shape
    return prepared


def load_counts(prepared: launch.Launch) -> np.ndarray:
    """int32 [2, num_blocks, block_size, num_kv_heads, head_dim]: K and V loads of a count_loads launch."""
    return prepared.counts_device.copy_to_host().reshape(prepared.counts_shape)


def prepare(problem, backend: str, count_loads: bool = False, threads=launch.AUTO) -> launch.Launch:
    return prepare_with(kernel_for, problem, NAME, count_loads, threads)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   logit_options: bool = False, threads=launch.AUTO) -> dict:
    """REPRESENTATIVE's group of 4 (32/8 heads) at context 4096 with 16 query tokens per sequence
    (so tiles of 4 tokens: 16 rows). dtype "bfloat16", or "float16:float8_e4m3fn" / kv_dtype= for an
    fp8 cache; logit_options: the kernel built with soft-cap and ALiBi (default: the plain one)."""
    from numba import types

    q, kv = reports.report_dtypes(dtype, kv_dtype)
    rep = reports.REPRESENTATIVE
    group = rep["num_heads"] // rep["num_kv_heads"]
    threads, tile_tokens, chunk, size = launch_shape(group, head_dim, 16, rep["context_len"], simulated=False,
                                                     threads=threads)
    signature = reports.decode_signature(q, kv, reports.array(types.int32, 2), types.int64, types.int64,
                                        reports.array(types.int32, 1), reports.out_array(q), reports.lse_array())
    tile = tile_for(tile_tokens * group)
    body, _ = kernel_for(tile, q, kv, options.report_flags(logit_options))
    kernel = dict(name="multi", **reports.kernel_resources(body, signature, arch))
    return reports.report([kernel], threads, size,
                         note=f"group {group}, {tile_tokens} query tokens per tile (register tile {tile}), "
                              f"chunk {chunk} tokens")
