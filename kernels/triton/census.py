"""The family's compile census: each kernel of a variant compiled by Triton for sm_80 / sm_90 without a GPU.

`compile_report(module, block_size, head_dim, dtype, arch, kv_dtype, **tunables)` prepares the variant on a
representative decode problem (REPRESENTATIVE: 32 query heads over 8 KV heads, 2048 tokens) on the CPU
backend, which only registers arrays, and compiles each of its launch.Call records with
`triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", cc, 32))`: the signature
is what a launch with those arguments specialises to, num_warps / num_stages those of the call. Registers
and spills come from the ptxas log of that very compile (Triton's own ptxas: the cubin a GPU launch loads);
Triton's shared memory is dynamic (metadata.shared, given at launch). Results are cached on disk under the
kernel's source, signature, constexprs, options, target and Triton's version (sandbox.analysis.compile_cache).
"""
from __future__ import annotations

import contextlib
import inspect
import io
import re

import triton
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import native_specialize_impl

from sandbox.analysis import compile_cache
from sandbox.problem import DecodeProblem
from sandbox.variant import Unsupported

from . import common

REPRESENTATIVE = dict(num_seqs=1, num_heads=32, num_kv_heads=8, max_context_len=2048)
PATH = f"triton {triton.__version__} -> ptxas -> cubin"
_USED = re.compile(r"Used (\d+) registers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def signature(call) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of a launch.Call as a GPU launch specialises it (JITFunction's rules):
    an integer argument of 1 becomes a constexpr, pointers and integers divisible by 16 get
    tt.divisibility 16 (our pointers are 16-byte aligned, as CuPy's allocations are)."""
    names = list(inspect.signature(call.kernel.fn).parameters)
    values = dict(zip(names, call.args), **call.constexprs)
    types, constexprs, attrs = {}, {}, {}
    for index, name in enumerate(names):
        if name in call.constexprs:
            types[name], constexprs[name] = "constexpr", call.constexprs[name]
            continue
        kind, key = native_specialize_impl(BaseBackend, values[name], False, True, True)
        types[name] = kind
        if kind == "constexpr":
            constexprs[name] = key
        elif isinstance(key, str):
            attrs[(index,)] = BaseBackend.parse_attr(key)
    return types, constexprs, attrs


def compile_call(call, arch: str) -> dict:
    """Resources and the cubin of one call compiled for `arch` ("sm_80", "sm_90")."""
    types, constexprs, attrs = signature(call)
    cc = int(arch.removeprefix("sm_"))
    options = dict(num_warps=call.num_warps, num_stages=call.num_stages, enable_fp_fusion=True)
    parts = ["triton", triton.__version__, call.kernel.fn.__qualname__, _source(call.kernel), types, {k: str(v) for k, v in constexprs.items()},
             [[list(k), v] for k, v in attrs.items()], options, arch]

    def build() -> dict:
        log = io.StringIO()
        knobs = triton.knobs
        saved = knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = True, True  # a fresh ptxas run, its log
        try:
            with contextlib.redirect_stdout(log):
                compiled = triton.compile(ASTSource(call.kernel, types, constexprs, attrs), target=GPUTarget("cuda", cc, 32),
                                          options=options)
        except Exception as exc:
            if "fp8" in str(exc).lower():
                raise Unsupported(f"{call.name}: Triton cannot compile this fp8 cache for {arch}: {exc}") from None
            raise
        finally:
            knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = saved
        text = log.getvalue()
        used, frame = _USED.search(text), _FRAME.search(text)
        if used is None or frame is None:
            raise RuntimeError(f"{call.name}: no ptxas resource lines in Triton's log:\n{text[-1000:]}")
        return dict(registers=int(used.group(1)), static_shared_bytes=0,
                    dynamic_shared_bytes=int(compiled.metadata.shared), local_bytes=int(frame.group(1)),
                    spill_stores=int(frame.group(2)), spill_loads=int(frame.group(3)),
                    threads_per_block=32 * call.num_warps, num_stages=call.num_stages,
                    image=(compiled.asm["cubin"], compiled.metadata.name), ttgir=compiled.asm["ttgir"])

    return compile_cache.cached("triton-cubin", parts, build)


def _source(kernel) -> list[str]:
    """What the compiled code depends on in this repository: the kernel's module and the family's device functions,
    with their paths (the TTGIR's locations name the files, and traffic matches the interpreter's accesses by them)."""
    module = inspect.getmodule(kernel.fn)
    return [inspect.getsourcefile(module), inspect.getsource(module), inspect.getsourcefile(common),
            inspect.getsource(common)]


def representative(block_size: int, head_dim: int, dtype: str, kv_dtype: str | None) -> DecodeProblem:
    """The problem whose launch the census compiles (its arrays are never read: only shapes and dtypes count)."""
    return DecodeProblem.random(0, block_size=block_size, head_dim=head_dim, dtype=dtype, kv_dtype=kv_dtype,
                                nan_fill=False, **REPRESENTATIVE)


def compile_report(module, block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None = None,
                   **tunables) -> dict:
    """compile_report() dict of a Triton variant module (sandbox.analysis.resources): the first kernel's numbers
    on top, `kernels` listing every kernel with its image (cubin, function) for sandbox.analysis.sass."""
    if arch not in ("sm_80", "sm_90"):
        raise ValueError(f"arch must be sm_80 or sm_90, got {arch!r}")
    problem = representative(block_size, head_dim, dtype, kv_dtype)
    prepared = module.prepare(problem, "cpu", **tunables)
    kernels = [dict(name=call.name, **compile_call(call, arch)) for call in prepared.calls]
    for kernel in kernels:
        kernel.pop("ttgir")
    top = {k: v for k, v in kernels[0].items() if k not in ("name", "image", "num_stages")}
    return dict(top, path=PATH, kernels=kernels)
