"""sandbox.devices.grid: CUDA's grid and block limits, refused before any launch, on the CPU executor as on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.devices import backends
from sandbox.devices.grid import CheckedKernel, CheckedModule, check_grid


def test_limits_accept_the_largest_legal_launch_and_normalize():
    assert check_grid("k", 7, 128) == ((7, 1, 1), (128, 1, 1))
    assert check_grid("k", (2**31 - 1, 65535, 65535), (1024, 1, 1)) == ((2**31 - 1, 65535, 65535), (1024, 1, 1))
    assert check_grid("k", (np.int64(3), 2), (32, 32)) == ((3, 2, 1), (32, 32, 1))
    assert check_grid("k", (1,), (1, 1, 64)) == ((1, 1, 1), (1, 1, 64))


@pytest.mark.parametrize("grid, block, message", [
    ((2**31, 1, 1), 128, "grid.x = 2147483648 exceeds CUDA's limit of 2147483647"),
    ((1, 65536), 128, "grid.y = 65536 exceeds CUDA's limit of 65535"),
    ((1, 1, 65536), 128, "grid.z = 65536 exceeds CUDA's limit of 65535"),
    (0, 128, "grid.x = 0 must be >= 1"),
    (1, 1025, "block.x = 1025 exceeds CUDA's limit of 1024"),
    (1, (1, 1025), "block.y = 1025 exceeds CUDA's limit of 1024"),
    (1, (1, 1, 65), "block.z = 65 exceeds CUDA's limit of 64"),
    (1, (64, 32), "block (64, 32, 1) has 2048 threads; CUDA allows at most 1024"),
    ((1, 1, 1, 1), 1, "grid must have 1 to 3 dimensions"),
    (1, "x", "block must be an int or a tuple"),
])
def test_each_limit_is_refused_naming_the_kernel_and_dimension(grid, block, message):
    with pytest.raises(ValueError, match="kernel 'attn<16>'") as info:
        check_grid("attn<16>", grid, block)
    assert message in str(info.value)


class _FakeKernel:
    def __init__(self):
        self.calls = []
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, **kwargs):
        self.calls.append((grid, block, args, kwargs))


class _FakeModule:
    def __init__(self):
        self.kernel = _FakeKernel()
        self.extra = "passes through"

    def get_function(self, name):
        return self.kernel


def test_checked_module_checks_every_launch_and_passes_the_rest_through():
    module = CheckedModule(_FakeModule())
    assert module.extra == "passes through"
    kernel = module.get_function("k")
    assert isinstance(kernel, CheckedKernel)
    kernel((2, 3), 64, ("a",), shared_mem=128)
    assert module._module.kernel.calls == [((2, 3), 64, ("a",), {"shared_mem": 128})]
    kernel.max_dynamic_shared_size_bytes = 65536  # attribute writes reach the real kernel
    assert module._module.kernel.max_dynamic_shared_size_bytes == 65536
    with pytest.raises(ValueError, match="kernel 'k': grid.y = 70000"):
        kernel((1, 70000), 64, ())
    assert len(module._module.kernel.calls) == 1  # the refused launch never reached the kernel


def test_raw_module_on_the_cpu_refuses_an_over_limit_grid_before_launch():
    code = "extern \"C\" __global__ void touch(float *x) { x[blockIdx.y] = 1.0f; }"
    module = backends.raw_module("cpu", code)
    assert isinstance(module, CheckedModule)
    kernel = module.get_function("touch")
    x = np.zeros(2, dtype=np.float32)
    kernel((1, 2), (1,), (x,))
    assert x.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="kernel 'touch': grid.y = 65536 exceeds CUDA's limit of 65535"):
        kernel((1, 65536), (1,), (x,))


@pytest.mark.gpu
def test_raw_module_on_the_gpu_refuses_an_over_limit_grid_before_launch():
    if not backends.cupy_usable():
        pytest.skip("needs a GPU and CuPy")
    module = backends.raw_module("gpu", "extern \"C\" __global__ void touch(float *x) { x[0] = 1.0f; }")
    with pytest.raises(ValueError, match="block.z = 65 exceeds"):
        module.get_function("touch")(1, (1, 1, 65), (None,))
