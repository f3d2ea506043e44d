"""Small defects, each pinned: DecodeProblem.random's arguments, BlockManager's indices, the wrong-length
context_lens message, positional variant names, list's whole first sentences, ASan naming a template's .cu file."""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import sandbox
from sandbox import cli
from sandbox.paging import BlockManager
from sandbox.problem import DecodeProblem
from sandbox.variant import registry
from sandbox.variant.registry import first_sentence

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


@pytest.mark.parametrize("keywords, message", [
    (dict(block_size=0), r"block_size must be an integer in \[1, 4096\], got 0"),
    (dict(num_kv_heads=0), r"num_kv_heads must be an integer >= 1, got 0"),
    (dict(head_dim=0), r"head_dim must be an integer >= 1, got 0"),
    (dict(num_seqs=0), r"num_seqs must be an integer >= 1, got 0"),
    (dict(num_heads=2.5), r"num_heads must be an integer >= 1, got 2.5"),
    (dict(seed=-1), r"seed must be an integer >= 0, got -1"),
    (dict(spare_blocks=-2), r"spare_blocks must be an integer >= 0, got -2"),
    (dict(max_context_len=0), r"max_context_len must be an integer >= 1, got 0"),
    (dict(num_heads=6, num_kv_heads=4), r"num_heads \(6\) must be a multiple of num_kv_heads \(4\)"),
    (dict(context_lens=[3, 4]), r"context_lens must have num_seqs = 4 entries, got shape \(2,\)"),
    (dict(max_context_len=10**9), r"would allocate 4,768.4 GiB of K/V cache .* the bound is 8 GiB"),
])
def test_random_refuses_each_bad_argument_before_allocating(keywords, message):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        DecodeProblem.random(**{"seed": 0, **keywords})
    assert time.perf_counter() - started < 0.5  # refused at once, not after drawing gigabytes


def test_block_manager_refuses_an_index_outside_its_blocks():
    manager = BlockManager(num_blocks=4, block_size=16)
    manager.allocate("a", 20)
    assert [manager.ref_count(b) for b in range(4)] == [1, 1, 0, 0]
    for bad in (-1, 4, 99):
        with pytest.raises(ValueError, match=rf"block must be a physical block index in 0..3, got {bad}"):
            manager.ref_count(bad)
    with pytest.raises(TypeError, match="block must be an integer"):
        manager.ref_count(1.0)


def test_a_wrong_length_context_lens_is_blamed_on_context_lens():
    p = DecodeProblem.random(0, num_seqs=3, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4, max_context_len=9)
    query, key_cache, value_cache, tables, lens = p.arrays()[:5]
    for wrong in (lens[:2], np.concatenate([lens, lens[:1]])):
        with pytest.raises(ValueError, match=rf"context_lens has {len(wrong)} entries, expected num_seqs = 3 "
                                             r"\(the rows of query and of block_tables\)"):
            sandbox.run("numpy.gather", query, key_cache, value_cache, tables, wrong)
    with pytest.raises(ValueError, match=r"query has 2 rows, expected num_seqs = 3"):  # the query is the odd one
        sandbox.run("numpy.gather", query[:2], key_cache, value_cache, tables, lens)


def test_sass_and_resources_take_positional_variant_names(capsys):
    parser = cli.build_parser()
    for command in ("sass", "resources"):
        args = parser.parse_args([command, "cupy.rows", "numba.*", "--variants", "cupy.v1", "--block-sizes", "16,1",
                                  "4"])
        assert args.names == ["cupy.rows", "numba.*"] and args.variants == ["cupy.v1"]
        assert args.block_sizes == [(1, 16), (4,)]
    assert cli.main(["resources", "numpy.gather", "--block-sizes", "16"]) == 0
    assert "no compile_report (not compiled, no static resources): numpy.gather" in capsys.readouterr().out
    assert cli.main(["sass", "numpy.nothing"]) == 2
    assert "unknown variant 'numpy.nothing'" in capsys.readouterr().err


def test_list_shows_each_summary_to_its_sentence_end(capsys):
    assert first_sentence("a.b: one idea\n    over two lines. Then more.\n\nIdea: ...") == "a.b: one idea over two lines."
    assert first_sentence("x: e.g. this, then (that). Next") == "x: e.g. this, then (that)."
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in registry.variants(problem=None):
        summary = registry.get(name).summary
        assert summary.endswith(".") and summary in out, name
    numba_split = next(line for line in out.splitlines() if line.startswith("numba.split "))
    assert "threads=auto|32|64|128|256 partition_size=auto|256|512|1024|2048" in numba_split  # the tunables column


def test_asan_names_a_pasted_template_kernel_file(tmp_path, monkeypatch):
    """An out-of-bounds write in a copy of the CUDA C template: the report names the copy's .cu and line."""
    shutil.copy(TEMPLATES / "cupy_mine.py", tmp_path / "cupy_bad.py")
    source = (TEMPLATES / "cupy_mine.cu").read_text()
    store = "out[((long)s * heads + h) * head_dim + d]"
    assert source.count(store) == 1
    (tmp_path / "cupy_bad.cu").write_text(source.replace(store, store[:-1] + " + 1]"))
    line = next(i for i, text in enumerate(source.splitlines(), start=1) if store in text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.VARIANTS, "cupy.bad", "cupy_bad")
    monkeypatch.setenv("SANDBOX_CPUCUDA_ASAN", "1")
    monkeypatch.chdir(tmp_path.parent)  # not the repository: the report must not depend on the caller's folder
    problem = DecodeProblem.random(0, num_seqs=2, num_heads=2, num_kv_heads=1, head_dim=8, block_size=4,
                                   max_context_len=6)
    try:
        with pytest.raises(sandbox.cpucuda.CpuKernelMemoryError) as err:
            sandbox.run_problem("cupy.bad", problem, "cpu")
    finally:
        sys.modules.pop("cupy_bad", None)
    assert f"{tmp_path / 'cupy_bad.cu'}:{line} in mine" in str(err.value).splitlines()[0]
