"""The columns of the option table (option_table.py): what one row says about one option.

A row is read by every layer: AttentionOptions takes its fields (default, validation), sandbox.run,
reference.paged_attention and DecodeProblem.random/shared take them as keywords, the hypothesis strategy
and `check` draw it (draw, random, cases, together), the sweep parses its tokens, and both kernel families
read its flag bit and kernel arguments, in table order.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Context:
    """What a row's functions may know about the problem around the option (None: not known here).

    num_heads, head_dim: the query's; kv_format: the cache's format (the query's dtype name, an fp8 name
    or "nvfp4"); cache_slots: (num_blocks, block_size, num_kv_heads) of the cache; block_size and
    context_lens: what the draws aim their edge cases at; kv_formats: the cache formats a variant
    declares besides the query's dtype (check's cases).
    """

    num_heads: int | None = None
    head_dim: int | None = None
    kv_format: str | None = None
    cache_slots: tuple[int, int, int] | None = None
    block_size: int | None = None
    context_lens: tuple[int, ...] = ()
    kv_formats: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Field:
    """One AttentionOptions attribute; also a keyword of sandbox.run and reference.paged_attention.

    check(value, context) raises ValueError naming the field and its bound (the default always passes);
    convert(value) turns what a user passes into what the options hold (NumPy scalars into Python numbers).
    per_slot: an array [num_blocks, block_size, ...] beside the cache; slots no query token reads may hold
    anything (DecodeProblem puts NaN there, and a copy-on-write copies them with the cache).
    """

    name: str
    default: Any
    check: Callable[[Any, Context], None]
    doc: str
    convert: Callable[[Any], Any] = lambda value: value
    per_slot: bool = False


@dataclasses.dataclass(frozen=True)
class Token:
    """One word of the sweep's --options: `name` (value None) or `name=VALUE`.

    parse(text) -> value (ValueError saying what VALUE must be); keywords(value, context) ->
    DecodeProblem keywords; text(value) -> the word as parse reads it back.
    """

    name: str
    takes: str | None
    parse: Callable[[str], Any]
    keywords: Callable[[Any, Context], dict]
    text: Callable[[Any], str]


@dataclasses.dataclass(frozen=True)
class KernelArg:
    """One kernel argument of an option: C parameter `ctype name` and Numba OptionArgs field `name`.

    value(options) -> the host value (a NumPy scalar of the C type, or a float32 array that each family
    uploads its way); an option not in use passes a neutral value that its code never reads.
    """

    name: str
    ctype: str
    value: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class ScoreHook:
    """How an option rewrites a logit s (scaled, float32) of query position p, token t, query head h and KV
    head kv, in both kernel families; the rows' hooks apply in table order, each only when its flag is set.

    cuda: C++ statements on `float s` inside pa::Options<FLAGS>::logit (kernels/cupy_raw/options.cuh), with
        `at` (pa::ScoreAt: q_pos, kv_pos, q_head, kv_head, head) and the OptionArgs fields (the table's kernel
        arguments) in scope.
    cuda_head: per-head float values, (name, C++ expression of `q_head` and the OptionArgs fields): a kernel
        loads them once per query head it serves, before its tokens, and `cuda` reads them as `at.head.<name>`
        (a per-logit load of a loop-invariant value costs registers, and spilled in cupy.v1).
    numba: a plain function (s, opts, q_pos, kv_pos, q_head, kv_head) -> s that kernels/numba_cuda/options.py
        compiles as an inlined device function (opts: the OptionArgs named tuple; keep float32: np.float32()).
    The reference states the same rule in its own loop (reference/paged_attention.py).
    """

    cuda: str
    numba: Callable
    cuda_head: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Case:
    """A named fixed problem of `check`: DecodeProblem.random keywords; brief cases also run in the slow families."""

    label: str
    keywords: dict
    brief: bool = False


def _always(context: Context) -> bool:
    return True


def _no_cases(context: Context) -> list:
    return []


def _no_check(options, context: Context) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Option:
    """One row of the table.

    feature: its name in Limits.options (or Limits.kv_dtypes when declared_in is "kv_dtypes") and in
        AttentionOptions.features; in_use(options) says whether a problem uses it.
    fields: its AttentionOptions attributes; validate(options, context): checks across fields and shapes.
    keywords: DecodeProblem.random/shared keywords with their defaults; build(keywords, context, rng) ->
        field values, from every row's keywords (defaults filled: exclusive options see each other) and
        rng, the problem's generator (None where nothing is drawn).
    draw(draw, st, context) / random(rng, context) -> keywords: the hypothesis strategy's draw and
        check's random draw; cases(context) -> [Case]: check's fixed edge cases; together(context) ->
        keywords: its share of check's "every option at once"; applies(context): whether it can be drawn
        for such a problem at all; excludes: features it cannot be used with.
    example: DecodeProblem.random keywords that switch it on in any small problem (the refusal tests).
    tokens: its words in the sweep's --options. describe(options) -> text for DecodeProblem.describe().
    flag: ("OPT_NAME", bit) of the kernels' options bitmask, set when flag_in_use(options) (default
        in_use); kernel_args: its kernel arguments, in order; scale_factor(options): a factor the kernels
        fold into their softmax scale.
    """

    feature: str
    description: str
    fields: tuple[Field, ...]
    in_use: Callable[[Any], bool]
    keywords: dict
    build: Callable[[dict, Context, Any], dict]
    describe: Callable[[Any], str]
    example: dict
    validate: Callable[[Any, Context], None] = _no_check
    draw: Callable | None = None
    random: Callable | None = None
    cases: Callable[[Context], list] = _no_cases
    together: Callable[[Context], dict] | None = None
    applies: Callable[[Context], bool] = _always
    excludes: tuple[str, ...] = ()
    tokens: tuple[Token, ...] = ()
    declared_in: str = "options"
    flag: tuple[str, int] | None = None
    flag_in_use: Callable[[Any], bool] | None = None
    kernel_args: tuple[KernelArg, ...] = ()
    scale_factor: Callable[[Any], float] | None = None
    score: ScoreHook | None = None
