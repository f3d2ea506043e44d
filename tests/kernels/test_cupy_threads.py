"""The CUDA C variants' thread count (TUNABLES["threads"]): declared with the default first, a template
argument of the kernel (named in the instantiation only when it is not the default), and right at the
non-default counts on each of the three thread mappings (pa::attend block-mapped and row-mapped, the
multi-query tile kernel)."""
from __future__ import annotations

import pytest

from kernels.cupy_raw import cascade, common, dense, gqa, multi, rows, v1, v2
from sandbox.checking.check import expected_output
from sandbox.checking.compare import compare
from sandbox.problem import DecodeProblem
from sandbox.variant import Unsupported, registry, tunables
from sandbox.variant.runner import run_problem

VARIANTS = {"cupy.v1": v1, "cupy.v2": v2, "cupy.gqa": gqa, "cupy.rows": rows, "cupy.dense": dense,
            "cupy.multi": multi, "cupy.cascade": cascade}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_threads_are_declared_with_the_default_first(name):
    table = tunables.declared(registry.get(name).module)
    assert table["threads"][0] == common.NUM_THREADS
    assert all(t % 32 == 0 for t in table["threads"])


def test_default_thread_count_keeps_the_plain_name():
    assert v1.kernel_name(16, 128, "float16") == "paged_attention_v1<16, 128, __half>"
    assert v1.kernel_name(16, 128, "float16", threads=64) == "paged_attention_v1<16, 128, __half, __half, 0, 64>"
    assert rows.kernel_name(8, 64, 4, "float32", threads=256) == \
        "paged_attention_gqa<8, 64, 4, float, true, float, 0, 256>"
    assert multi.kernel_name(128, "float16", flags=4, threads=64) == "paged_attention_multi<128, __half, __half, 4, 64>"


# One non-default count per thread mapping: each is one g++ compile on the CPU executor.
@pytest.mark.parametrize("name,threads", [("cupy.v1", 64), ("cupy.rows", 256), ("cupy.multi", 64)])
def test_non_default_thread_counts_are_correct(name, threads):
    problem = DecodeProblem.random(seed=3, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=64, block_size=8,
                                   max_context_len=300, dtype="float16")
    got = run_problem(name, problem, "cpu", {"threads": threads})
    assert compare(got, expected_output(problem), problem.dtype), name


def test_undeclared_thread_count_is_refused():
    problem = DecodeProblem.random(seed=0, num_seqs=1, head_dim=64, block_size=16, max_context_len=32)
    with pytest.raises(Unsupported, match="threads=96"):
        run_problem("cupy.v2", problem, "cpu", {"threads": 96})
