"""numba.split: v3, split-KV (Flash-Decoding, vLLM's paged_attention_v2) on top of numba.block.

Idea (one, over v2): cut each context into partitions of P tokens; one thread block per (sequence,
head, partition) writes a partial max, sum and normalized output; a second kernel merges them with
log-sum-exp rescaling. Long contexts get many blocks, and shared memory is bounded by P, not context.
Limits: any block size 1..4096 (runtime); head dims up to 512 (declared as numba.naive); queries
float32, float16, bfloat16 and caches of the query's dtype or fp8 (e4m3fn, e5m2, per tensor or per
token), math in float32; the options as numba.naive (window, softcap, alibi, kv_scale, sinks, lse,
kv_scales); any GQA ratio; decode only; any context length whose partitions fit CUDA's grid (grid z
<= 65535 partitions, refused before launch as Unsupported). P (partition_size) is a positive multiple
of the block size, at most 8192; default 512 rounded down to a multiple of the block size (the block
size when it exceeds 512; "auto").
Tunables: threads (the partition kernel's threads per block; the merge's are sized by head_dim) and
partition_size (TUNABLES; a partition that is not a multiple of the block size is refused). Partitions start at each sequence's first token
read: token 0, or its sliding window's start (so blocks before a window are never looked up nor
read). The grid covers the most partitions any sequence needs; a sequence's empty ones write
max=-inf, sum=0, output 0.
Precisions and options as numba.naive (codecs.py, options.py): one partition kernel per (query dtype,
cache dtype, option flags) and one merge per (output dtype, sink and lse flags); v_scale, the sink and
the lse belong to the merge: a partition's partials are over its tokens alone, and the sink joins the
merged denominator once (adding it per partition is the negative control
kernels/wrong/numba_split_sink_per_partition.py).
Verdict: matches the reference on every problem the suites draw, the same to 1e-6 for P = 4..512
(simulator only; never run on a GPU). Compiled for sm_90 (fp16): partition kernel 69 registers
(43.8% theoretical occupancy), merge 56. Design-level expectation, not a measurement: numba.block's
K/V traffic plus num_partitions*(head_dim+2) floats of partials per (sequence, head); it pays off
when num_seqs*num_heads blocks alone cannot fill the GPU and contexts are long.
"""
from __future__ import annotations

import functools
import math

from numba import cuda, float32, types

from sandbox.variant import Unsupported

from . import codecs, device, launch, options, reports, token_range
from .device import MAX_HEAD_DIM, NEG_INF, ZERO
from .options import first_token
from .reductions import REDUCE_SCRATCH, block_max, block_sum

LIMITS = device.limits()
TUNABLES = {"threads": launch.THREADS, "partition_size": (launch.AUTO, 256, 512, 1024, 2048)}
DEFAULT_PARTITION_SIZE = 512
MAX_PARTITION_SIZE = 8192  # float32 logits of one partition in 32 KB of shared memory


def make_partition_body(dtype: str, kv_dtype: str, flags: int = 0, sink_per_partition: bool = False):
    """The partition kernel's body. sink_per_partition (the negative control
    kernels/wrong/numba_split_sink_per_partition.py): each partition adds the sink to its own denominator."""
    load_q = codecs.DECODE[dtype]
    load_kv = codecs.DECODE[kv_dtype]
    score_tokens, exponentiate, weigh_values = token_range.make(load_kv, options.score_hook(flags), bool(flags & options.OPT_KV_SCALES))
    wrong_sink = sink_per_partition and bool(flags & options.OPT_SINKS)

    def partition_body(query, key_cache, value_cache, block_tables, context_lens, scale,
                       opts, partition_size,
                       part_max, part_sum, part_out):
        """Grid (num_seqs, num_heads, max_partitions); dynamic shared: float32 logits[partition_size].

        Partition `part` holds tokens first + part*P .. first + (part+1)*P - 1 (first: the window's
        start, or 0). part_max/part_sum [num_seqs, num_heads, max_partitions], part_out [..., head_dim]
        (normalized; v_scale is the merge's).
        """
        window_left = opts.window_left
        seq = cuda.blockIdx.x
        head = cuda.blockIdx.y
        part = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        threads = cuda.blockDim.x
        num_heads, head_dim = query.shape[1], query.shape[2]
        kv_head = head // (num_heads // key_cache.shape[2])
        context_len = context_lens[seq]
        position = context_len - 1
        start = first_token(context_len, window_left) + part * partition_size
        if start >= context_len:  # the whole block leaves here, before any barrier: neutral partials
            for d in range(tid, head_dim, threads):
                part_out[seq, head, part, d] = ZERO
            if tid == 0:
                part_max[seq, head, part] = NEG_INF
                part_sum[seq, head, part] = ZERO
            return
        end = min(start + partition_size, context_len)
        q = cuda.shared.array(MAX_HEAD_DIM, float32)
        scratch = cuda.shared.array(REDUCE_SCRATCH, float32)
        logits = cuda.shared.array(0, float32)

        for d in range(tid, head_dim, threads):
            q[d] = load_q(query[seq, head, d]) * scale
        cuda.syncthreads()

        local_max = score_tokens(q, key_cache, block_tables, seq, head, kv_head, start, end, position, opts,
                                 logits, tid, threads, opts.k_scales)
        top = block_max(local_max, scratch)
        local_sum = exponentiate(logits, end - start, top, tid, threads)
        total = block_sum(local_sum, scratch)  # its barrier publishes the weights
        if wrong_sink:  # BUG (negative control only): the sink joins every partition's denominator
            total += math.exp(opts.sinks[head] - top)
        inv_sum = float32(1.0) / total
        for d in range(tid, head_dim, threads):
            acc = weigh_values(logits, value_cache, block_tables, seq, kv_head, d, start, end, opts.v_scales)
            part_out[seq, head, part, d] = acc * inv_sum
        if tid == 0:
            part_max[seq, head, part] = top
            part_sum[seq, head, part] = total

    return partition_body


def make_merge_body(dtype: str, flags: int = 0):
    """The merge's body; of `flags` it reads OPT_SINKS (the sink joins the merged denominator, once) and
    OPT_LSE (it writes the merged log-sum-exp)."""
    store = codecs.ENCODE[dtype]
    use_sink = bool(flags & options.OPT_SINKS)
    use_lse = bool(flags & options.OPT_LSE)

    def merge_body(part_max, part_sum, part_out, v_scale, sinks, out, lse):
        """Grid (num_seqs, num_heads); threads split head_dim. Empty partitions weigh exp(-inf) * 0 = 0.
        sinks float32 [num_heads] (read with OPT_SINKS), lse float32 [num_seqs, num_heads] (written with OPT_LSE)."""
        seq = cuda.blockIdx.x
        head = cuda.blockIdx.y
        num_parts = part_max.shape[2]
        head_dim = out.shape[2]
        top = NEG_INF
        for p in range(num_parts):
            top = max(top, part_max[seq, head, p])  # finite: partition 0 always holds a token
        total = ZERO
        for p in range(num_parts):
            total += part_sum[seq, head, p] * math.exp(part_max[seq, head, p] - top)
        sink = sinks[head] if use_sink else ZERO
        inv_total = v_scale * options.finish(top, total, sink, use_sink)
        for d in range(cuda.threadIdx.x, head_dim, cuda.blockDim.x):
            acc = ZERO
            for p in range(num_parts):
                acc += part_out[seq, head, p, d] * (part_sum[seq, head, p] * math.exp(part_max[seq, head, p] - top))
            out[seq, head, d] = store(acc * inv_total)
        if use_lse and cuda.threadIdx.x == 0:
            lse[seq, head] = options.log_sum_exp(top, total)

    return merge_body


def partition_factory(sink_per_partition: bool = False):
    """(dtype, kv_dtype, flags) -> (python body, jitted kernel), each made once: numba.split's partition
    kernels, or (sink_per_partition) the negative control's."""
    @functools.lru_cache(maxsize=None)
    def kernel_for(dtype: str, kv_dtype: str, flags: int = 0):
        body = make_partition_body(dtype, kv_dtype, flags, sink_per_partition)
        return body, cuda.jit(body)
    return kernel_for


partition_kernel_for = partition_factory()
MERGE_FLAGS = options.OPT_SINKS | options.OPT_LSE  # what the merge is specialised on


@functools.lru_cache(maxsize=None)
def merge_kernel_for(dtype: str, flags: int = 0):
    """(python body, jitted kernel) for the output dtype and the flags' sink and lse bits, made once."""
    body = make_merge_body(dtype, flags & MERGE_FLAGS)
    return body, cuda.jit(body)


def default_partition_size(block_size: int) -> int:
    """DEFAULT_PARTITION_SIZE rounded down to a multiple of the block size (at least one block)."""
    return max(1, DEFAULT_PARTITION_SIZE // block_size) * block_size


def check_partition_size(partition_size: int, block_size: int) -> None:
    if (not isinstance(partition_size, int) or partition_size < 1 or partition_size % block_size
            or partition_size > MAX_PARTITION_SIZE):
        raise Unsupported(f"numba.split: partition_size must be a positive multiple of block_size ({block_size}) "
                          f"and at most {MAX_PARTITION_SIZE}, got {partition_size!r}")


def partitions_needed(problem, partition_size: int) -> int:
    """The most partitions any sequence needs: its tokens read (from the window's start) over P."""
    return int(-(-launch.tokens_read(problem).max() // partition_size))


class SplitLaunch:
    """Both kernels configured; launch() runs partitions then merge, result() downloads."""

    def __init__(self, problem, partition_size: int, partition_kernels=partition_kernel_for, merge_flags=None,
                 threads=launch.AUTO):
        """partition_kernels: a partition_factory(...) result; merge_flags: the flags the merge is built
        with (default: the problem's); threads: the partition kernel's (launch.launch_threads)."""
        p = problem
        launch.check_head_dim("numba.split", p.head_dim)
        check_partition_size(partition_size, p.block_size)
        self.partition_size = partition_size
        self.num_partitions = partitions_needed(p, partition_size)
        shape = (p.num_seqs, p.num_heads, self.num_partitions)
        longest = int(launch.tokens_read(p).max())
        threads = launch.launch_threads(max(min(partition_size, longest), p.head_dim), threads=threads)
        merge_threads = launch.launch_threads(p.head_dim)
        launch.check_launch("numba.split partition", shape, threads)  # before any allocation
        launch.check_launch("numba.split merge", shape[:2], merge_threads)
        part_max = cuda.device_array(shape, "float32")
        part_sum = cuda.device_array(shape, "float32")
        part_out = cuda.device_array(shape + (p.head_dim,), "float32")
        self.out = launch.output_array(p)
        self.lse_device = launch.lse_array(p)
        self.returns_lse = p.options.return_lse
        self.out_dtype = p.dtype
        self.partials = (part_max, part_sum, part_out)

        key = options.kernel_key(p)
        _, partition_kernel = partition_kernels(*key)
        _, merge_kernel = merge_kernel_for(key[0], key[2] if merge_flags is None else merge_flags)
        args = options.decode_args(p)
        self.partition = launch.Launch(partition_kernel, shape, threads, 4 * partition_size,
                                       args + (partition_size,) + self.partials, None, name="numba.split partition")
        opts = args[6]
        self.merge = launch.Launch(merge_kernel, shape[:2], merge_threads, 0,
                                   self.partials + (opts.v_scale, opts.sinks, self.out, self.lse_device), None,
                                   name="numba.split merge")

    def launch(self) -> None:
        self.partition.launch()
        self.merge.launch()

    def result(self):
        return codecs.host_view(self.out.copy_to_host(), self.out_dtype)

    def lse(self):
        """float32 [num_seqs, num_heads] (sandbox.variant.limits.Prepared)."""
        if not self.returns_lse:
            raise ValueError("this launch computes no log-sum-exp: prepare it for a problem with return_lse=True")
        return self.lse_device.copy_to_host()


def partition_for(partition_size, block_size: int) -> int:
    """The tunable's value as tokens: "auto" (or None) is default_partition_size(block_size)."""
    return default_partition_size(block_size) if partition_size in (None, launch.AUTO) else partition_size


def prepare(problem, backend: str, partition_size=launch.AUTO, threads=launch.AUTO) -> SplitLaunch:
    """partition_size: tokens per partition ("auto": default_partition_size(block_size)); threads: the
    partition kernel's (launch.launch_threads)."""
    return SplitLaunch(problem, partition_for(partition_size, problem.block_size), threads=threads)


def compile_report(block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   logit_options: bool = False, threads=launch.AUTO, partition_size=launch.AUTO) -> dict:
    """Top-level numbers are the partition kernel's (the one reading K/V); `kernels` lists both, each with
    the threads and dynamic shared memory the configuration (threads, partition_size) launches.
    dtype "bfloat16", or "float16:float8_e4m3fn" / kv_dtype= for an fp8 cache; logit_options: the
    kernel built with soft-cap and ALiBi (default: the plain one)."""
    q, kv = reports.report_dtypes(dtype, kv_dtype)
    f32 = types.float32
    partials = (reports.array(f32, 3), reports.array(f32, 3), reports.array(f32, 4))
    partition_sig = reports.decode_signature(q, kv, types.int64, *partials)
    merge_sig = partials + (f32, reports.array(f32, 1), reports.out_array(q), reports.lse_array())
    size = partition_for(partition_size, block_size)
    check_partition_size(size, block_size)
    threads = launch.launch_threads(size, simulated=False, threads=threads)
    merge_threads = launch.launch_threads(head_dim, simulated=False)
    partition_body, _ = partition_kernel_for(q, kv, options.report_flags(logit_options))
    merge_body, _ = merge_kernel_for(q, options.report_flags(logit_options))
    kernels = [
        dict(name="partition", threads_per_block=threads, dynamic_shared_bytes=4 * size,
             **reports.kernel_resources(partition_body, partition_sig, arch)),
        dict(name="merge", threads_per_block=merge_threads, dynamic_shared_bytes=0,
             **reports.kernel_resources(merge_body, merge_sig, arch)),
    ]
    return reports.report(kernels, threads, 4 * size,
                         note=f"partition kernel (P={size}) shown; merge kernel in 'kernels'")
