"""The option table is the one definition: every row well formed, and every layer reads it (docs/options.md).

A row added to sandbox/problem/option_table.py without its reference edit, or a kernel family that keeps its
own list of bits or arguments, fails here.
"""
import inspect
import re

import numpy as np
import pytest

import reference
from kernels.cupy_raw import common as cupy_common
from kernels.numba_cuda import naive, options as numba_options
from sandbox.problem import DecodeProblem
from sandbox.problem.option_schema import Context
from sandbox.problem.option_tokens import TOKENS, parse_option_tokens
from sandbox.problem.options import FEATURES, FIELDS, KERNEL_ARGS, KERNEL_FLAGS, OPTIONS, PLAIN, AttentionOptions
from sandbox.variant import registry


def test_defaults_are_plain_and_pass_their_checks():
    PLAIN.validate(Context(num_heads=4, head_dim=64, kv_format="float16", cache_slots=(3, 16, 2)))
    assert PLAIN.features == () and PLAIN.describe() == "plain" and PLAIN.kernel_flags() == 0
    assert [f.name for f in FIELDS] == list(AttentionOptions.__dataclass_fields__)
    assert len({f.name for f in FIELDS}) == len(FIELDS) and len(set(FEATURES)) == len(FEATURES)


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.feature)
def test_each_rows_example_switches_it_on_and_describes_it(option):
    p = DecodeProblem.random(3, num_seqs=2, num_heads=4, num_kv_heads=2, head_dim=32, block_size=4,
                             max_context_len=20, **option.example)
    if option.declared_in == "options":
        assert option.feature in p.options.features
    else:
        assert p.kv_format == option.feature
    assert option.in_use(p.options) and option.describe(p.options) in p.describe()
    assert not option.in_use(PLAIN)


@pytest.mark.parametrize("token", TOKENS.values(), ids=lambda t: t.name)
def test_every_sweep_token_reads_back(token):
    word = token.name if token.takes is None else f"{token.name}=3"
    parsed = parse_option_tokens(word)
    assert parse_option_tokens(parsed.text) == parsed
    options = parsed.attention(Context(num_heads=4, head_dim=32, kv_format="float16"))
    assert options.features, word


def test_kernel_flags_are_distinct_bits_and_arguments_distinct_names():
    bits = [bit for _, bit in KERNEL_FLAGS]
    assert all(b & (b - 1) == 0 for b in bits) and len(set(bits)) == len(bits)
    assert len({a.name for a in KERNEL_ARGS}) == len(KERNEL_ARGS)
    o = AttentionOptions(window_left=3, alibi_slopes=np.ones(4, np.float32), v_scale=2.0)
    values = dict(zip([a.name for a in KERNEL_ARGS], o.kernel_values()))
    assert values["window_left"] == 3 and values["v_scale"] == 2.0 and values["alibi_slopes"].shape == (4,)


def test_reference_and_its_twin_take_every_field_of_the_table():
    for function in (reference.paged_attention, reference.sequence_attention):
        keywords = {p.name for p in inspect.signature(function).parameters.values() if p.kind == p.KEYWORD_ONLY}
        assert {f.name for f in FIELDS} <= keywords, (function.__name__, {f.name for f in FIELDS} - keywords)
    writer = {p.name for p in inspect.signature(reference.write_cache).parameters.values()}
    assert {f.name for f in FIELDS if f.per_slot} <= writer


def test_cuda_c_bits_and_arguments_come_from_the_table():
    prelude = cupy_common.option_prelude()
    for name, bit in KERNEL_FLAGS:
        assert f"{name} = {bit}" in prelude
    params = re.search(r"#define PA_OPTION_PARAMS (.*)", prelude).group(1)
    assert [p.split()[-1] for p in params.split(", ")] == [a.name for a in KERNEL_ARGS]
    assert cupy_common.OPT == dict(KERNEL_FLAGS)
    for path in sorted(cupy_common.KERNEL_DIR.glob("*.cu")) + sorted((cupy_common.KERNEL_DIR.parent / "wrong").glob("*.cu")):
        text = path.read_text()
        assert "enum : int { OPT_" not in text, f"{path.name} defines option bits of its own"
        if "Options<OPTS>" in text or "<OPTS>" in text:
            # the negative controls of cupy.v1 take its parameter list from kernels/wrong/v1_body.cuh
            assert "PA_OPTION_PARAMS" in text or "(WRONG_V1_PARAMS(" in text, \
                f"{path.name} lists option parameters by hand"
    v1_body = (cupy_common.KERNEL_DIR.parent / "wrong" / "v1_body.cuh").read_text()
    assert re.search(r"#define WRONG_V1_PARAMS\(table_width\)[^#]*PA_OPTION_PARAMS\n", v1_body)
    assert not [h.name for h in cupy_common.KERNEL_DIR.glob("*.cuh") if "OPT_WINDOW = " in h.read_text()]


def test_numba_kernels_take_the_tables_arguments_as_one_named_tuple():
    assert numba_options.OptionArgs._fields == tuple(a.name for a in KERNEL_ARGS)
    body = naive.make_body(dtype="float32", kv_dtype="float32")
    assert list(inspect.signature(body).parameters)[5:7] == ["scale", "opts"]
    assert numba_options.OPT == dict(KERNEL_FLAGS)


def test_the_contract_layer_variant_declares_every_feature_and_format():
    limits = registry.get("numpy.gather").limits
    assert set(limits.options) == set(FEATURES) and limits.block_sizes is None and limits.max_query_len is None
    assert {o.feature for o in OPTIONS if o.declared_in == "kv_dtypes"} <= set(limits.kv_dtypes)
