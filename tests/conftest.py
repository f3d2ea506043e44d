"""Shared test set-up: hypothesis profiles and the GPU marker.

Profiles: `ci` (default; fast enough for a 2-core machine without a GPU) and `thorough`
(HYPOTHESIS_PROFILE=thorough, for deep runs). Every random input is seeded: hypothesis prints the
drawn seed in the falsifying example, and derandomize keeps CI reproducible.

The deep tier (DEEP below) repeats what the ci tier already covers for one more variant, architecture or
kernel file: the same checks on a near twin. It runs with HYPOTHESIS_PROFILE=thorough or
SANDBOX_DEEP_TESTS=1 (`make test-deep`), and is skipped with that reason otherwise, so `make test` stays
within its minutes on two cores.
"""
import fnmatch
import os

import pytest
from hypothesis import HealthCheck, settings

# The tests compile several hundred CUDA C instantiations with g++ on a cold cache (about 8 minutes of g++ at
# the executor's default -O2). At -O0 each compiles in under half the time of -O1 (code generation is 95% of
# it) and runs a few times slower, which the tests' small problems do not feel; every check here is about
# results, not speed (`make sweep` and `make bench` keep -O2; ASan, racecheck and traffic builds have their
# own flags). A value the caller set wins. Racecheck and ASan builds likewise (their g++ time in a cold suite
# 77 -> ~45 s and 42 -> ~25 s): the checkers see every access at -O0 too, and the benchmarks measuring
# racecheck's cost set -O2 themselves.
os.environ.setdefault("SANDBOX_CPUCUDA_OPT", "-O0")
os.environ.setdefault("SANDBOX_CPUCUDA_RACECHECK_OPT", "-O0")
os.environ.setdefault("SANDBOX_CPUCUDA_ASAN_OPT", "-O0")

import sandbox  # noqa: E402,F401  (chooses the Numba simulator before anything imports numba.cuda)
from sandbox.devices.backends import gpu_present  # noqa: E402

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=300, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Node ids (fnmatch patterns) of the deep tier, each beside the ci test that covers the same ground.
DEEP = (
    "tests/kernels/test_numba_family.py::test_every_numba_kernel_compiles_for_real_gpus[[]sm_80-*",   # sm_90 in ci
    "tests/kernels/test_numba_family.py::test_numba_nvfp4_and_per_token_writer_kernels_compile_at_sm_90",  # bf16/e4m3 in ci
    "tests/kernels/test_variants.py::test_variant_matches_reference_on_edge_cases[[]numba.naive]",     # split, multi
    "tests/kernels/test_variants.py::test_variant_matches_reference_on_edge_cases[[]numba.block]",
    "tests/kernels/test_variants.py::test_variant_matches_reference_on_edge_cases[[]numba.gqa]",
    # Triton's interpreter: split and unified walk the fixed cases in ci, naive (a step per block) here
    "tests/kernels/test_variants.py::test_variant_matches_reference_on_edge_cases[[]triton.naive]",
    # The Numba family walks: split and multi in every one, the three simpler variants in turns (each in two
    # or more of them in ci), the rest here.
    "tests/kernels/test_numba_family.py::test_every_block_size_with_context_traps[[]numba.block]",
    "tests/kernels/test_numba_family.py::test_every_block_size_with_context_traps[[]numba.gqa]",
    "tests/kernels/test_numba_options.py::test_block_sizes_that_are_not_powers_of_two[[]numba.naive]",
    "tests/kernels/test_numba_options.py::test_block_sizes_that_are_not_powers_of_two[[]numba.gqa]",
    "tests/kernels/test_numba_options.py::test_head_dim_512[[]numba.block]",
    # split and multi: their option edge cases (tests/kernels/test_variants.py) and property tests in ci
    "tests/kernels/test_numba_family.py::test_each_option_matches_the_reference[[]*-numba.split]",
    "tests/kernels/test_numba_family.py::test_each_option_matches_the_reference[[]*-numba.multi]",
    "tests/kernels/test_numba_family.py::test_every_numba_kernel_compiles_for_real_gpus[[]sm_90-*",  # bf16/e4m3/options at sm_90
    # the negative controls' clean runs under the executor's modes (the property tests reject them in ci)
    "tests/kernels/test_cupy_family.py::test_cuda_c_variant_under_each_executor_mode[[]wrong.*",
    # FlashInfer's headers: a g++ run per head dim (the shared suite runs head dim 64 in both dtypes in ci)
    "tests/kernels/test_flashinfer_peer.py::test_head_dims_128_and_256*",
    "tests/kernels/test_flashinfer_peer.py::test_clean_and_right_under_the_executor_modes[[]asan-split]",  # asan in ci
    # two nvcc compiles; `python -m sandbox resources flashinfer.decode` runs the same census
    "tests/kernels/test_flashinfer_peer.py::test_compile_report_is_nvccs_census_of_both_kernels",
    # every default micro row of model-check (two of them in ci: test_model_check_writes_points_json...)
    "tests/analysis/test_model_check.py::test_the_default_micro_rows_are_within_15_percent",
    # every model-check row re-modelled against the docs' tables (two micro rows in ci: ...quotes_the_default_rows)
    "tests/analysis/test_model_tables.py::test_the_model_check_tables_are_the_model_now",
    # --kernel through the public sandbox.traffic (three new hd-64 builds); ci: the table on a fake counter
    "tests/serving/test_serving_model.py::test_the_kernel_table_asks_the_public_traffic_model",
)


def deep_tests_enabled() -> bool:
    return os.environ.get("HYPOTHESIS_PROFILE") == "thorough" or os.environ.get("SANDBOX_DEEP_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    if not deep_tests_enabled():
        deep = pytest.mark.skip(reason="deep tier: runs with HYPOTHESIS_PROFILE=thorough or SANDBOX_DEEP_TESTS=1 "
                                       "(make test-deep)")
        for item in items:
            if any(fnmatch.fnmatchcase(item.nodeid, pattern) for pattern in DEEP):
                item.add_marker(deep)
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
