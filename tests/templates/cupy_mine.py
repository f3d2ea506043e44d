"""cupy.mine: one thread block per (query head, sequence), one thread per output element (cupy_mine.cu).

Idea: an online softmax per output element in CUDA C, a template to copy: the launcher validates
nothing itself (sandbox.run did), uploads, and passes the option table's arguments last.
Limits: any block size (a runtime value); any head dim; float32 queries and caches only; per-tensor
k/v scales; decode only.
Verdict: not measured; every thread reads whole K rows alone, so it is far from the bandwidth bound.
"""
import pathlib

import numpy as np

from kernels.cupy_raw import common
from sandbox.devices import backends
from sandbox.variant import Limits

LIMITS = Limits(block_sizes=None, head_dims=None, dtypes=("float32",), options=("kv_scale",))
PATH = pathlib.Path(__file__).with_suffix(".cu")
THREADS = 32


class Prepared:
    def __init__(self, kernel, grid, args):
        self.kernel, self.grid, self.args = kernel, grid, args

    def launch(self):                      # the only timed part
        self.kernel(self.grid, (THREADS,), self.args)

    def result(self):
        return np.ascontiguousarray(backends.to_host(self.args[0]))


def prepare(problem, backend):             # untimed: compile (cached), upload
    p = problem
    kernel = backends.raw_module(backend, common.load_source(PATH), common.OPTIONS).get_function("mine")
    query, key_cache, value_cache, block_tables, context_lens = common.upload_problem(p, backend)
    args = (common.output_like(p, backend), query, key_cache, value_cache, block_tables, context_lens,
            np.int32(p.max_blocks_per_seq), np.int32(p.block_size), np.int32(p.num_heads), np.int32(p.num_kv_heads),
            np.int32(p.head_dim), common.kernel_scale(p), *common.option_args(p, backend))
    return Prepared(kernel, (p.num_heads, p.num_seqs), args)
