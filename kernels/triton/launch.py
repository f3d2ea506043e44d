"""The family's launcher: arguments for either backend, a Launch whose launch() runs the kernels, the option flags.

On the CPU every array is registered with a memory.Memory and each kernel runs in Triton's interpreter
(interpret.run); on a GPU the same @triton.jit kernels are launched with CuPy arrays wrapped as objects
exposing data_ptr() and a Triton dtype (no torch). A Launch lists its kernels as Call records in launch
order, so launch_parts(), the traffic capture and the census see the same calls the timed launch makes.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import triton.language as tl

from sandbox.problem.dtypes import FP8_DTYPES, QUERY_DTYPES
from sandbox.problem.options import FEATURES as TABLE_FEATURES
from sandbox.problem.options import KERNEL_FLAGS
from sandbox.variant import Limits, Unsupported

from . import interpret
from .memory import Memory

OPT = dict(KERNEL_FLAGS)
# The option features every Triton variant implements (nvfp4 caches are refused: no e2m1 decode here).
FEATURES = ("window", "softcap", "alibi", "kv_scale", "sinks", "lse", "kv_scales")
assert set(FEATURES) <= set(TABLE_FEATURES), "FEATURES names a feature the option table lacks"
HEAD_DIMS = (32, 64, 80, 96, 112, 120, 128, 192, 256)
TL_DTYPES = {"float32": tl.float32, "float16": tl.float16, "bfloat16": tl.bfloat16, "float8_e4m3fn": tl.float8e4nv,
             "float8_e5m2": tl.float8e5, "int32": tl.int32}
NUM_WARPS = (4, 2, 8)  # the num_warps tunable of every variant, the default first
NUM_STAGES = (2, 3)    # num_stages: how deep Triton pipelines a loop's loads (async copies on sm_80+)


def limits(max_query_len: int | None = 1) -> Limits:
    """What the family declares: any block size and GQA ratio, HEAD_DIMS, every query dtype, fp8 caches."""
    return Limits(block_sizes=None, head_dims=HEAD_DIMS, dtypes=QUERY_DTYPES, kv_dtypes=FP8_DTYPES, options=FEATURES,
                  max_query_len=max_query_len)


def option_constexprs(problem) -> dict:
    """The constexpr flags a kernel is specialised on for `problem`."""
    flags = problem.options.kernel_flags()
    return dict(SOFTCAP=bool(flags & OPT["OPT_SOFTCAP"]), ALIBI=bool(flags & OPT["OPT_ALIBI"]),
                SINKS=bool(flags & OPT["OPT_SINKS"]), LSE=bool(flags & OPT["OPT_LSE"]),
                KV_SCALES=bool(flags & OPT["OPT_KV_SCALES"]))


def next_power_of_two(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class DevicePointer:
    """A CuPy array as Triton's GPU launcher takes it without torch: data_ptr() and a Triton dtype."""

    def __init__(self, array, dtype):
        self.array, self.dtype = array, dtype

    def data_ptr(self) -> int:
        return self.array.data.ptr


class Arguments:
    """A launch's arrays on one backend: `pointer(name, host array)` uploads (GPU) or registers (CPU) it."""

    def __init__(self, variant: str, backend: str):
        self.backend = backend
        self.memory = Memory(variant)
        self.arrays: dict[str, object] = {}
        self.shapes: dict[str, tuple] = {}

    def pointer(self, name: str, host: np.ndarray, dtype_name: str | None = None):
        dtype = TL_DTYPES[dtype_name or np.dtype(host.dtype).name]
        host = np.ascontiguousarray(host)
        self.shapes[name] = (host.shape, host.dtype)
        if self.backend == "gpu":  # as bytes: CuPy has no bfloat16 or fp8 dtype, the kernel reads the bits
            import cupy
            device = cupy.asarray(host.reshape(-1).view(np.uint8))
            self.arrays[name] = device
            return DevicePointer(device, dtype)
        self.arrays[name] = host
        return self.memory.pointer(name, host, dtype)

    def output(self, name: str, shape, dtype):
        """A new zeroed output array called `name` and its pointer."""
        return self.pointer(name, np.zeros(shape, dtype=dtype))

    def host(self, name: str) -> np.ndarray:
        """Argument `name` as a host array of its own shape and dtype (a copy from the GPU)."""
        shape, dtype = self.shapes[name]
        if self.backend == "gpu":
            return self.arrays[name].get().view(dtype).reshape(shape)
        return self.arrays[name]


@dataclasses.dataclass
class Call:
    """One kernel launch: the @triton.jit kernel, its grid, positional arguments and keyword constexprs/options."""
    name: str
    kernel: object
    grid: tuple
    args: tuple
    constexprs: dict
    num_warps: int = 4
    num_stages: int = 2


def option_pointers(args: Arguments, problem) -> tuple:
    """(alibi_slopes, sinks, k_scales, v_scales) pointers: the option arrays, a one-element dummy when unused."""
    o = problem.options
    def array(value):
        return np.zeros(1, np.float32) if value is None else np.ascontiguousarray(value, dtype=np.float32).reshape(-1)
    return (args.pointer("alibi_slopes", array(o.alibi_slopes)), args.pointer("sinks", array(o.sinks)),
            args.pointer("k_scales", array(o.k_scales)), args.pointer("v_scales", array(o.v_scales)))


def decode_arguments(name: str, problem, backend: str) -> tuple[Arguments, tuple]:
    """(Arguments, the pointers and values every decode kernel of the family starts with): query, caches,
    block table, context lengths, out, lse, then scale and the option arguments in the table's order."""
    p = problem
    if backend == "gpu" and p.kv_format == "float8_e4m3fn":
        _refuse_e4m3_below_sm89(name)
    args = Arguments(name, backend)
    num_tokens = p.query.shape[0]
    head = (args.pointer("query", p.query), args.pointer("key_cache", p.key_cache),
            args.pointer("value_cache", p.value_cache), args.pointer("block_tables", p.block_tables),
            args.pointer("context_lens", p.context_lens),
            args.output("out", (num_tokens, p.num_heads, p.head_dim), p.dtype),
            args.output("lse", (num_tokens, p.num_heads), np.float32))
    alibi, sinks, k_scales, v_scales = option_pointers(args, p)
    o = p.options
    scale = float(p.softmax_scale * o.scale_factor())
    values = (scale, int(o.window_left), float(o.logits_soft_cap), alibi, float(o.v_scale), sinks, k_scales, v_scales)
    return args, head + values


def _refuse_e4m3_below_sm89(name: str) -> None:
    """Triton 3.9 has no float8_e4m3fn (fp8e4nv) before sm_89: refuse such a cache on an older GPU, before compiling."""
    import cupy

    capability = int(cupy.cuda.Device().compute_capability)
    if capability < 89:
        raise Unsupported(f"{name} does not support kv_dtype=float8_e4m3fn on sm_{capability} (Triton has fp8e4nv "
                          "from sm_89 on; e5m2 works)")


class Launch:
    """What prepare() returns: launch() runs the calls, result() the output in the query's dtype, lse() its log-sum-exp."""

    def __init__(self, name: str, problem, args: Arguments, calls: list[Call]):
        self.name, self.problem, self.args, self.calls = name, problem, args, calls

    def _run(self, call: Call) -> None:
        if self.args.backend == "gpu":
            call.kernel[call.grid](*call.args, num_warps=call.num_warps, num_stages=call.num_stages,
                                   enable_fp_fusion=True, **call.constexprs)  # as the census compiles it
        else:
            interpret.run(call.kernel, call.grid, self.args.memory, *call.args, **call.constexprs)

    def launch(self) -> None:
        for call in self.calls:
            self._run(call)

    def _synchronize(self) -> None:
        if self.args.backend == "gpu":
            import cupy
            cupy.cuda.runtime.deviceSynchronize()

    def result(self) -> np.ndarray:
        """float [num_query_tokens, num_heads, head_dim] in the query's dtype."""
        self._synchronize()
        return self.args.host("out").copy()

    def lse(self) -> np.ndarray:
        """float32 [num_query_tokens, num_heads]: the natural log-sum-exp of each row (problems with return_lse)."""
        if not self.problem.options.return_lse:
            raise ValueError("this launch computes no log-sum-exp: prepare it for a problem with return_lse=True")
        self._synchronize()
        return self.args.host("lse").copy()


class PartedLaunch(Launch):
    """A Launch of several kernels (split-KV: partition, reduce) that the sweep may time one by one."""

    def launch_parts(self):
        """Each kernel alone, (name, callable) in launch order (sandbox/variant/limits.py)."""
        return [(call.name, lambda call=call: self._run(call)) for call in self.calls]
