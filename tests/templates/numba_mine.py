"""numba.mine: one thread per (sequence, query head), an online softmax over the sequence's tokens.

Idea: the reference's loop on a GPU, a template to copy: each thread walks its sequence's blocks through
the table, keeps a running max and sum and its head's output row in a local array.
Limits: any block size (a runtime value); head dims up to MAX_HEAD_DIM = 256 (the local array's size);
float32 and float16 queries with a cache of the query's dtype; per-tensor k/v scales (read from the
option table's arguments, OptionArgs); decode only.
Tunable: threads per block (TUNABLES, the default first; `check --config threads=128` picks another).
Verdict: not measured; num_seqs * num_heads threads each reading whole K/V rows alone: far too few
threads to fill a GPU, and uncoalesced loads.
"""
import math

from numba import cuda, float32

from kernels.numba_cuda import launch, options, reports
from sandbox import Unsupported
from sandbox.variant import Limits

LIMITS = Limits(block_sizes=None, head_dims=None, dtypes=("float32", "float16"), options=("kv_scale",))
TUNABLES = {"threads": (32, 64, 128)}
MAX_HEAD_DIM = 256


@cuda.jit
def _kernel(query, key_cache, value_cache, block_tables, context_lens, scale, opts, out):
    """query/out [num_seqs, num_heads, head_dim]; caches [num_blocks, block_size, num_kv_heads, head_dim];
    scale: the softmax scale times k_scale; opts: OptionArgs (this kernel reads v_scale). 1-D grid."""
    item = cuda.grid(1)
    num_seqs, num_heads, head_dim = query.shape
    if item >= num_seqs * num_heads:
        return
    s, h = item // num_heads, item % num_heads
    kv, block_size = h // (num_heads // key_cache.shape[2]), key_cache.shape[1]
    acc = cuda.local.array(MAX_HEAD_DIM, float32)
    for d in range(head_dim):
        acc[d] = float32(0)
    m, denom = float32(-math.inf), float32(0)  # float32 throughout: no float64 on a GPU
    for t in range(context_lens[s]):
        block, offset = block_tables[s, t // block_size], t % block_size
        logit = float32(0)
        for d in range(head_dim):
            logit += float32(query[s, h, d]) * float32(key_cache[block, offset, kv, d])
        logit *= scale
        m_new = max(m, logit)
        correction, weight = math.exp(m - m_new), math.exp(logit - m_new)
        denom = denom * correction + weight
        for d in range(head_dim):
            acc[d] = acc[d] * correction + weight * float32(value_cache[block, offset, kv, d])
        m = m_new
    for d in range(head_dim):
        out[s, h, d] = acc[d] / denom * opts.v_scale


def prepare(problem, backend, threads=32):  # untimed: upload, compile (on a GPU)
    p = problem
    if p.head_dim > MAX_HEAD_DIM:
        raise Unsupported(f"numba.mine supports head_dim <= {MAX_HEAD_DIM}, got {p.head_dim}")
    out = launch.output_array(p)
    args = options.decode_args(p) + (out,)  # (query ... context_lens, scale, OptionArgs): the family's one order
    blocks = (p.num_seqs * p.num_heads + threads - 1) // threads
    return launch.Launch(_kernel, blocks, threads, 0, args, out, name="numba.mine", out_dtype=p.dtype)


def compile_report(block_size, head_dim, dtype, arch, kv_dtype=None, threads=32):  # `python -m sandbox resources`
    q, kv = reports.report_dtypes(dtype, kv_dtype)
    signature = reports.decode_signature(q, kv, reports.out_array(q))
    kernel = dict(name="mine", **reports.kernel_resources(_kernel.py_func, signature, arch))
    return reports.report([kernel], threads, 0)
