"""The option table: every attention option, one row each, in the order the kernels take their arguments.

For query head h at position p (decode: p = L - 1) and token t (docs/design.md has the whole contract):
    window     only tokens t >= p - window_left take part                  (Mistral, Gemma)
    softcap    s_t = cap * tanh(s_t / cap), after the softmax scale        (Gemma 2)
    alibi      s_t += alibi_slopes[h] * (t - p)                            (BLOOM, MPT)
    kv_scale   k_t = float(key_cache[t]) * k_scale, v_t = float(value_cache[t]) * v_scale
    kv_scales  fp8 per token and KV head: k_t = float(key_cache[t]) * k_scales[slot of t, kv head]
    nvfp4      k_t = e2m1(key_cache[t]) * k_block_scales[slot of t, kv head, i // 16] * k_scale
    sinks      out = sum_t e^(s_t - m) v_t / (sum_t e^(s_t - m) + e^(sinks[h] - m)),
               m = max(max_t s_t, sinks[h])                               (gpt-oss)
    lse        return_lse: also lse = log sum_t exp(s_t) (natural log, tokens only)
(nvfp4 is a cache format: a variant declares it in Limits.kv_dtypes; its row holds the block scales.)

The columns are option_schema.Option's. Each layer reads the rows: AttentionOptions (options.py), the
problem and its validation, sandbox.run, the hypothesis strategy, check, the sweep's --options
(option_tokens.py) and the kernel families (flag bits, arguments in table order). docs/options.md says
how to add a row.
"""
from __future__ import annotations

import importlib
import math
import numbers
import os

import numpy as np

from .dtypes import FP8_DTYPES, NVFP4, default_kv_scale
from .option_schema import Case, Context, Field, KernelArg, Option, ScoreHook, Token
from ..errors import RefusedRequest

INT32_MAX = 2**31 - 1
NVFP4_GROUP = 16  # values per e4m3 block scale of an NVFP4 cache


# ---------------------------------------------------------------- shared checks and conversions

def real(value):
    """NumPy scalars as Python numbers; anything else is left for the check to name."""
    return value.item() if isinstance(value, np.generic) else value


def is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_scale(name: str):
    def check(value, context: Context) -> None:
        if not (is_real(value) and math.isfinite(value) and value > 0):
            raise RefusedRequest(f"{name} must be a positive finite number, got {value!r}")
    return check


def head_vector(name: str, what: str):
    """Check of an optional float32 [num_heads] array of finite values."""
    def check(value, context: Context) -> None:
        if value is None:
            return
        if not isinstance(value, np.ndarray) or value.dtype != np.float32:
            got = value.dtype.name if isinstance(value, np.ndarray) else type(value).__name__
            raise RefusedRequest(f"{name} must be a float32 NumPy array [num_heads] ({what}), got {got}")
        if value.ndim != 1 or (context.num_heads is not None and value.shape[0] != context.num_heads):
            raise RefusedRequest(f"{name} must have shape ({context.num_heads},) = [num_heads], got {value.shape}")
        if not np.isfinite(value).all():
            i = int(np.flatnonzero(~np.isfinite(value))[0])
            raise RefusedRequest(f"{name}[{i}] = {value[i]} is not finite")
    return check


def head_values(name: str, keyword, context: Context, rng, random):
    """A [num_heads] keyword as float32: None, "random" (random(rng, num_heads)) or a list of floats."""
    if keyword is None:
        return None
    if isinstance(keyword, str):
        if keyword == "random" and rng is not None:
            return random(rng, context.num_heads)
        raise RefusedRequest(f"{name} must be None, 'random' or a list of floats, got {keyword!r}")
    return np.asarray(keyword, dtype=np.float32)


def positive_number_token(name: str):
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or x <= 0:
            raise RefusedRequest(f"{name} must be a positive finite number, got {text!r}")
        return x
    return parse


# ---------------------------------------------------------------- window: sliding window

def _check_window(value, context: Context) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < -1:
        raise RefusedRequest(f"window_left must be an integer >= -1 (-1: no window), got {value!r}")


def _window_draw(draw, st, context: Context) -> dict:
    """-1 (off), or a window whose start (L-1-W) sits at k*bs or k*bs+1 of the first sequence, 0, or longer than it."""
    kind = draw(st.sampled_from(["off", "off", "edge", "edge_plus_1", "last_token", "longer", "any"]))
    block_size, last = context.block_size, context.context_lens[0] - 1
    if kind == "off":
        window = -1
    elif kind == "last_token":
        window = 0
    elif kind == "longer":
        window = last + draw(st.integers(0, 3 * block_size))
    elif kind == "any":
        window = draw(st.integers(0, max(last, 0)))
    else:
        k = draw(st.integers(0, last // block_size))
        window = max(0, last - (k * block_size + (1 if kind == "edge_plus_1" else 0)))
    return dict(window_left=window, free_outside_window=draw(st.booleans()))


def _window_cases(context: Context) -> list:
    last, bs = context.context_lens[0] - 1, context.block_size
    return [Case("window_start_k_block", dict(window_left=last - 2 * bs)),
            Case("window_start_k_block_plus_1", dict(window_left=last - 2 * bs - 1), brief=True),
            Case("window_last_token", dict(window_left=0)),
            Case("window_longer_than_context", dict(window_left=10 * bs))]


def _window_token(text: str) -> int:
    if not text.isdigit():
        raise RefusedRequest(f"window must be an integer >= 0 (tokens before the query position still read), got {text!r}")
    return int(text)


WINDOW = Option(
    feature="window",
    description="sliding window: only tokens t >= p - window_left take part; blocks wholly before it may be freed (-1)",
    fields=(Field("window_left", -1, _check_window, "int >= -1: tokens before the query position still read (-1: off)",
                  real),),
    in_use=lambda o: o.window_left >= 0,
    keywords=dict(window_left=-1, free_outside_window=True),
    build=lambda kw, c, rng: dict(window_left=int(kw["window_left"])),
    describe=lambda o: f"window_left={o.window_left}",
    example=dict(window_left=3),
    draw=_window_draw,
    random=lambda rng, c: dict(window_left=int(rng.integers(0, 200))),
    cases=_window_cases,
    together=lambda c: dict(window_left=2 * c.block_size + 1),
    tokens=(Token("window", "N", _window_token, lambda w, c: dict(window_left=w), lambda w: f"window={w}"),),
    flag=("OPT_WINDOW", 1),
    kernel_args=(KernelArg("window_left", "int", lambda o: np.int32(min(int(o.window_left), INT32_MAX))),),
)


# ---------------------------------------------------------------- softcap: logit soft-capping

def _check_soft_cap(value, context: Context) -> None:
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise RefusedRequest(f"logits_soft_cap must be a finite number >= 0 (0: off), got {value!r}")


def _softcap_score(s, opts, q_pos, kv_pos, q_head, kv_head):
    return opts.soft_cap * math.tanh(s / opts.soft_cap)


SOFTCAP = Option(
    feature="softcap",
    description="soft-cap: s_t = cap * tanh(s_t / cap) after the softmax scale, before ALiBi",
    fields=(Field("logits_soft_cap", 0.0, _check_soft_cap, "float >= 0: the cap (0: off)", real),),
    in_use=lambda o: o.logits_soft_cap > 0,
    keywords=dict(logits_soft_cap=0.0),
    build=lambda kw, c, rng: dict(logits_soft_cap=float(kw["logits_soft_cap"])),
    describe=lambda o: f"softcap={o.logits_soft_cap:g}",
    example=dict(logits_soft_cap=5.0),
    draw=lambda draw, st, c: dict(logits_soft_cap=draw(st.sampled_from([1.0, 5.0, 30.0]))),
    random=lambda rng, c: dict(logits_soft_cap=float(rng.choice([5.0, 30.0]))),
    cases=lambda c: [Case("softcap_bites_on_extreme_logits", dict(logits_soft_cap=5.0, extreme_logits=True), brief=True)],
    together=lambda c: dict(logits_soft_cap=30.0),
    tokens=(Token("softcap", "X", positive_number_token("softcap"), lambda x, c: dict(logits_soft_cap=x),
                  lambda x: f"softcap={x:g}"),),
    flag=("OPT_SOFTCAP", 2),
    kernel_args=(KernelArg("soft_cap", "float", lambda o: np.float32(o.logits_soft_cap)),),
    score=ScoreHook(cuda="s = soft_cap * tanhf(s * (1.f / soft_cap));", numba=_softcap_score),
)


# ---------------------------------------------------------------- alibi: linear position biases

def alibi_paper_slopes(num_heads: int) -> np.ndarray:
    """The ALiBi paper's geometric slopes (Press et al. 2022), float32 [num_heads].

    For n a power of two: 2^(-8/n), 2^(-16/n), ...; otherwise the closest lower power of two's
    slopes followed by every other slope of the next power of two (the paper's code does this).
    """
    def geometric(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    lower = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(lower)
    if lower < num_heads:
        slopes += geometric(2 * lower)[0::2][: num_heads - lower]
    return np.asarray(slopes, dtype=np.float32)


def _alibi_build(kw: dict, context: Context, rng) -> dict:
    """None, "paper" (the paper's slopes), "random" (uniform in [-1, 1)) or a list of floats."""
    keyword = kw["alibi_slopes"]
    if keyword == "paper":
        return dict(alibi_slopes=alibi_paper_slopes(context.num_heads))
    random = lambda r, n: r.uniform(-1.0, 1.0, size=n).astype(np.float32)  # noqa: E731
    try:
        return dict(alibi_slopes=head_values("alibi_slopes", keyword, context, rng, random))
    except ValueError:
        raise RefusedRequest(f"alibi_slopes must be None, 'paper', 'random' or a list of floats, got {keyword!r}") from None


def _alibi_token(text: str) -> bool:
    if text.lower() != "paper":
        raise RefusedRequest(f"alibi takes no value (the paper's slopes), got alibi={text}")
    return True


def _alibi_score(s, opts, q_pos, kv_pos, q_head, kv_head):
    return s + opts.alibi_slopes[q_head] * np.float32(kv_pos - q_pos)


ALIBI = Option(
    feature="alibi",
    description="ALiBi: s_t += alibi_slopes[h] * (t - p)",
    fields=(Field("alibi_slopes", None, head_vector("alibi_slopes", "one slope per query head"),
                  "None or float32 [num_heads]: the per-head slopes"),),
    in_use=lambda o: o.alibi_slopes is not None,
    keywords=dict(alibi_slopes=None),
    build=_alibi_build,
    describe=lambda o: "alibi",
    example=dict(alibi_slopes="paper"),
    draw=lambda draw, st, c: dict(alibi_slopes=draw(st.sampled_from(["paper", "random"]))),
    random=lambda rng, c: dict(alibi_slopes=str(rng.choice(["paper", "random"]))),
    cases=lambda c: [Case("alibi_paper", dict(alibi_slopes="paper")), Case("alibi_random", dict(alibi_slopes="random"))],
    together=lambda c: dict(alibi_slopes="paper"),
    tokens=(Token("alibi", None, _alibi_token, lambda on, c: dict(alibi_slopes="paper"), lambda on: "alibi"),),
    flag=("OPT_ALIBI", 4),
    kernel_args=(KernelArg("alibi_slopes", "const float*",
                           lambda o: o.alibi_slopes if o.alibi_slopes is not None else np.zeros(1, np.float32)),),
    score=ScoreHook(cuda="s += at.head.alibi_slope * (float)(at.kv_pos - at.q_pos);", numba=_alibi_score,
                    cuda_head=(("alibi_slope", "alibi_slopes[q_head]"),)),
)


# ---------------------------------------------------------------- kv_scale: per-tensor dequantization scales

def _kv_scale_build(kw: dict, context: Context, rng) -> dict:
    """None means 1.0, or 1 / max finite beside a quantized cache with no per-token scales (values then span
    about [-1, 1]; per-token scales carry that factor themselves)."""
    default = 1.0 if kw["per_token_scales"] else default_kv_scale(context.kv_format)
    return dict(k_scale=default if kw["k_scale"] is None else float(kw["k_scale"]),
                v_scale=default if kw["v_scale"] is None else float(kw["v_scale"]))


def _kv_scale_draw(draw, st, context: Context) -> dict:
    unit = default_kv_scale(context.kv_format)  # quantized values reach 448 / 57344: keep magnitudes sane
    return dict(k_scale=draw(st.sampled_from([0.25, 0.5, 2.0])) * unit, v_scale=draw(st.sampled_from([0.5, 3.0])) * unit)


KV_SCALE = Option(
    feature="kv_scale",
    description="per-tensor scales: k_t = key * k_scale, v_t = value * v_scale (fp8 caches: 1 / max finite by default)",
    fields=(Field("k_scale", 1.0, positive_scale("k_scale"), "float > 0: dequantized K = key * k_scale", real),
            Field("v_scale", 1.0, positive_scale("v_scale"), "float > 0: dequantized V = value * v_scale", real)),
    in_use=lambda o: o.k_scale != 1.0 or o.v_scale != 1.0,
    keywords=dict(k_scale=None, v_scale=None),
    build=_kv_scale_build,
    describe=lambda o: f"k_scale={o.k_scale:g}, v_scale={o.v_scale:g}",
    example=dict(k_scale=0.5),
    draw=_kv_scale_draw,
    random=lambda rng, c: dict(k_scale=0.5 * default_kv_scale(c.kv_format), v_scale=2.0 * default_kv_scale(c.kv_format)),
    cases=lambda c: [Case("kv_scale_per_tensor", dict(k_scale=0.5, v_scale=3.0))],
    together=lambda c: dict(k_scale=0.75 * default_kv_scale(c.kv_format), v_scale=1.5 * default_kv_scale(c.kv_format)),
    tokens=(Token("kscale", "X", positive_number_token("kscale"), lambda x, c: dict(k_scale=x), lambda x: f"kscale={x:g}"),
            Token("vscale", "X", positive_number_token("vscale"), lambda x, c: dict(v_scale=x), lambda x: f"vscale={x:g}")),
    excludes=("kv_scales",),
    flag=("OPT_VSCALE", 8),
    flag_in_use=lambda o: o.v_scale != 1.0,  # k_scale needs no code: it is folded into the softmax scale
    kernel_args=(KernelArg("v_scale", "float", lambda o: np.float32(o.v_scale)),),
    scale_factor=lambda o: o.k_scale,
)


# ---------------------------------------------------------------- sinks: learned attention sinks

def _random_sinks(rng, num_heads: int) -> np.ndarray:
    """Uniform in [-4, 4): from negligible beside a long context to dominant beside a short one."""
    return rng.uniform(-4.0, 4.0, size=num_heads).astype(np.float32)


def _sinks_token(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise RefusedRequest(f"sinks takes a finite number (every head's sink), or no value, got sinks={text}")
    return value


def _sinks_keywords(value, context: Context) -> dict:
    """`sinks`: sinks spread over [-2, 2] across the heads; `sinks=X`: X for every head."""
    heads = context.num_heads
    sinks = np.linspace(-2.0, 2.0, heads) if value is True else np.full(heads, value)
    return dict(sinks=[float(x) for x in sinks])


SINKS = Option(
    feature="sinks",
    description="learned sinks (gpt-oss): one logit per query head, in the softmax's units (not scaled), added "
                "to the denominator only: out = sum_t e^(s_t - m) v_t / (sum_t e^(s_t - m) + e^(sink_h - m))",
    fields=(Field("sinks", None, head_vector("sinks", "one logit per query head"),
                  "None or float32 [num_heads]: each head's sink logit"),),
    in_use=lambda o: o.sinks is not None,
    keywords=dict(sinks=None),
    build=lambda kw, c, rng: dict(sinks=head_values("sinks", kw["sinks"], c, rng, _random_sinks)),
    describe=lambda o: "sinks",
    example=dict(sinks="random"),
    draw=lambda draw, st, c: dict(sinks="random"),
    random=lambda rng, c: dict(sinks="random"),
    cases=lambda c: [Case("sinks_random", dict(sinks="random"), brief=True),
                     Case("sinks_dominant", dict(sinks=[12.0] * c.num_heads)),
                     Case("sinks_on_extreme_logits", dict(sinks="random", extreme_logits=True))],
    together=lambda c: dict(sinks="random"),
    tokens=(Token("sinks", None, _sinks_token, _sinks_keywords,
                  lambda value: "sinks" if value is True else f"sinks={value:g}"),),
    flag=("OPT_SINKS", 16),
    kernel_args=(KernelArg("sinks", "const float*",
                           lambda o: o.sinks if o.sinks is not None else np.zeros(1, np.float32)),),
)


# ---------------------------------------------------------------- lse: the log-sum-exp as an output

def _check_bool(name: str):
    def check(value, context: Context) -> None:
        if not isinstance(value, bool):
            raise RefusedRequest(f"{name} must be True or False, got {value!r}")
    return check


LSE = Option(
    feature="lse",
    description="return_lse: the call returns (out, lse), lse float32 [num_query_tokens, num_heads] = "
                "log sum_t exp(s_t), natural log, over the tokens only (no sink); no token: -inf and out 0",
    fields=(Field("return_lse", False, _check_bool("return_lse"), "bool: also return the log-sum-exp", real),),
    in_use=lambda o: o.return_lse,
    keywords=dict(return_lse=False),
    build=lambda kw, c, rng: dict(return_lse=kw["return_lse"]),
    describe=lambda o: "lse",
    example=dict(return_lse=True),
    draw=lambda draw, st, c: dict(return_lse=True),
    random=lambda rng, c: dict(return_lse=True),
    cases=lambda c: [Case("lse_on_extreme_logits", dict(return_lse=True, extreme_logits=True), brief=True)],
    together=lambda c: dict(return_lse=True),
    flag=("OPT_LSE", 32),  # no argument: a kernel built with it writes lse through its own output pointer
)



# ---------------------------------------------------------------- kv_scales: fp8 scales per token and KV head

def _flat(array, dtype) -> np.ndarray:
    """A per-slot array as the kernels take it: one flat C-contiguous run of `dtype` (its bytes viewed for
    e4m3), or a one-element neutral array when the option is off."""
    if array is None:
        return np.zeros(1, dtype)
    return np.ascontiguousarray(array).view(dtype).reshape(-1)


def slot_array(name: str, dtype: str, what: str, trailing=lambda context: ()):
    """Check of an optional array [num_blocks, block_size, num_kv_heads, *trailing] beside the cache."""
    def check(value, context: Context) -> None:
        if value is None:
            return
        shape = None if context.cache_slots is None else tuple(context.cache_slots) + tuple(trailing(context))
        if not isinstance(value, np.ndarray) or value.dtype.name != dtype:
            got = value.dtype.name if isinstance(value, np.ndarray) else type(value).__name__
            raise RefusedRequest(f"{name} must be a {dtype} NumPy array ({what}), got {got}")
        if shape is not None and value.shape != shape:
            raise RefusedRequest(f"{name} must have shape {shape} = [num_blocks, block_size, num_kv_heads"
                                 f"{', head_dim // 16' if trailing(context) else ''}] (from key_cache), got {value.shape}")
    return check


def _kv_scales_validate(o, context: Context) -> None:
    if (o.k_scales is None) != (o.v_scales is None):
        raise RefusedRequest("k_scales and v_scales go together: give both or neither")
    if o.k_scales is None:
        return
    if context.kv_format is not None and context.kv_format not in FP8_DTYPES:
        raise RefusedRequest(f"k_scales/v_scales (per-token scales) need an fp8 cache ({', '.join(FP8_DTYPES)}), "
                             f"got key_cache.dtype {context.kv_format}")
    for name in ("k_scale", "v_scale"):
        if getattr(o, name) != 1.0:
            raise RefusedRequest(f"{name} and {name}s are exclusive: with per-token scales {name} must be 1.0, "
                                 f"got {getattr(o, name)!r}")


def _kv_scales_build(kw: dict, context: Context, rng) -> dict:
    """per_token_scales: each (slot, KV head) gets 2^u / max finite, u uniform in [-2, 2) (fp8 caches only)."""
    if not kw["per_token_scales"]:
        return dict(k_scales=None, v_scales=None)
    if context.kv_format not in FP8_DTYPES or rng is None:
        raise RefusedRequest(f"per_token_scales needs an fp8 cache (kv_dtype one of {', '.join(FP8_DTYPES)}), "
                             f"got {context.kv_format}")
    unit = default_kv_scale(context.kv_format)
    draw = lambda: (unit * 2.0 ** rng.uniform(-2.0, 2.0, size=context.cache_slots)).astype(np.float32)  # noqa: E731
    return dict(k_scales=draw(), v_scales=draw())


KV_SCALES = Option(
    feature="kv_scales",
    description="fp8 scales per token and KV head: k_t = key * k_scales[slot, kv head] (vLLM's per-token-head "
                "quantization); exclusive with k_scale / v_scale != 1",
    fields=(Field("k_scales", None, slot_array("k_scales", "float32", "[num_blocks, block_size, num_kv_heads]"),
                  "None or float32 [num_blocks, block_size, num_kv_heads]: K's scale per slot and KV head",
                  per_slot=True),
            Field("v_scales", None, slot_array("v_scales", "float32", "[num_blocks, block_size, num_kv_heads]"),
                  "None or float32 [num_blocks, block_size, num_kv_heads]: V's scale per slot and KV head",
                  per_slot=True)),
    in_use=lambda o: o.k_scales is not None,
    keywords=dict(per_token_scales=False),
    build=_kv_scales_build,
    describe=lambda o: "per-token scales",
    example=dict(per_token_scales=True, kv_dtype="float8_e4m3fn"),
    validate=_kv_scales_validate,
    draw=lambda draw, st, c: dict(per_token_scales=True),
    random=lambda rng, c: dict(per_token_scales=True),
    cases=lambda c: [Case(f"per_token_scales_{kv}", dict(per_token_scales=True, kv_dtype=kv), brief=True)
                     for kv in c.kv_formats if kv in FP8_DTYPES],
    together=lambda c: dict(per_token_scales=True),
    applies=lambda c: c.kv_format in FP8_DTYPES,
    excludes=("kv_scale",),
    flag=("OPT_KV_SCALES", 64),
    # flattened: scale of (slot, KV head) at (block * block_size + offset) * num_kv_heads + kv head
    kernel_args=tuple(KernelArg(name, "const float*", lambda o, name=name: _flat(getattr(o, name), np.float32))
                      for name in ("k_scales", "v_scales")),
)


# ---------------------------------------------------------------- nvfp4: the block scales of an NVFP4 cache

def _nvfp4_validate(o, context: Context) -> None:
    nvfp4 = context.kv_format == NVFP4
    if (o.k_block_scales is None) != (o.v_block_scales is None):
        raise RefusedRequest("k_block_scales and v_block_scales go together: give both or neither")
    if context.kv_format is None:
        return
    if nvfp4 and o.k_block_scales is None:
        raise RefusedRequest("an NVFP4 cache (uint8 key_cache/value_cache) needs k_block_scales and v_block_scales "
                             "(float8_e4m3fn [num_blocks, block_size, num_kv_heads, head_dim // 16])")
    if not nvfp4 and o.k_block_scales is not None:
        raise RefusedRequest(f"k_block_scales/v_block_scales belong to an NVFP4 cache (uint8), got key_cache.dtype "
                             f"{context.kv_format}")
    if nvfp4 and context.head_dim is not None and context.head_dim % NVFP4_GROUP:
        raise RefusedRequest(f"an NVFP4 cache needs head_dim to be a multiple of {NVFP4_GROUP} (one e4m3 scale per "
                             f"{NVFP4_GROUP} values), got {context.head_dim}")


def _nvfp4_build(kw: dict, context: Context, rng) -> dict:
    """Beside an NVFP4 cache: block scales drawn over every positive finite e4m3 code, subnormals included."""
    if context.kv_format != NVFP4:
        return dict(k_block_scales=None, v_block_scales=None)
    shape = tuple(context.cache_slots) + (context.head_dim // NVFP4_GROUP,)
    draw = lambda: rng.integers(0, 0x7F, size=shape, dtype=np.uint8).view("float8_e4m3fn")  # noqa: E731 (0x7F: NaN)
    return dict(k_block_scales=draw(), v_block_scales=draw())


def _block_scales_shape(context: Context) -> tuple:
    return (context.head_dim // NVFP4_GROUP,) if context.head_dim is not None else ()


NVFP4_SCALES = Option(
    feature=NVFP4,
    description="NVFP4 caches: uint8 [..., head_dim // 2] of e2m1 codes (element 2i in the low nibble) with "
                "float8_e4m3fn block scales per 16 values; value = e2m1 * block scale * k_scale (per tensor)",
    fields=(Field("k_block_scales", None, slot_array("k_block_scales", "float8_e4m3fn", "one scale per 16 values",
                                                     _block_scales_shape),
                  "None or float8_e4m3fn [num_blocks, block_size, num_kv_heads, head_dim // 16]: K's block scales",
                  per_slot=True),
            Field("v_block_scales", None, slot_array("v_block_scales", "float8_e4m3fn", "one scale per 16 values",
                                                     _block_scales_shape),
                  "None or float8_e4m3fn [num_blocks, block_size, num_kv_heads, head_dim // 16]: V's block scales",
                  per_slot=True)),
    in_use=lambda o: o.k_block_scales is not None,
    keywords={},
    build=_nvfp4_build,
    describe=lambda o: "nvfp4",
    example=dict(kv_dtype=NVFP4),
    validate=_nvfp4_validate,
    declared_in="kv_dtypes",
    flag=("OPT_NVFP4", 128),
    # e4m3 bytes, flattened: block scale of (slot, KV head, group g) at (slot * num_kv_heads + kv) * G + g
    kernel_args=tuple(KernelArg(name, "const unsigned char*", lambda o, name=name: _flat(getattr(o, name), np.uint8))
                      for name in ("k_block_scales", "v_block_scales")),
)


# The table. Its order is the kernels' argument order (kernel_args, row by row).
OPTIONS: tuple[Option, ...] = (WINDOW, SOFTCAP, ALIBI, KV_SCALE, SINKS, LSE, KV_SCALES, NVFP4_SCALES)

# Rows tried without editing this file: EXTRA_ROWS_VARIABLE="package.module:NAME[,...]" names tuples of rows
# appended to OPTIONS at import (before anything derives from it), e.g. a score modifier under test
# (tests/kernels/test_score_modifier.py). Unset in every shipped run.
EXTRA_ROWS_VARIABLE = "SANDBOX_EXTRA_OPTION_ROWS"


def _extra_rows() -> tuple[Option, ...]:
    rows: tuple[Option, ...] = ()
    for spec in filter(None, os.environ.get(EXTRA_ROWS_VARIABLE, "").split(",")):
        module, _, name = spec.partition(":")
        if not module or not name:
            raise ValueError(f"{EXTRA_ROWS_VARIABLE} must be 'package.module:NAME[,...]', got {spec!r}")
        rows += tuple(getattr(importlib.import_module(module), name))
    return rows


OPTIONS += _extra_rows()
