"""AttentionOptions: what real models add to plain softmax attention, in one frozen object made from the table.

Its fields are the option table's (option_table.OPTIONS), in table order, each with the row's default;
validate() runs every row's checks, `features` names the rows in use, kernel_flags() / kernel_values()
give the kernels' compile-time bitmask and their option arguments in table order.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .option_schema import Context, Option
from .option_table import OPTIONS

FIELDS = tuple(field for row in OPTIONS for field in row.fields)
# Names a variant lists in Limits.options for what it supports (kv formats go in Limits.kv_dtypes).
FEATURES = tuple(row.feature for row in OPTIONS if row.declared_in == "options")
# DecodeProblem.random / shared keywords of every row, with their defaults.
PROBLEM_KEYWORDS = {name: default for row in OPTIONS for name, default in row.keywords.items()}
KERNEL_ARGS = tuple(arg for row in OPTIONS for arg in row.kernel_args)
KERNEL_FLAGS = tuple(row.flag for row in OPTIONS if row.flag is not None)
# The score modifiers, in table order: ((flag name, bit), ScoreHook); each family's score hook runs those whose
# bit is in a kernel's flags.
SCORE_HOOKS = tuple((row.flag, row.score) for row in OPTIONS if row.score is not None)
assert all(row.flag is not None for row in OPTIONS if row.score is not None), "a score modifier needs a flag bit"


def row(feature: str) -> Option:
    """The table's row of `feature`; ValueError listing the features otherwise."""
    for option in OPTIONS:
        if option.feature == feature:
            return option
    raise ValueError(f"no option {feature!r}; the table has {', '.join(o.feature for o in OPTIONS)}")


class _OptionsBehaviour:
    """What AttentionOptions does with its fields (they come from the table, see below)."""

    def __post_init__(self):
        for field in FIELDS:  # private, read-only arrays: the object is frozen
            value = getattr(self, field.name)
            if isinstance(value, np.ndarray):
                value = np.array(value, copy=True)
                value.flags.writeable = False
                object.__setattr__(self, field.name, value)

    def validate(self, context: Context | None = None) -> "AttentionOptions":
        """ValueError naming the option and its bound; `context` (num_heads, cache shape, ...) checks shapes."""
        context = Context() if context is None else context
        for option in OPTIONS:
            for field in option.fields:
                field.check(getattr(self, field.name), context)
        for option in OPTIONS:
            option.validate(self, context)
        return self

    @property
    def features(self) -> tuple[str, ...]:
        """The FEATURES this problem uses (what a variant must declare in Limits.options to accept it)."""
        return tuple(o.feature for o in OPTIONS if o.declared_in == "options" and o.in_use(self))

    def kwargs(self) -> dict:
        """Keyword arguments of sandbox.run / reference.paged_attention: every field."""
        return {field.name: getattr(self, field.name) for field in FIELDS}

    def describe(self) -> str:
        return ", ".join(o.describe(self) for o in OPTIONS if o.in_use(self)) or "plain"

    def kernel_flags(self) -> int:
        """The kernels' options bitmask: the flag bit of every row in use (pa::OPT_* in the CUDA C)."""
        flags = 0
        for option in OPTIONS:
            if option.flag is not None and (option.flag_in_use or option.in_use)(self):
                flags |= option.flag[1]
        return flags

    def kernel_values(self) -> tuple:
        """The option arguments of every attention kernel, in table order (KERNEL_ARGS): NumPy scalars and
        float32 arrays, each family uploading the arrays its way."""
        return tuple(arg.value(self) for arg in KERNEL_ARGS)

    def scale_factor(self) -> float:
        """What the kernels fold into their softmax scale (k_scale: scale * (q . k * k_scale))."""
        return math.prod(o.scale_factor(self) for o in OPTIONS if o.scale_factor is not None)

    @classmethod
    def from_kwargs(cls, **kwargs) -> "AttentionOptions":
        """From sandbox.run's keywords, each converted by its field (NumPy scalars -> Python numbers);
        an unknown keyword is a TypeError listing the known ones."""
        known = {field.name: field for field in FIELDS}
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r}; options: {', '.join(known)}")
        return cls(**{name: known[name].convert(value) for name, value in kwargs.items()})


AttentionOptions = dataclasses.make_dataclass(
    "AttentionOptions", [(f.name, Any, dataclasses.field(default=f.default)) for f in FIELDS],
    bases=(_OptionsBehaviour,), frozen=True, eq=False)
AttentionOptions.__module__ = __name__
AttentionOptions.__doc__ = "The attention options of one problem (frozen). Fields, from the option table:\n" + "\n".join(
    f"    {f.name} = {f.default!r}: {f.doc}" for f in FIELDS)

PLAIN = AttentionOptions()
