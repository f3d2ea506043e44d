"""The Triton family's compile census: kernels compiled by Triton for sm_80 / sm_90 without a GPU.

The registers and spills come from the ptxas run that made the cubin; the SASS census reads that cubin.
"""
from __future__ import annotations

import pytest

from sandbox.analysis import resources, sass
from sandbox.variant import Unsupported


def _rows(names, arch="sm_90", config=None, dtype="float16"):
    return resources.collect(names, (16,), 128, dtype, arch, images=True, config=config)


def test_naive_reports_ptxas_registers_and_its_sass_for_sm_90():
    (row,) = _rows(["triton.naive"])
    assert "error" not in row and "skipped" not in row, row
    assert 16 <= row["registers"] <= 255 and row["threads_per_block"] == 128
    assert row["spill_stores"] >= 0 and row["path"].startswith("triton 3.9.0")
    assert 0 < row["occupancy"] <= 1
    (census_row,) = sass.census_rows([row])
    assert census_row["kernel"] == "naive" and census_row["global_loads"] and census_row["global_stores"]


def test_num_warps_is_a_tunable_the_census_compiles():
    (row,) = _rows(["triton.naive"], config={"num_warps": 2})
    assert row["threads_per_block"] == 64 and row["config"] == "num_warps=2,num_stages=2"
    with pytest.raises(Unsupported, match="num_warps=3"):
        _rows(["triton.naive"], config={"num_warps": 3})


def test_split_reports_both_kernels_for_sm_80():
    (row,) = _rows(["triton.split"], arch="sm_80")
    assert [k["name"] for k in row["kernels"]] == ["partition", "reduce"], row
    assert all(k["registers"] > 0 and k["threads_per_block"] == 128 for k in row["kernels"])
    assert row["dynamic_shared_bytes"] > 0  # the dot's operands are staged in shared memory
