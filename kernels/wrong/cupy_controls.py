"""The CUDA C negative controls built on a shipped variant, one row each (the registry names them
"kernels.wrong.cupy_controls:<flaw>", variant wrong.cupy.<flaw>); tests/kernels/test_variants.py proves the checker
rejects every one.

    v1_control     cupy.v1 with one bug: kernels/wrong/cupy_<flaw>.cu, whose kernel paged_attention_<flaw> is the
                   bug plus one call of wrong::v1_body (kernels/wrong/v1_body.cuh), launched as cupy.v1
    multi_control  cupy.multi's launcher on kernels/wrong/cupy_<flaw>.cu (kernel paged_attention_<flaw>)
    mla_control    cupy.mla's own template built with one FLAW (kernels/cupy_raw/mla.cu), narrowed to one
                   instantiation
Each row becomes a module-like object with what the registry and the tests read: NAME, LIMITS, prepare, the
docstring (the variant's summary), and PATH / kernel_name / KERNEL / FLAW where the kind has them.
A control with its own logic in Python (wrong.cupy.cascade_partial_block) keeps its own module.
"""
from __future__ import annotations

import dataclasses
import inspect
import pathlib
import types

from kernels.cupy_raw import common, mla, multi, v1
from sandbox.problem.dtypes import QUERY_DTYPES
from sandbox.variant import Limits

HERE = pathlib.Path(__file__).resolve().parent
# Plain decode (no options, no fp8 cache) over cupy.v1's block sizes and head dims.
PLAIN_V1 = Limits(block_sizes=common.POW2_BLOCK_SIZES, head_dims=common.HEAD_DIMS, dtypes=QUERY_DTYPES)


def _control(flaw: str, doc: str, **attributes) -> types.ModuleType:
    control = types.ModuleType(f"{__name__}:{flaw}", inspect.cleandoc(doc))
    control.NAME = f"wrong.cupy.{flaw}"
    for name, value in attributes.items():
        setattr(control, name, value)
    return control


def v1_control(flaw: str, doc: str, table_width: str = "max_blocks_per_seq", extra_tokens: int = 0,
               limits: Limits = v1.LIMITS, options: bool = True):
    """cupy.v1 with one bug. table_width: the problem attribute passed where v1 passes the table's width (the
    kernel's int argument); extra_tokens: tokens its logits may hold beyond v1's; options: the kernel takes v1's
    type arguments with the option flags (False: the query's type only)."""
    path = HERE / f"cupy_{flaw}.cu"
    name = f"wrong.cupy.{flaw}"

    def kernel_name(block_size: int, head_dim: int, dtype, kv_dtype=None, flags: int = 0) -> str:
        types_ = common.type_args(dtype, kv_dtype, flags) if options else common.ctype(dtype)
        return f"paged_attention_{flaw}<{block_size}, {head_dim}, {types_}>"

    def prepare(problem, backend: str):
        return v1.prepare_v1_shaped(name, path, kernel_name, problem, backend, getattr(problem, table_width),
                                    extra_tokens=extra_tokens)

    return _control(flaw, doc, PATH=path, LIMITS=limits, kernel_name=kernel_name, prepare=prepare)


def multi_control(flaw: str, doc: str, lookahead: int):
    """cupy.multi's tiles and launcher on the kernel of kernels/wrong/cupy_<flaw>.cu; lookahead: tokens past a tile's
    range its (wrong) mask may read."""
    path, name, kernel = HERE / f"cupy_{flaw}.cu", f"wrong.cupy.{flaw}", f"paged_attention_{flaw}"

    def prepare(problem, backend: str, partition_size: int | None = None):
        layout = multi.Layout.for_problem(problem)
        work = multi.multi_work(problem, layout, multi.partition_tokens(partition_size), lookahead=lookahead)
        return multi.prepare_work(name, path, problem, backend, work, kernel=kernel)

    return _control(flaw, doc, PATH=path, LIMITS=multi.LIMITS, KERNEL=kernel, prepare=prepare)


def mla_control(flaw: str, doc: str, flaw_id: int, flaw_constant: str, modes: tuple[str, ...]):
    """cupy.mla's template with FLAW = flaw_id (mla::<flaw_constant>), bfloat16 over a bf16 cache, in `modes`."""
    name = f"wrong.cupy.{flaw}"

    def prepare(problem, backend: str):
        return mla.prepare_mla(name, problem, backend, flaw=flaw_id)

    limits = dataclasses.replace(mla.LIMITS, dtypes=("bfloat16",), kv_formats=(), modes=modes)
    return _control(flaw, doc, LIMITS=limits, FLAW=flaw_id, prepare=prepare)


CONTROLS = (
    v1_control("ignores_table", """
        wrong.cupy.ignores_table: cupy.v1 that never reads the block table (physical block = logical block mod num_blocks).

        Negative control: the property tests must reject it (tests/kernels/test_variants.py). Realistic: the bug of a
        kernel first written for a contiguous cache. Stays in bounds. Limits: as cupy.v1 (every precision and option).
        """, table_width="num_blocks"),
    v1_control("off_by_one", """
        wrong.cupy.off_by_one: cupy.v1 that counts one token too few in the last block ((len - 1) % block_size).

        Negative control: the property tests must reject it (tests/kernels/test_variants.py). Realistic: the classic
        last-block off-by-one. Stays in bounds. Limits: as cupy.v1 (every precision and option).
        """),
    multi_control("causal_off_by_one", """
        wrong.cupy.causal_off_by_one: cupy.multi whose causal mask lets a query token see the token after it.

        Negative control: the property tests must reject it (tests/kernels/test_variants.py). Realistic: `t <= p + 1`
        (or a position computed from a 1-based index) in a multi-token mask, with the tile's token range
        extended to match; decode problems stay right, so only multi-token queries catch it. Stays in bounds
        (the range is clipped to the context). Limits: as cupy.multi.
        """, lookahead=1),
    v1_control("window_off_by_one", """
        wrong.cupy.window_off_by_one: cupy.v1 whose sliding window starts one token early (reads one token too many).

        Negative control: the property tests must reject it (tests/kernels/test_variants.py). Realistic: `L - window_left - 1`
        written as the first token and then decremented again (or `>` for `>=`). A freed block (-1) it opens is read as
        block 0, so it stays in bounds. Limits: as cupy.v1 (every precision and option).
        """, extra_tokens=1),
    v1_control("softcap_before_scale", """
        wrong.cupy.softcap_before_scale: cupy.v1 that soft-caps the raw dot product and scales after (scale * cap * tanh(q.k / cap)).

        Negative control: the property tests must reject it (tests/kernels/test_variants.py). Realistic: Gemma 2's cap applied
        where the logits are first formed, before the 1/sqrt(d) scale. Stays in bounds. Limits: as cupy.v1 (every
        precision and option).
        """),
    v1_control("alibi_flipped", """
        wrong.cupy.alibi_flipped: cupy.v1 whose ALiBi bias has the wrong sign (slope * (position - t)).

        Negative control: the property tests must reject it (tests/kernels/test_variants.py). Realistic: the relative distance
        taken as query minus key instead of key minus query. Stays in bounds. Limits: as cupy.v1 (every precision and
        option).
        """),
    v1_control("uncoalesced_k", """
        wrong.cupy.uncoalesced_k: a thread per token reading its K row element by element, and no softmax scale.

        Negative control twice over (kernels/wrong/cupy_uncoalesced_k.cu): the property tests must reject it (the
        logits are never scaled), and the traffic count must flag its K loads: the 32 lanes of a warp read 32
        different token rows, so each warp-level K load touches 32 sectors for 64 bytes (fp16) where a coalesced
        one touches 16 for 512 (tests/analysis/test_traffic_variants.py). Realistic: the first port of a CPU loop.
        Limits: plain decode (no options, no fp8 cache), block sizes 1..256, v1's head dims and context bound.
        Loads in flight: read from its SASS by the traffic model, like every CUDA C kernel.
        """, limits=PLAIN_V1, options=False),
    v1_control("lse_base2", """
        wrong.cupy.lse_base2: cupy.v1 returning the log-sum-exp in base 2 (log2 sum_t exp(s_t)) instead of the natural log.

        Negative control: the property tests must reject it (tests/kernels/test_variants.py) on any problem with return_lse.
        Realistic: FlashInfer and FlashMLA return lse in base 2; vLLM's merge_attn_states takes natural logs, so a
        kernel ported from one to the other merges with the wrong weights. Stays in bounds. Limits: as cupy.v1.
        """),
    v1_control("neighbour_head_scale", """
        wrong.cupy.neighbour_head_scale: cupy.v1 reading each token's K scale from the neighbouring KV head's entry.

        Negative control: the property tests must reject it (tests/kernels/test_variants.py) on problems with per-token
        scales (k_scales). Realistic: an off-by-one in the flattened [slot, KV head] scale index (the entry before
        its own: the neighbouring KV head's; for KV head 0 the previous slot's last head). Stays in bounds.
        Limits: as cupy.v1.
        """),
    mla_control("mla_v_from_rope", """
        wrong.cupy.mla_v_from_rope: cupy.mla whose values are the latent row's dims 64..575 instead of 0..511.

        Negative control: the MLA property tests must reject it (tests/kernels/test_mla_variants.py). Realistic: a value
        view taken at the wrong end of the 576-wide row (`row[-512:]`), so the 64 RoPE dims leak into the output
        and the first 64 latent dims are dropped; keys, softmax and lse stay right. Stays in bounds (the shifted
        view ends at dim 575). Built through cupy.mla's own template (FLAW_V_FROM_ROPE). Limits: cupy.mla's
        narrowed to one instantiation (bfloat16 over a bf16 cache, dense): the flaw does not depend on the rest,
        and each instantiation costs the CPU executor's compile.
        """, 1, "FLAW_V_FROM_ROPE", modes=("dense",)),
    mla_control("mla_invalid_as_slot0", """
        wrong.cupy.mla_invalid_as_slot0: cupy.mla whose sparse rows read an index of -1 as slot 0 (block 0, offset 0).

        Negative control: the MLA property tests must reject it (tests/kernels/test_mla_variants.py). Realistic: the
        clamp `max(index, 0)` that keeps a gather in bounds, without the mask that should drop the clamped
        entries (the bug FlashMLA's reference guards against), so every -1 adds the token at slot 0. Reads a
        slot inside the cache, never out of bounds. Built through cupy.mla's own template
        (FLAW_INVALID_AS_SLOT0). Limits: cupy.mla's narrowed to one instantiation: sparse (dense problems have no
        index to get wrong), bfloat16 over a bf16 cache (the flaw does not depend on the format).
        """, 2, "FLAW_INVALID_AS_SLOT0", modes=("sparse",)),
)
globals().update({control.NAME.rsplit(".", 1)[1]: control for control in CONTROLS})
