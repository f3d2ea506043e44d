"""What a variant module provides, and how its declared limits are enforced before any launch.

A variant is one module with:
    LIMITS: Limits                                  what it supports
    prepare(problem, backend) -> Prepared           untimed: layout conversion, upload, compile
and Prepared has:
    launch() -> None                                the only timed part (asynchronous on a GPU)
    result() -> np.ndarray [num_seqs, num_heads, head_dim], dtype of the query (synchronizes)
Optional:
    compile_report(block_size, head_dim, dtype, arch) -> dict   static resources (see sandbox.resources)
"""
from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

POW2_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Unsupported(ValueError):
    """A variant refuses a problem it was not built for (declared limits, or a prepare that cannot fit it).

    Raise it (not a bare ValueError) from `prepare` to refuse: the sweep records the point as
    `unsupported`; any other exception from a variant is an `error`.
    """
DTYPES = ("float32", "float16")


@dataclasses.dataclass(frozen=True)
class Limits:
    """Declared support. None means "any"."""

    block_sizes: tuple[int, ...] | None = POW2_BLOCK_SIZES
    head_dims: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] = DTYPES
    backends: tuple[str, ...] = ("gpu", "cpu")

    def check(self, name: str, problem, backend: str | None = None) -> None:
        """Raise Unsupported (a ValueError) naming the unsupported property and what is supported."""
        def refuse(what, value, allowed):
            raise Unsupported(f"{name} does not support {what}={value} (supported: {', '.join(map(str, allowed))})")

        if self.block_sizes is not None and problem.block_size not in self.block_sizes:
            refuse("block_size", problem.block_size, self.block_sizes)
        if self.head_dims is not None and problem.head_dim not in self.head_dims:
            refuse("head_dim", problem.head_dim, self.head_dims)
        if np.dtype(problem.dtype).name not in self.dtypes:
            refuse("dtype", np.dtype(problem.dtype).name, self.dtypes)
        if backend is not None and backend not in self.backends:
            refuse("backend", repr(backend), self.backends)

    def supports(self, problem, backend: str | None = None) -> bool:
        try:
            self.check("variant", problem, backend)
        except Unsupported:
            return False
        return True


class Prepared(Protocol):
    def launch(self) -> None: ...

    def result(self) -> np.ndarray: ...
