"""Problem kinds as objects: what the sandbox knows about each kind of problem it solves, in one place.

    DECODE   paged attention, decode or several query tokens: DecodeProblem, sandbox.run, reference.paged_attention
    MLA      multi-head latent attention, dense or top-k sparse: MLAProblem, sandbox.run_mla, reference.mla_attention
    MICRO    a memory-system micro-benchmark (sandbox/problem/micro.py): MicroReadProblem, sandbox.traffic; no
             reference (a micro-kernel computes nothing anyone reads)

Where code would ask `if kind == "mla"`, a ProblemKind answers: its name (the registry's kinds and the results'
`problem` column), its problem class, the public entry point, a head dim the problem fixes, and the reference
call. The layers above this package attach their part of a kind when they load (ProblemKind.attach: the
variant layer its `prepare`, the traffic counter its `traffic_sample`, ...) and read it back with
ProblemKind.part(role), so a third kind is one instance here and one attach per layer, and no layer keeps a
switch on the kind's name. A variant's kind is named by its LIMITS (`LIMITS.problem`: Limits "decode",
MLALimits "mla", MicroLimits "micro").
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

import reference

from .decode import DecodeProblem
from . import mla_record
from .micro import MicroReadProblem
from .mla import MLAProblem


@dataclasses.dataclass(eq=False)
class ProblemKind:
    """One kind of problem.

    name: "decode" or "mla"; problem: its class; entry: the public runner users call; fixed_head_dim: the
    head dim every problem of the kind has (MLA's 576 latent dims), None where it is a parameter;
    reference_call(problem) -> (out, lse) float64, the truth a variant is held to (None: the kind has none).
    """

    name: str
    problem: type
    entry: str
    reference_call: Callable[[Any], tuple[np.ndarray, np.ndarray]] | None
    fixed_head_dim: int | None = None
    parts: dict = dataclasses.field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"ProblemKind({self.name})"

    def reference(self, problem) -> tuple[np.ndarray, np.ndarray]:
        """(out, lse) of `problem` in float64: out [num_query_tokens, num_heads, value dims], lse [num_query_tokens,
        num_heads] (natural log over the tokens read)."""
        if self.reference_call is None:
            raise ValueError(f"problem kind {self.name!r} has no reference: its kernels compute nothing checked")
        return self.reference_call(problem)

    def attach(self, **parts) -> None:
        """A layer above the problem package adds its part of the kind (role=implementation), once."""
        for role, implementation in parts.items():
            if self.parts.get(role, implementation) is not implementation:
                raise ValueError(f"{self.name}: a {role!r} is attached already")
            self.parts[role] = implementation

    def part(self, role: str):
        """The implementation a layer attached for `role`; ValueError naming the roles attached otherwise."""
        try:
            return self.parts[role]
        except KeyError:
            raise ValueError(f"problem kind {self.name!r} has no {role!r} attached (attached: "
                             f"{', '.join(self.parts) or 'none'}; the layer that provides it is not imported)") from None


def _decode_reference(problem: DecodeProblem):
    return reference.paged_attention(*problem.arrays(), **dict(problem.kwargs(), return_lse=True))


def _mla_reference(problem: MLAProblem):
    return reference.mla_attention(*problem.arrays(), **problem.kwargs(), return_lse=True)


DECODE = ProblemKind("decode", DecodeProblem, "sandbox.run", _decode_reference)
MLA = ProblemKind("mla", MLAProblem, "sandbox.run_mla", _mla_reference, fixed_head_dim=mla_record.LATENT_DIMS)
MICRO = ProblemKind("micro", MicroReadProblem, "sandbox.traffic", None)
# The kinds the registry's VARIANTS solve, held to their reference by the suites (registry.PROBLEMS).
CHECKED: tuple[ProblemKind, ...] = (DECODE, MLA)
KINDS: tuple[ProblemKind, ...] = CHECKED + (MICRO,)


def named(name: str) -> ProblemKind:
    """The kind called `name`; ValueError listing the kinds otherwise."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise ValueError(f"unknown problem kind {name!r}; known: {', '.join(k.name for k in KINDS)}")


def of(problem) -> ProblemKind:
    """The kind of a problem object; ValueError for anything else."""
    for kind in KINDS:
        if isinstance(problem, kind.problem):
            return kind
    raise ValueError(f"not a problem of a known kind: {type(problem).__name__} (known: "
                     f"{', '.join(k.problem.__name__ for k in KINDS)})")
