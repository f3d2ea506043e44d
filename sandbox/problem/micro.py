"""The micro problem kind: a memory-system micro-benchmark over `total_bytes`, small and self-contained.

    MicroReadProblem(total_bytes)     what micro.read sweeps once (up to MAX_BYTES); its kernel shape (threads,
                                      blocks per SM, vector width, loads per thread) is the variant's tunables
    MICRO                             the kind's name in the registry ("micro")
    MicroLimits                       LIMITS of a micro variant: takes a MicroReadProblem, nothing else

No reference and no checker: a micro-kernel computes nothing anyone reads. It exists to be counted and modelled
like a variant, and to be compared with published measurements of the same kernel shape (model-check).
"""
from __future__ import annotations

import dataclasses

from ..errors import RefusedRequest

MICRO = "micro"
MAX_BYTES = 4 * 2**30  # the published stream sweeps read 1-2 GiB


@dataclasses.dataclass(frozen=True)
class MicroReadProblem:
    total_bytes: int

    def validate(self) -> None:
        if isinstance(self.total_bytes, bool) or not isinstance(self.total_bytes, int) or not (
                1 <= self.total_bytes <= MAX_BYTES):
            raise RefusedRequest(f"total_bytes must be an integer in 1..{MAX_BYTES}, got {self.total_bytes!r}")

    def describe(self) -> str:
        return f"micro read of {self.total_bytes:,} B"

    def ideal_bytes(self) -> int:
        return self.total_bytes


@dataclasses.dataclass(frozen=True)
class MicroLimits:
    problem: str = MICRO
    backends: tuple = ("cpu",)

    def check(self, name: str, problem, backend: str | None = None) -> None:
        if not isinstance(problem, MicroReadProblem):
            raise RefusedRequest(f"{name} takes a MicroReadProblem (sandbox.problem.micro), got "
                                 f"{type(problem).__name__}")
        problem.validate()
