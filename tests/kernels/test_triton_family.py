"""The Triton family on the CPU: the interpreter adapter without torch, checked addresses, the language restored.

The registry-walking suites (tests/kernels/test_variants.py) hold the three variants to the reference; here is what
only this family has: NumPy-backed pointers instead of torch tensors, every address checked against the
argument it was derived from, and triton.language left compilable after an interpreted launch.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from kernels.triton import interpret, launch
from kernels.triton.memory import Memory, OutOfBounds
from sandbox.problem import DecodeProblem
from sandbox.variant import registry, runner

TRITON = registry.variants("triton")


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < n, other=0.0) + 1.0, mask=offsets < n)


def test_the_family_has_three_variants():
    assert TRITON == ["triton.naive", "triton.split", "triton.unified"]


def test_a_run_never_imports_torch():
    script = textwrap.dedent("""
        import importlib.abc, sys

        class NoTorch(importlib.abc.MetaPathFinder):  # any `import torch` now fails loudly
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError(f"the Triton family imported {name}")

        sys.meta_path.insert(0, NoTorch())
        import numpy as np, sandbox
        from sandbox.problem import DecodeProblem
        for name in sandbox.variants("triton"):
            p = DecodeProblem.random(3, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=8,
                                     max_context_len=20, dtype="float16")
            sandbox.run_problem(name, p, "cpu")
        assert "torch" not in sys.modules
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_masked_copy_runs_on_numpy_pointers():
    src, dst = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    memory = Memory("test.copy")
    interpret.run(copy_kernel, (4,), memory, memory.pointer("src", src, tl.float32), memory.pointer("dst", dst, tl.float32),
                  100, BLOCK=32)
    np.testing.assert_array_equal(dst, src + 1)


def test_a_load_past_the_end_names_the_argument_element_and_program():
    src, dst = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    memory = Memory("test.copy")
    with pytest.raises(OutOfBounds, match=r"test.copy: out-of-bounds load of argument src at element 100 .*"
                                          r"outside its 100 elements, program id \(3, 0, 0\)"):
        interpret.run(copy_kernel, (4,), memory, memory.pointer("src", src, tl.float32),
                      memory.pointer("dst", dst, tl.float32), 101, BLOCK=32)
    assert not dst[96:].any(), "the program that read out of bounds stored nothing"


@pytest.mark.parametrize("name", TRITON)
def test_a_variant_reading_past_its_block_table_is_caught_naming_it(name):
    problem = DecodeProblem.random(2, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=32, block_size=8,
                                   max_context_len=16)
    prepared, _ = runner.prepare(name, problem, "cpu")
    prepared.args.arrays["block_tables"][1, :] = 0  # every entry valid: the first bad address is the table's own
    prepared.args.arrays["context_lens"][1] = problem.max_blocks_per_seq * problem.block_size + 9  # past the table
    with pytest.raises(OutOfBounds, match=rf"{name}: out-of-bounds load of argument block_tables .*program id \(1, "):
        prepared.launch()


def test_the_language_is_compilable_again_after_an_interpreted_launch():
    test_masked_copy_runs_on_numpy_pointers()
    assert isinstance(tl.zeros, JITFunction) and isinstance(tl.standard.sum, JITFunction)
    assert not triton.knobs.runtime.interpret


def test_next_power_of_two():
    assert [launch.next_power_of_two(n) for n in (1, 2, 3, 16, 17, 2112)] == [1, 2, 4, 16, 32, 4096]


def test_split_times_its_two_kernels_alone_and_the_others_have_one():
    problem = DecodeProblem.random(6, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=8,
                                   max_context_len=30, dtype="float16")
    prepared, _ = runner.prepare("triton.split", problem, "cpu")
    prepared.launch()
    whole = prepared.result().copy()
    parts = prepared.launch_parts()
    assert [name for name, _ in parts] == ["partition", "reduce"]
    prepared.args.arrays["out"][:] = 0
    for _, part in parts:
        part()
    np.testing.assert_array_equal(prepared.result(), whole)
    for name in ("triton.naive", "triton.unified"):
        assert not hasattr(runner.prepare(name, problem, "cpu")[0], "launch_parts"), name
