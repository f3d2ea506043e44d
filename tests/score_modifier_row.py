"""A score modifier the project does not ship, as one option-table row (tests/kernels/test_score_modifier.py loads it
through SANDBOX_EXTRA_OPTION_ROWS): a per-head bias on the first token, s_t += first_token_bias[h] when t == 0
(an attention-sink-like boost that, unlike a bias on every token, changes the softmax)."""
from __future__ import annotations

import numpy as np

from sandbox.problem.option_schema import Field, KernelArg, Option, ScoreHook
from sandbox.problem.option_table import head_values, head_vector


def numba_hook(s, opts, q_pos, kv_pos, q_head, kv_head):
    if kv_pos == 0:
        return s + opts.first_token_bias[q_head]
    return s


def reference_line(bias: np.ndarray):
    """The reference's line, for reference.paged_attention(score_modifiers=...)."""
    return lambda s, p, t, h, kv_head: s + float(bias[h]) if t == 0 else s


def _build(keywords: dict, context, rng) -> dict:
    draw = lambda r, n: r.uniform(-4.0, 4.0, size=n).astype(np.float32)  # noqa: E731
    return dict(first_token_bias=head_values("first_token_bias", keywords["first_token_bias"], context, rng, draw))


FIRST_TOKEN_BIAS = Option(
    feature="first_token_bias",
    description="s_t += first_token_bias[h] for t == 0",
    fields=(Field("first_token_bias", None, head_vector("first_token_bias", "one bias per query head"),
                  "None or float32 [num_heads]"),),
    in_use=lambda o: o.first_token_bias is not None,
    keywords=dict(first_token_bias=None),
    build=_build,
    describe=lambda o: "first_token_bias",
    example=dict(first_token_bias="random"),
    flag=("OPT_FIRST_TOKEN_BIAS", 256),
    kernel_args=(KernelArg("first_token_bias", "const float*",
                           lambda o: o.first_token_bias if o.first_token_bias is not None
                           else np.zeros(1, np.float32)),),
    score=ScoreHook(cuda="if (at.kv_pos == 0) s += at.head.first_token_bias;", numba=numba_hook,
                    cuda_head=(("first_token_bias", "first_token_bias[q_head]"),)),
)

ROWS = (FIRST_TOKEN_BIAS,)
