"""cupy.mine: one thread block per (query head, sequence), one thread per output element (cupy_mine.cu).

Idea: an online softmax per output element in CUDA C, a template to copy: the launcher validates
nothing itself (sandbox.run did), uploads, and passes the option table's arguments last.
Limits: any block size (a runtime value); any head dim; float32 queries and caches only; per-tensor
k/v scales; decode only.
Tunable: threads per block (TUNABLES, the default first; `check --config threads=128` picks another).
Verdict: not measured; every thread reads whole K rows alone, so it is far from the bandwidth bound.
"""
import pathlib

import numpy as np

from kernels.cupy_raw import common
from sandbox.variant import Limits

LIMITS = Limits(block_sizes=None, head_dims=None, dtypes=("float32",), options=("kv_scale",))
TUNABLES = {"threads": (32, 64, 128)}
PATH = pathlib.Path(__file__).with_suffix(".cu")


def prepare(problem, backend, threads=32):  # untimed: compile (cached), upload
    p = problem
    kernel = common.get_function(backend, PATH, "mine")  # the .cu with the option table's prelude, compiled once
    query, key_cache, value_cache, block_tables, context_lens = common.upload_problem(p, backend)
    args = (common.output_like(p, backend), query, key_cache, value_cache, block_tables, context_lens,
            np.int32(p.max_blocks_per_seq), np.int32(p.block_size), np.int32(p.num_heads), np.int32(p.num_kv_heads),
            np.int32(p.head_dim), common.kernel_scale(p), *common.option_args(p, backend))
    launch = (kernel, (p.num_heads, p.num_seqs), (threads,), args, 0)  # kernel, grid, block, arguments, shared bytes
    return common.Prepared([launch], args[0])  # launch() runs the launches (the only timed part); result() downloads


def compile_report(block_size, head_dim, dtype, arch, threads=32):  # `python -m sandbox resources` (NVRTC)
    return common.compile_report(PATH, "mine", arch, threads, 0)
