"""What an MLA variant declares (MLALimits), enforced before any launch, and how the registry tells it apart.

An MLA variant module is a variant module (sandbox/variant/limits.py) whose LIMITS is an MLALimits:
    LIMITS: MLALimits
    prepare(problem: MLAProblem, backend) -> Prepared
    Prepared.launch(); Prepared.result() -> out [total_q, num_heads, 512] in the query's dtype;
    Prepared.lse() -> float32 [total_q, num_heads] (natural log; -inf for a row that reads nothing)
Optional, as for decode: compile_report(block_size, head_dim, dtype, arch, kv_dtype=None) (head_dim is
ignored: MLA's is 576; kv_dtype "float8_e4m3fn" names the fp8 record, whose codes are e4m3),
Prepared.launch_parts(), Prepared.bytes_moved().

The registry reads the kind of problem a variant solves from its LIMITS: `LIMITS.kind`
(sandbox.problem.kinds: DECODE for Limits, MLA here; registry.variants(problem=...) takes its name).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ...problem.mla import record as rec
from ...problem.kinds import MLA
from ...problem.mla.validate import MLA_QUERY_DTYPES
from ..limits import Limits, Unsupported

MODES = ("dense", "sparse")


@dataclasses.dataclass(frozen=True)
class MLALimits:
    """Declared support of an MLA variant. None means "any".

    block_sizes: any block size when None; dtypes: query (= output and bf16/fp16 cache) dtypes;
    kv_formats: cache formats besides the query's dtype ("fp8_record"); modes: "dense" (block table)
    and/or "sparse" (indices); max_query_len: query rows per sequence (None: any, with query_start).
    """

    kind: ClassVar = MLA
    problem: ClassVar[str] = MLA.name
    head_dims: ClassVar[tuple] = (rec.LATENT_DIMS,)   # fixed by the problem: what `list` and `resources` show

    block_sizes: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] = MLA_QUERY_DTYPES
    kv_formats: tuple[str, ...] = (rec.FORMAT,)
    modes: tuple[str, ...] = MODES
    max_query_len: int | None = None
    backends: tuple[str, ...] = ("gpu", "cpu")

    @property
    def kv_dtypes(self) -> tuple[str, ...]:
        """The fp8 formats as `resources`/`sass` name them: the record's codes are float8_e4m3fn."""
        return (rec.CODE_DTYPE,) if rec.FORMAT in self.kv_formats else ()

    @property
    def options(self) -> tuple[str, ...]:
        """What `list` shows in its options column: the modes."""
        return self.modes

    def check(self, name: str, problem, backend: str | None = None) -> None:
        """Raise Unsupported naming the unsupported property and what is supported."""
        def refuse(what, value, allowed):
            raise Unsupported(f"{name} does not support {what}={value} (supported: {', '.join(map(str, allowed)) or 'none'})")

        if not isinstance(problem, self.kind.problem):
            raise Unsupported(f"{name} solves MLA problems ({self.kind.entry}, {self.kind.problem.__name__}), not "
                              f"{type(problem).__name__}")
        if self.block_sizes is not None and problem.block_size not in self.block_sizes:
            refuse("block_size", problem.block_size, self.block_sizes)
        if np.dtype(problem.dtype).name not in self.dtypes:
            refuse("dtype", np.dtype(problem.dtype).name, self.dtypes)
        if problem.fp8 and rec.FORMAT not in self.kv_formats:
            refuse("kv_format", rec.FORMAT, ("the query's dtype",) + self.kv_formats)
        mode = "sparse" if problem.sparse else "dense"
        if mode not in self.modes:
            refuse("mode", mode, self.modes)
        if self.max_query_len is not None and problem.max_query_len > self.max_query_len:
            refuse("query_len", problem.max_query_len, (f"<= {self.max_query_len}",))
        if backend is not None and backend not in self.backends:
            refuse("backend", repr(backend), self.backends)

    def describe(self) -> str:
        bs = "any" if self.block_sizes is None else ",".join(map(str, self.block_sizes))
        q = "any" if self.max_query_len is None else str(self.max_query_len)
        return (f"MLA; block sizes {bs}; dtypes {','.join(self.dtypes)}; kv {','.join(['same', *self.kv_formats])}; "
                f"modes {','.join(self.modes)}; query_len {q}; backends {','.join(self.backends)}")

    supports = Limits.supports  # check() answered as a bool, as for decode


MLA.attach(limits=MLALimits)  # kinds.MLA.limits: the variant layer's part of the MLA kind
