"""triton.mine: one Triton program per (sequence, query head), one block of K/V per step (a template to copy).

Idea: the reference's loop over the block table in Triton: load the query row, then per logical block the
physical block's [block_size, head_dim] K tile, float32 logits, an online softmax, the V tile.
Limits: any block size (the tile is its next power of two, masked); any head dim; float32 and float16
queries with a cache of the query's dtype; per-tensor k/v scales; decode only.
Tunable: num_warps (TUNABLES, the default first; `check --config num_warps=2` picks another).
Verdict: not measured; every query head re-reads its KV head's blocks, so it is far from the bandwidth bound.
"""
import triton
import triton.language as tl

from kernels.triton import launch
from sandbox.variant import Limits

LIMITS = Limits(block_sizes=None, head_dims=None, dtypes=("float32", "float16"), options=("kv_scale",))
TUNABLES = {"num_warps": (4, 2)}


@triton.jit
def mine_kernel(query, key_cache, value_cache, block_tables, context_lens, out, scale, v_scale,
                num_heads, num_kv_heads, max_blocks, block_size, head_dim, BLOCK: tl.constexpr, HEAD: tl.constexpr):
    """query/out [num_seqs, num_heads, head_dim], caches [num_blocks, block_size, num_kv_heads, head_dim];
    grid (num_seqs, num_heads)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // (num_heads // num_kv_heads)
    context_len = tl.load(context_lens + seq)
    dims = tl.arange(0, HEAD)
    dim_ok = dims < head_dim
    q = tl.load(query + (seq * num_heads + head) * head_dim + dims, mask=dim_ok, other=0.0).to(tl.float32)
    offsets = tl.arange(0, BLOCK)
    top = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD], tl.float32)
    for block in range(0, tl.cdiv(context_len, block_size)):
        physical = tl.load(block_tables + seq * max_blocks + block).to(tl.int64)
        live = (offsets < block_size) & (block * block_size + offsets < context_len)
        rows = ((physical * block_size + offsets) * num_kv_heads + kv_head) * head_dim
        tile = live[:, None] & dim_ok[None, :]
        k = tl.load(key_cache + rows[:, None] + dims[None, :], mask=tile, other=0.0).to(tl.float32)
        s = tl.where(live, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        new_top = tl.maximum(top, tl.max(s, axis=0))
        correction = tl.exp(top - new_top)
        weights = tl.exp(s - new_top)
        total = total * correction + tl.sum(weights, axis=0)
        v = tl.load(value_cache + rows[:, None] + dims[None, :], mask=tile, other=0.0).to(tl.float32)
        acc = acc * correction + tl.sum(weights[:, None] * v, axis=0)
        top = new_top
    result = acc * (v_scale / total)
    tl.store(out + (seq * num_heads + head) * head_dim + dims, result.to(out.dtype.element_ty), mask=dim_ok)


def prepare(problem, backend, num_warps=4):
    p = problem
    args = launch.Arguments("triton.mine", backend)  # host arrays checked by the interpreter, or CuPy on a GPU
    pointers = (args.pointer("query", p.query), args.pointer("key_cache", p.key_cache),
                args.pointer("value_cache", p.value_cache), args.pointer("block_tables", p.block_tables),
                args.pointer("context_lens", p.context_lens), args.output("out", p.query.shape, p.dtype))
    values = (float(p.softmax_scale * p.options.scale_factor()), float(p.options.v_scale), p.num_heads,
              p.num_kv_heads, p.max_blocks_per_seq, p.block_size, p.head_dim)
    constexprs = dict(BLOCK=launch.next_power_of_two(p.block_size), HEAD=launch.next_power_of_two(p.head_dim))
    call = launch.Call("mine", mine_kernel, (p.num_seqs, p.num_heads), pointers + values, constexprs, num_warps)
    return launch.Launch("triton.mine", p, args, [call])
