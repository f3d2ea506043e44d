"""The one list of variants: name -> module, and of kernel families: name -> package. Tests, check, benchmarks
and the sweep walk it.

Adding a variant is one module plus one line here; adding a kernel family is one package under kernels/ (its
FAMILY, sandbox/variant/family.py) plus one line in FAMILIES. Modules load lazily, so importing the
sandbox never imports numba.cuda or CuPy. Each variant solves one kind of problem (PROBLEMS), read
from its LIMITS (`LIMITS.kind`: sandbox.problem.kinds.DECODE for Limits, MLA for MLALimits); variants(problem=...)
walks one kind, so the decode suites never meet an MLA variant and the other way round.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
import types

from ..problem import kinds
from ..problem.kinds import ProblemKind
from . import tunables
from .family import Family
from .limits import Limits
from ..errors import RefusedRequest

PROBLEMS = tuple(kind.name for kind in kinds.CHECKED)

# Kernel families: the variants' name prefix -> the module whose FAMILY declares how they run (family.py).
FAMILIES = {
    "numpy": "kernels.numpy_family",
    "numba": "kernels.numba_cuda",
    "cupy": "kernels.cupy_raw",
    "triton": "kernels.triton",
    "micro": "kernels.micro",
    "flashinfer": "kernels.flashinfer",
}

VARIANTS = {
    "numpy.gather": "kernels.numpy_gather",
    "numba.naive": "kernels.numba_cuda.naive",
    "numba.block": "kernels.numba_cuda.block",
    "numba.split": "kernels.numba_cuda.split",
    "numba.gqa": "kernels.numba_cuda.gqa",
    "numba.multi": "kernels.numba_cuda.multi",
    "cupy.v1": "kernels.cupy_raw.v1",
    "cupy.v2": "kernels.cupy_raw.v2",
    "cupy.gqa": "kernels.cupy_raw.gqa",
    "cupy.rows": "kernels.cupy_raw.rows",
    "cupy.dense": "kernels.cupy_raw.dense",
    "cupy.multi": "kernels.cupy_raw.multi",
    "cupy.cascade": "kernels.cupy_raw.cascade",
    "cupy.tc": "kernels.cupy_raw.tc",
    "triton.naive": "kernels.triton.naive",
    "triton.split": "kernels.triton.split",
    "triton.unified": "kernels.triton.unified",
    # peers: other projects' kernels from their wheels' headers (unavailable, with the reason, without the wheel)
    "flashinfer.decode": "kernels.flashinfer.decode",
    # MLA (LIMITS is an MLALimits: they solve MLAProblem, sandbox.run_mla)
    "numpy.mla": "kernels.numpy_mla",
    "numba.mla": "kernels.numba_cuda.mla",
    "cupy.mla": "kernels.cupy_raw.mla",
    "cupy.mla_tc": "kernels.cupy_raw.mla_tc",
}

# Deliberately broken variants (negative controls): the checker must reject every one.
# Named wrong.<family>.<flaw> so the family (and so the backend) is the broken kernel's own. "module:name" is a
# row of a table of controls (kernels/wrong/cupy_controls.py), a module-like object.
WRONG_VARIANTS = {
    "wrong.numba.ignores_table": "kernels.wrong.numba_ignores_table",
    "wrong.numba.off_by_one": "kernels.wrong.numba_off_by_one",
    "wrong.numba.causal_off_by_one": "kernels.wrong.numba_causal_off_by_one",
    "wrong.numba.split_sink_per_partition": "kernels.wrong.numba_split_sink_per_partition",
    "wrong.cupy.ignores_table": "kernels.wrong.cupy_controls:ignores_table",
    "wrong.cupy.off_by_one": "kernels.wrong.cupy_controls:off_by_one",
    "wrong.cupy.causal_off_by_one": "kernels.wrong.cupy_controls:causal_off_by_one",
    "wrong.cupy.cascade_partial_block": "kernels.wrong.cupy_cascade_partial_block",
    "wrong.cupy.window_off_by_one": "kernels.wrong.cupy_controls:window_off_by_one",
    "wrong.cupy.softcap_before_scale": "kernels.wrong.cupy_controls:softcap_before_scale",
    "wrong.cupy.alibi_flipped": "kernels.wrong.cupy_controls:alibi_flipped",
    "wrong.cupy.uncoalesced_k": "kernels.wrong.cupy_controls:uncoalesced_k",
    "wrong.cupy.lse_base2": "kernels.wrong.cupy_controls:lse_base2",
    "wrong.cupy.neighbour_head_scale": "kernels.wrong.cupy_controls:neighbour_head_scale",
    "wrong.cupy.mla_v_from_rope": "kernels.wrong.cupy_controls:mla_v_from_rope",
    "wrong.cupy.mla_invalid_as_slot0": "kernels.wrong.cupy_controls:mla_invalid_as_slot0",
    "wrong.triton.skips_first_token": "kernels.wrong.triton_skips_first_token",
}

# Micro-benchmark kernels (the "micro" problem kind, sandbox.problem.micro): counted and modelled like a variant,
# checked against published measurements by `python -m sandbox model-check`; no suite that walks VARIANTS meets them.
MICRO_VARIANTS = {
    "micro.read": "kernels.micro.read",
}

# Cache-write kernels (slot_mapping -> cache, slot < 0 skipped). Each module provides
# prepare_write(key_cache, value_cache, key, value, slot_mapping, backend) -> Prepared whose
# result() returns (key_cache, value_cache) as host arrays; inputs are validated by
# sandbox.problem.validate.validate_write_inputs first.
CACHE_WRITERS = {
    "numba.write_cache": "kernels.numba_cuda.write_cache",
    "cupy.write_cache": "kernels.cupy_raw.write_cache",
}


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    module: types.ModuleType

    @property
    def family(self) -> str:
        """numpy | numba | cupy | triton | micro: decides the backend (for wrong.* the family of the broken kernel)."""
        return self.name.split(".")[1] if self.name.startswith("wrong.") else self.name.split(".")[0]

    @property
    def family_plugin(self) -> Family:
        """The family's declaration: how its variants run, get counted and report their census."""
        return family(self.family)

    @property
    def limits(self) -> Limits:
        return getattr(self.module, "LIMITS", Limits())

    @property
    def kind(self) -> ProblemKind:
        """The kind of problem it solves (sandbox.problem.kinds), as its LIMITS name it: Limits "decode", MLALimits
        "mla", MicroLimits "micro"."""
        return kinds.named(self.limits.problem)

    @property
    def problem(self) -> str:
        """The name of its kind: "decode" (DecodeProblem, sandbox.run) or "mla" (MLAProblem, sandbox.run_mla)."""
        return self.kind.name

    @property
    def summary(self) -> str:
        """The docstring's first sentence, whole (it may wrap over several lines), for `python -m sandbox list`."""
        return first_sentence(self.module.__doc__ or "")

    @property
    def tunables(self) -> dict[str, tuple]:
        """{parameter: allowed values}, the default first (see sandbox.variant.tunables)."""
        return tunables.declared(self.module)

    def configuration(self, config: dict | None = None) -> dict:
        """`config` with the defaults filled in; an undeclared parameter or value is refused."""
        return tunables.resolve(self.name, self.module, config)

    def prepare(self, problem, backend: str, config: dict | None = None):
        """The module's prepare, given the configuration's parameters as keyword arguments."""
        return self.module.prepare(problem, backend, **self.configuration(config))


def family(name: str) -> Family:
    """The kernel family called `name` (FAMILIES); an unknown name lists the valid ones."""
    if name not in FAMILIES:
        raise ValueError(f"unknown kernel family {name!r}; valid names: {', '.join(FAMILIES)}")
    declared = importlib.import_module(FAMILIES[name]).FAMILY
    if not isinstance(declared, Family) or declared.name != name:
        raise TypeError(f"{FAMILIES[name]}.FAMILY must be a sandbox.variant.family.Family named {name!r}")
    return declared


def labelled(name: str) -> str:
    """`name`, with "(peer: <project> <version>)" for a variant of a peer family (Family.peer: the version its
    wheel has, or why it is unavailable), as the sweep's tables and plots show it; a name outside the registry
    (the sweep's own torch.sdpa) as it is."""
    prefix = name.split(".")[1] if name.startswith("wrong.") else name.split(".")[0]
    if name not in VARIANTS and name not in WRONG_VARIANTS or prefix not in FAMILIES:
        return name
    peer = family(prefix).peer_label()
    return f"{name} ({peer})" if peer else name


def first_sentence(doc: str) -> str:
    """The first paragraph's text up to its first sentence end (". " before a capital, or the paragraph's end)."""
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(paragraph, 1)[0]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"])")


def variants(family: str | None = None, problem: str | None = "decode") -> list[str]:
    """Registered variant names, optionally of one family ("numpy", "numba", "cupy", "triton", or "wrong"), solving one
    kind of problem (PROBLEMS: "decode" by default, "mla"; None: every kind)."""
    if problem is not None and problem not in PROBLEMS:
        raise RefusedRequest(f"unknown problem kind {problem!r}; known: {', '.join(PROBLEMS)}")
    if family == "wrong":
        names = list(WRONG_VARIANTS)
    else:
        names = [n for n in VARIANTS if family is None or n.split(".")[0] == family]
    return names if problem is None else [n for n in names if get(n).problem == problem]


def cache_writers(family: str | None = None) -> list[str]:
    """Registered cache-write kernels, optionally of one family."""
    return [n for n in CACHE_WRITERS if family is None or n.split(".")[0] == family]


def get_cache_writer(name: str) -> Variant:
    if name not in CACHE_WRITERS:
        raise RefusedRequest(f"unknown cache writer {name!r}; valid names: {', '.join(CACHE_WRITERS)}")
    return Variant(name, importlib.import_module(CACHE_WRITERS[name]))


def get(name: str, problem: str | None = None) -> Variant:
    """The variant called `name`; an unknown name lists the valid ones. With `problem` ("decode", "mla"), a
    variant of another kind is refused (ValueError) with the names of that kind."""
    path = VARIANTS.get(name) or WRONG_VARIANTS.get(name) or MICRO_VARIANTS.get(name)
    if path is None:
        valid = ", ".join(list(VARIANTS) + list(WRONG_VARIANTS) + list(MICRO_VARIANTS))
        raise RefusedRequest(f"unknown variant {name!r}; valid names: {valid}")
    module, _, row = path.partition(":")
    variant = Variant(name, getattr(importlib.import_module(module), row) if row else importlib.import_module(module))
    if problem is not None and variant.problem != problem:
        raise RefusedRequest(f"{name} solves {variant.problem} problems ({variant.kind.entry}), not {problem}; "
                             f"{problem} variants: {', '.join(variants(problem=problem))}")
    return variant


def declared_tunables(name: str) -> dict[str, tuple]:
    """sandbox.tunables(name): the variant's {parameter: allowed values}, the default first ({}: none)."""
    return get(name).tunables
