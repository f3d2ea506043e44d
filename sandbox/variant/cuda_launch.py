"""How CUDA C variants load, launch and report: the module cache, the executor's options, Prepared, the census.

    get_function(backend, path, expression, batch) -> kernel   cupy.RawKernel on a GPU, the CPU executor's elsewhere
    cpu_options(**options)       context manager: CpuRawModule options for kernels fetched inside (asan, thread_order)
    current_cpu_options() -> tuple   the options in force here (a launcher with its own module cache keys on them)
    to_device(array, backend)    C-contiguous upload; bfloat16 and fp8 as raw bits on a GPU (CuPy lacks them)
    Prepared, SplitKVPrepared    launches run in order by launch(); result() downloads (out, lse with return_lse)
    check_shared(name, dynamic, static, what)   Unsupported past the no-opt-in shared-memory limit (48 KiB)
    compile_report(path, expression, arch, threads, dynamic_shared_bytes) -> dict   NVRTC -> cubin census

Modules are cached in-process per (backend, source, name expressions, executor options); the CPU executor also
caches its compiled .so files on disk. On the CPU executor a launcher may name a `batch` of related
instantiations to compile in the same module (e.g. every block size of one head dim and dtype): g++ pays its
fixed cost once per batch. On a GPU only the requested kernel is compiled (NVRTC's cost is per
instantiation, and a batch would cost every request the whole batch). The executor's checking modes
(traffic, racecheck, ASan, thread order) are sandbox.cpucuda.modes(); cpu_options() is for one block of code.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import pathlib

import numpy as np

from ..analysis import nvrtc
from ..devices import backends
from .cuda_source import load_source
from .limits import Unsupported

OPTIONS = ("-std=c++17",)
# Dynamic shared memory every GPU grants without an opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize):
# 48 KiB on every architecture since sm_20, static and dynamic together.
SHARED_LIMIT_BYTES = 48 * 1024
# The same-size unsigned type a GPU upload sees for the dtypes CuPy does not know (ml_dtypes').
_RAW_VIEW = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}

_cpu_options: contextvars.ContextVar = contextvars.ContextVar("cuda_c_cpu_options", default=())


@contextlib.contextmanager
def cpu_options(**options):
    """Pass options to the CPU executor's CpuRawModule for kernels fetched inside the block.

    E.g. `with cpu_options(asan=True): ...` or `cpu_options(thread_order="reverse")` (see
    sandbox/cpucuda/README.md). Ignored on a GPU.
    """
    token = _cpu_options.set(tuple(sorted({**dict(_cpu_options.get()), **options}.items())))
    try:
        yield
    finally:
        _cpu_options.reset(token)


def current_cpu_options() -> tuple:
    """The executor options the enclosing cpu_options() blocks set, as sorted (name, value) pairs: a launcher that
    builds its own modules (kernels/flashinfer, whose compile needs the wheel's include folders) passes them on."""
    return _cpu_options.get()


@functools.lru_cache(maxsize=None)
def _module(backend: str, path: str, expressions: tuple, cpu_opts: tuple):
    code = load_source(path)
    extra = dict(cpu_opts) if backend != "gpu" else {}
    return backends.raw_module(backend, code, OPTIONS, list(expressions), **extra)


@functools.lru_cache(maxsize=None)
def _function(backend: str, path: str, expressions: tuple, cpu_opts: tuple, expression: str):
    return _module(backend, path, expressions, cpu_opts).get_function(expression)


def get_function(backend: str, path, expression: str, batch=()):
    """The kernel `expression` (e.g. "paged_attention_v1<16, 128, __half>") from the .cu at `path`.

    `batch`: on the CPU executor, further name expressions compiled in the same module (cached
    together); ignored on a GPU, where the module holds `expression` alone.
    """
    if backend == "gpu":
        return _function(backend, str(path), (expression,), (), expression)
    batch = tuple(dict.fromkeys(batch))
    expressions = batch if expression in batch else (expression, *batch)  # one module per batch, whatever is asked
    return _function(backend, str(path), expressions, _cpu_options.get(), expression)


def check_shared(name: str, dynamic_bytes: int, static_bytes: int, what: str) -> None:
    """Refuse a launch whose shared memory exceeds the no-opt-in limit, naming the bound."""
    if dynamic_bytes + static_bytes > SHARED_LIMIT_BYTES:
        raise Unsupported(f"{name}: {what} needs {dynamic_bytes + static_bytes} bytes of shared memory "
                         f"({dynamic_bytes} dynamic + {static_bytes} static), over the {SHARED_LIMIT_BYTES}-byte limit")


@functools.lru_cache(maxsize=None)
def _compiled(path: str, expressions: tuple, arch: str):
    return nvrtc.compile_cubin(load_source(path), expressions, arch=arch, options=OPTIONS, name=pathlib.Path(path).name)


def compile_report(path, expression: str, arch: str, threads_per_block: int, dynamic_shared_bytes: int,
                   extra_expressions=()) -> dict:
    """Static resources of kernel `expression` compiled NVRTC -> cubin for `arch` (sm_80, sm_90).

    Keys: registers, static_shared_bytes, dynamic_shared_bytes, local_bytes, spill_stores, spill_loads,
    threads_per_block, path, arch, kernel, image ((cubin, mangled name), for sandbox.analysis.sass).
    """
    arch = arch if str(arch).startswith("sm_") else f"sm_{arch}"
    # sorted: a two-kernel report asks (main, [second]) then (second, [main]); one NVRTC run serves both
    compiled = _compiled(str(path), tuple(sorted({expression, *extra_expressions})), arch)
    res = compiled.resources[expression]
    return dict(registers=res.registers, static_shared_bytes=res.static_shared_bytes,
                dynamic_shared_bytes=int(dynamic_shared_bytes), local_bytes=res.local_bytes,
                spill_stores=res.spill_stores, spill_loads=res.spill_loads,
                threads_per_block=threads_per_block, path="NVRTC -> cubin", arch=arch, kernel=expression,
                image=(compiled.cubin, compiled.lowered[expression]))


class Prepared:
    """Launches (kernel, grid, block, args, shared_mem) run in order by launch(); result() downloads `out`
    (in `out_dtype`: a GPU holds bfloat16 as raw uint16), lse() the log-sum-exp `lse` the launches write (the
    problem's return_lse, or every MLA problem; None: not computed, lse() refuses)."""

    def __init__(self, launches, out, keep=(), out_dtype=None, lse=None):
        self.launches = launches
        self.out = out
        self.keep = keep  # device arrays the launches point at
        self.out_dtype = out_dtype
        self.lse_device = lse  # float32 [num_query_tokens, num_heads] on the device, or None

    def launch(self) -> None:
        for kernel, grid, block, args, shared_mem in self.launches:
            kernel(grid, block, args, shared_mem=shared_mem)

    def result(self) -> np.ndarray:
        out = np.asarray(backends.to_host(self.out))
        return out if self.out_dtype is None else out.view(self.out_dtype)

    def lse(self) -> np.ndarray:
        if self.lse_device is None:
            raise ValueError("this launch computes no log-sum-exp: prepare it for a problem with return_lse=True")
        return np.asarray(backends.to_host(self.lse_device))


class SplitKVPrepared(Prepared):
    """A split-KV variant's two launches: the partition kernel, then the reduce (sandbox.variant.limits's launch_parts)."""

    def _run(self, i: int) -> None:
        kernel, grid, block, args, shared_mem = self.launches[i]
        kernel(grid, block, args, shared_mem=shared_mem)

    def launch_partition(self) -> None:
        """The partition kernel alone (what launch() does minus the reduce): for timing it on its own."""
        self._run(0)

    def launch_reduce(self) -> None:
        """The reduce alone: combines what the last launch_partition() wrote."""
        self._run(1)

    def launch_parts(self):
        """[("partition", launch_partition), ("reduce", launch_reduce)]: launch() one kernel at a time."""
        return [("partition", self.launch_partition), ("reduce", self.launch_reduce)]


def to_device(array: np.ndarray, backend):
    """C-contiguous copy on the backend; on a GPU, dtypes CuPy lacks (bfloat16, fp8) go as raw bits."""
    array = np.ascontiguousarray(array)
    if backend == "gpu" and array.dtype.name in _RAW_VIEW:
        array = array.view(_RAW_VIEW[array.dtype.name])
    return backends.to_device(array, backend)
