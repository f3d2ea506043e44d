"""CUDA's launch limits, checked before a launch: a grid or block that no GPU accepts is a ValueError
naming the kernel and the dimension, never a cryptic driver error (or, on the CPU executor, a run
that a GPU would refuse).

    check_grid(kernel_name, grid, block) -> (grid, block)   each a 3-tuple of ints; ValueError if over a limit
    CheckedModule(module)                                   a RawModule whose kernels check every launch

Limits (every GPU since compute capability 3.0, H200 included): grid.x <= 2^31 - 1, grid.y and
grid.z <= 65535; block.x and block.y <= 1024, block.z <= 64, and at most 1024 threads per block.
Every dimension is >= 1.
"""
from __future__ import annotations

MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
_AXES = "xyz"


def _dims(kernel_name: str, what: str, value) -> tuple[int, int, int]:
    if hasattr(value, "__index__"):
        value = (value,)
    try:
        dims = [int(v.__index__()) for v in value]
    except (TypeError, AttributeError):
        raise ValueError(f"kernel {kernel_name!r}: {what} must be an int or a tuple of 1 to 3 ints, "
                         f"got {value!r}") from None
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"kernel {kernel_name!r}: {what} must have 1 to 3 dimensions, got {value!r}")
    return tuple(dims + [1] * (3 - len(dims)))


def check_grid(kernel_name: str, grid, block) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Refuse a launch configuration over CUDA's limits, naming the dimension; return both as 3-tuples.

    `grid` and `block` are what a launch takes: an int or a tuple of 1 to 3 ints (missing ones are 1).
    """
    grid3 = _dims(kernel_name, "grid", grid)
    block3 = _dims(kernel_name, "block", block)
    for what, dims, limits in (("grid", grid3, MAX_GRID), ("block", block3, MAX_BLOCK)):
        for axis, value, limit in zip(_AXES, dims, limits):
            if value < 1:
                raise ValueError(f"kernel {kernel_name!r}: {what}.{axis} = {value} must be >= 1 "
                                 f"({what} {dims})")
            if value > limit:
                raise ValueError(f"kernel {kernel_name!r}: {what}.{axis} = {value} exceeds CUDA's limit of {limit} "
                                 f"({what} {dims})")
    threads = block3[0] * block3[1] * block3[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"kernel {kernel_name!r}: block {block3} has {threads} threads; CUDA allows at most "
                         f"{MAX_THREADS_PER_BLOCK} per block")
    return grid3, block3


class CheckedKernel:
    """A RawKernel (CuPy's or the CPU executor's) whose every call checks its grid and block first.

    Everything else (attributes such as max_dynamic_shared_size_bytes, asan, thread_order) reads and
    writes through to the wrapped kernel.
    """

    __slots__ = ("_kernel", "_name")

    def __init__(self, kernel, name: str):
        object.__setattr__(self, "_kernel", kernel)
        object.__setattr__(self, "_name", name)

    def __call__(self, grid, block, args, *rest, **kwargs):
        check_grid(self._name, grid, block)
        return self._kernel(grid, block, args, *rest, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._kernel, attr)

    def __setattr__(self, attr, value):
        setattr(self._kernel, attr, value)

    def __repr__(self) -> str:
        return f"CheckedKernel({self._kernel!r})"


class CheckedModule:
    """A RawModule whose get_function returns CheckedKernel; everything else passes through."""

    __slots__ = ("_module",)

    def __init__(self, module):
        object.__setattr__(self, "_module", module)

    def get_function(self, name: str) -> CheckedKernel:
        return CheckedKernel(self._module.get_function(name), name)

    def __getattr__(self, attr):
        return getattr(self._module, attr)

    def __setattr__(self, attr, value):
        setattr(self._module, attr, value)

    def __repr__(self) -> str:
        return f"CheckedModule({self._module!r})"
