"""What a variant module provides, and how its declared limits are enforced before any launch.

A variant is one module with:
    LIMITS: Limits                                  what it supports
    prepare(problem, backend) -> Prepared           untimed: layout conversion, upload, compile
and Prepared has:
    launch() -> None                                the only timed part (asynchronous on a GPU)
    result() -> np.ndarray [num_seqs, num_heads, head_dim], dtype of the query (synchronizes)
    lse() -> np.ndarray float32 [num_query_tokens, num_heads], with problem.options.return_lse (feature "lse")
                (MLA variants the same, always: one protocol, see Prepared below)
Optional:
    compile_report(block_size, head_dim, dtype, arch) -> dict   static resources (see sandbox.analysis.resources)
    Prepared.launch_parts() -> [(name, callable), ...]          each kernel launch of launch(), alone

launch_parts (the sweep's per-kernel times): a prepared object whose launch() issues more than one
kernel (split-KV: a partition kernel, then a reduce) may return its launches as (name, callable) pairs
in launch order, e.g. [("partition", launch_partition), ("reduce", launch_reduce)]. Contract: calling
the callables in order computes exactly what launch() computes (the sweep checks it against the
reference through result()); each callable issues one kernel asynchronously on the same stream as
launch(), takes no arguments, allocates nothing and can be repeated (the reduce reads what the last
partition launch wrote); the first pair is the partition (split) kernel. The sweep times launch() per
call (both launches and the host gap between them) and each part alone (sweep.csv: partition_us, and
parts_us "partition=... reduce=..."). Without launch_parts those columns stay empty.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Protocol

import numpy as np

from ..errors import Unsupported  # noqa: F401  (sandbox.Unsupported; variants import it from here)
from ..problem.dtypes import BASE_DTYPES, FP8_DTYPES, QUERY_DTYPES
from ..problem.kinds import DECODE
from ..problem.options import FEATURES, OPTIONS
from ..problem.validate import ANY_BLOCK_SIZES, OTHER_BLOCK_SIZES, POW2_BLOCK_SIZES  # noqa: F401 (re-exported)

DTYPES = BASE_DTYPES
# What the Numba and CUDA C kernels implement (Limits(**KERNEL_SUPPORT)): every query dtype, both fp8 caches
# with per-tensor scales, the window, the per-tensor scales and every score modifier of the table (a row with a
# ScoreHook: softcap, alibi, ...; each family's score hook runs them all). A kernel that implements more of the
# option table (sinks, lse, kv_scales, the nvfp4 cache) names it in its own Limits.
KERNEL_SUPPORT = dict(dtypes=QUERY_DTYPES, kv_dtypes=FP8_DTYPES,
                      options=tuple(row.feature for row in OPTIONS
                                    if row.feature in ("window", "kv_scale") or row.score is not None))
assert set(KERNEL_SUPPORT["options"]) <= set(FEATURES), "KERNEL_SUPPORT names a feature the option table lacks"


@dataclasses.dataclass(frozen=True)
class Limits:
    """Declared support. None means "any".

    dtypes: query (and output) dtypes; the cache may always have the query's dtype.
    kv_dtypes: cache formats accepted besides that (with any of `dtypes`): fp8 dtype names and "nvfp4"
        (sandbox.problem.dtypes.KV_FORMATS).
    options: the option table's features accepted (sandbox.problem.options.FEATURES: "window", "softcap",
        "alibi", "kv_scale", "sinks", "lse", ...).
    max_query_len: query tokens per sequence (1: decode only; None: any, with query_start).
    """

    kind: ClassVar = DECODE  # the kind of problem (sandbox.problem.kinds) a variant with these limits solves
    problem: ClassVar[str] = DECODE.name

    block_sizes: tuple[int, ...] | None = POW2_BLOCK_SIZES  # None: any block size in 1..4096
    head_dims: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] = DTYPES
    backends: tuple[str, ...] = ("gpu", "cpu")
    kv_dtypes: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    max_query_len: int | None = 1

    def check(self, name: str, problem, backend: str | None = None) -> None:
        """Raise Unsupported (a ValueError) naming the unsupported property and what is supported."""
        def refuse(what, value, allowed):
            raise Unsupported(f"{name} does not support {what}={value} (supported: {', '.join(map(str, allowed)) or 'none'})")

        if self.block_sizes is not None and problem.block_size not in self.block_sizes:
            refuse("block_size", problem.block_size, self.block_sizes)
        if self.head_dims is not None and problem.head_dim not in self.head_dims:
            refuse("head_dim", problem.head_dim, self.head_dims)
        if np.dtype(problem.dtype).name not in self.dtypes:
            refuse("dtype", np.dtype(problem.dtype).name, self.dtypes)
        kv = problem.kv_format
        if kv != np.dtype(problem.dtype).name and kv not in self.kv_dtypes:
            refuse("kv_dtype", kv, ("the query's dtype",) + self.kv_dtypes)
        for feature in problem.options.features:
            if feature not in self.options:
                refuse("option", feature, self.options)
        if self.max_query_len is not None and problem.max_query_len > self.max_query_len:
            refuse("query_len", problem.max_query_len, (f"<= {self.max_query_len}",))
        if backend is not None and backend not in self.backends:
            refuse("backend", repr(backend), self.backends)

    def describe(self) -> str:
        """One line for `python -m sandbox list`."""
        bs = "any" if self.block_sizes is None else ",".join(map(str, self.block_sizes))
        hd = "any" if self.head_dims is None else ",".join(map(str, self.head_dims))
        kv = ",".join(["same"] + [d.replace("float8_", "") for d in self.kv_dtypes])
        q = "any" if self.max_query_len is None else str(self.max_query_len)
        return (f"block sizes {bs}; head dims {hd}; dtypes {','.join(self.dtypes)}; kv {kv}; "
                f"options {','.join(self.options) or 'none'}; query_len {q}; backends {','.join(self.backends)}")

    def supports(self, problem, backend: str | None = None) -> bool:
        try:
            self.check("variant", problem, backend)
        except Unsupported:
            return False
        return True


class Prepared(Protocol):
    """What prepare returns, for every kind of problem: launch() (timed), result() -> out, and lse() -> float32
    [num_query_tokens, num_heads], the natural log-sum-exp of each row's logits (decode: only when the problem's
    options ask for it, return_lse; MLA: always). One protocol: result() is never a tuple."""

    def launch(self) -> None: ...

    def result(self) -> np.ndarray: ...

    def lse(self) -> np.ndarray: ...
