"""Problem kinds as objects: what the sandbox knows about each kind of problem it solves, in one place.

    DECODE   paged attention, decode or several query tokens: DecodeProblem, sandbox.run, reference.paged_attention
    MLA      multi-head latent attention, dense or top-k sparse: MLAProblem, sandbox.run_mla, reference.mla_attention
             (its problem-layer parts: the sandbox/problem/mla/ package)
    MICRO    a memory-system micro-benchmark (sandbox/problem/micro.py): MicroReadProblem, sandbox.traffic; no
             reference (a micro-kernel computes nothing anyone reads)

Where code would ask `if kind == "mla"`, a ProblemKind answers. One interface, decode and MLA two instances:

    name, problem, entry, fixed_head_dim   the results' `problem` column, the problem class, the public runner
    random(seed, ...), validate(problem)   the seeded sampler and the validation (every input, before any launch)
    reference(problem), outputs(prepared)  the float64 truth and the LSE protocol: (out, lse) of a variant
    limits                                 the Limits class a variant of the kind declares (variant layer)
    strategies(limits, ...)                the hypothesis strategy property tests draw from (sandbox.problem.strategies,
                                           sandbox.problem.mla.strategies: imported on their own, for hypothesis)
    shape_grammar                          the sweep's shapes of the kind: format, matches(text), parse(text)
    summary_section(rows)                  the kind's table in the sweep summary
    check_problems(variant, seed, n), check(name, problem, backend, config), error_key(problem)   the check command

The layers above this package attach their part of a kind when they load (ProblemKind.attach, one role of ROLES
each: the variant layer its `limits` and `prepare`, the traffic counter its `traffic_sample`, ...) and read it back
through the methods above or ProblemKind.part(role), so a third kind is one instance here and one attach per
layer, and no layer keeps a switch on the kind's name. A variant's kind is named by its LIMITS (`LIMITS.kind`:
Limits DECODE, MLALimits MLA, MicroLimits MICRO).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

import reference

from .decode import DecodeProblem
from .mla import record as mla_record
from .micro import MicroLimits, MicroReadProblem
from .mla import MLAProblem


# role -> the layer that attaches it and what it is.
ROLES = {
    "limits": "variant: the Limits class a variant of the kind declares",
    "prepare": "variant: prepare(name, problem, backend, config) -> (prepared, resolved backend)",
    "strategies": "problem (hypothesis): strategies(limits, **shapes) -> a hypothesis strategy of problems",
    "shape_grammar": "sweep: the ShapeGrammar of the kind's sweep shapes",
    "shape_data": "sweep: shape_data(shape, seed) -> the tokens and problems of one sweep shape",
    "summary_section": "sweep report: summary_section(rows) -> the kind's lines of the sweep summary",
    "check_problems": "checking: check_problems(variant, seed, num_random) -> [(label, problem)]",
    "check": "checking: check(name, problem, backend, config) -> CheckResult",
    "error_key": "checking: error_key(problem) -> the label the check's worst error is reported per",
    "traffic_sample": "traffic: how a count samples sequences",
    "numba_representatives": "traffic: the blocks the Numba capture simulates (None: every one)",
    "numba_counted_multiply_adds": "traffic: the multiply-adds the Numba capture costs",
    "census_shape": "traffic: the compile census's shape keywords",
}


@dataclasses.dataclass(frozen=True)
class ShapeGrammar:
    """How the sweep (and `traffic --shape`) writes shapes of a kind: format (the help text), matches(text) -> bool,
    parse(text) -> a shape (ValueError naming the format for a malformed one)."""

    format: str
    matches: Callable[[str], bool]
    parse: Callable[[str], Any]


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

    def random(self, seed: int, **shape):
        """The kind's seeded sampler: problem.random(seed, **shape), whose repr is the call that rebuilds it."""
        if not hasattr(self.problem, "random"):
            raise ValueError(f"problem kind {self.name!r} has no sampler: {self.problem.__name__} is built directly")
        return self.problem.random(seed, **shape)

    def validate(self, problem):
        """ValueError naming the argument and the bound for a problem of this kind that no kernel may run (the
        problem's validate(): validate_decode_inputs, sandbox/problem/mla/validate.py's validate_mla_inputs)."""
        if not isinstance(problem, self.problem):
            raise ValueError(f"problem kind {self.name!r} validates a {self.problem.__name__}, got "
                             f"{type(problem).__name__}")
        problem.validate()
        return problem

    @staticmethod
    def outputs(prepared) -> tuple[np.ndarray, np.ndarray]:
        """The one LSE protocol every prepared variant follows: (result() -> out [num_query_tokens, num_heads,
        value dims], lse() -> lse float32 [num_query_tokens, num_heads], natural log), after launch()."""
        return np.asarray(prepared.result()), np.asarray(prepared.lse(), dtype=np.float32)

    @property
    def limits(self) -> type:
        """The Limits class a variant of this kind declares as LIMITS."""
        return self.part("limits")

    def strategies(self, limits, **shapes):
        """A hypothesis strategy of problems inside `limits` (import sandbox.problem.strategies and
        sandbox.problem.mla.strategies first: they attach the strategies, and import hypothesis)."""
        return self.part("strategies")(limits, **shapes)

    @property
    def shape_grammar(self) -> ShapeGrammar:
        """How the sweep writes shapes of this kind."""
        return self.part("shape_grammar")

    def summary_section(self, rows) -> list[str]:
        """The kind's lines of the sweep summary from the sweep's rows ([] when none of its points ran)."""
        return self.part("summary_section")(rows)

    def check_problems(self, variant, seed: int, num_random: int) -> list:
        """What `python -m sandbox check` runs on `variant`: [(label, problem)], edge cases then num_random
        random problems drawn from `seed`, all inside the variant's limits."""
        return list(self.part("check_problems")(variant, seed, num_random))

    def check(self, name: str, problem, backend: str = "auto", config: dict | None = None):
        """Variant `name` on `problem` against the reference: a CheckResult (out and lse compared)."""
        return self.part("check")(name, problem, backend, config)

    def error_key(self, problem) -> str:
        """The label the check command reports the worst error per ("bfloat16:fp8_record", ...)."""
        return self.part("error_key")(problem)

    def attach(self, **parts) -> None:
        """A layer above the problem package adds its part of the kind (role=implementation), once; a role
        outside ROLES is refused."""
        unknown = set(parts) - set(ROLES)
        if unknown:
            raise ValueError(f"{self.name}: unknown role(s) {', '.join(sorted(unknown))}; roles: {', '.join(ROLES)}")
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
MICRO = ProblemKind("micro", MicroReadProblem, "sandbox.traffic", None, parts={"limits": MicroLimits})
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
