"""Shared test set-up: hypothesis profiles and the GPU marker.

Profiles: `ci` (default; fast enough for a 2-core machine without a GPU) and `thorough`
(HYPOTHESIS_PROFILE=thorough, for deep runs). Every random input is seeded: hypothesis prints the
drawn seed in the falsifying example, and derandomize keeps CI reproducible.
"""
import os

import pytest
from hypothesis import HealthCheck, settings

import sandbox  # noqa: F401  (chooses the Numba simulator before anything imports numba.cuda)
from sandbox.devices.backends import gpu_present

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=300, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
