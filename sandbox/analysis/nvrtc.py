"""Compile CUDA C for real GPU targets (sm_80, sm_90) without a GPU or driver: NVRTC -> cubin.

    compile_cubin(code, name_expressions, arch="sm_90", options=()) -> Compiled
    Compiled.resources[name_expression] -> Resources(registers, static_shared_bytes, local_bytes,
                                                     spill_stores, spill_loads)

NVRTC (cuda.bindings.nvrtc) needs no driver. Asking for a CUBIN with `--ptxas-options=-v` puts
ptxas's resource lines in the program log; template kernels are instantiated by
nvrtcAddNameExpression and matched to the log through their lowered (mangled) names.
Headers such as cuda_fp16.h come from the CUDA runtime wheel's include folder. The options are
those CuPy passes for a RawModule (`cupy_options`), so the cubin read here is the one a GPU runs.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re

from . import compile_cache
from .cuda_wheels import in_nvidia_wheels, pathfinder_lookup
from .gpus import DEFAULT_ARCH
from .occupancy import ARCHS as _SMS

ARCHS = tuple(_SMS)  # the architectures are listed once, in sandbox.analysis.occupancy
# What CuPy 13/14 hands NVRTC for cupy.RawModule(code=..., options=user_options), read from its
# sources: cupy/_core (assemble_cupy_compiler_options) adds "--std=c++14" only when the user names
# no standard, plus include folders (its bundled CCCL, its own headers, the CUDA headers);
# cupy/cuda/compiler.py (_compile_with_cache_cuda) then appends "-ftz=true" (denormals flushed to
# zero: it changes float division, sqrt and the slow paths ptxas emits) and "-arch=sm_XX" (a cubin).
# The include folders change no code here (the CUDA headers are passed below; RawModule does not
# prepend CuPy's headers), so the numerics-relevant list is cupy_options(user_options).
CUPY_DEFAULT_STD = "--std=c++14"
CUPY_APPENDED = ("-ftz=true",)


def cupy_options(options=()) -> tuple[str, ...]:
    """The options CuPy passes to NVRTC for a RawModule given `options`, minus include folders and -arch."""
    options = tuple(options)
    if not any("-std=" in o for o in options):  # CuPy's use_default_std(): "-std=" or "--std=" anywhere
        options += (CUPY_DEFAULT_STD,)
    return tuple(dict.fromkeys(options + CUPY_APPENDED))


class NvrtcError(RuntimeError):
    """Compilation failed; the message carries NVRTC's program log."""


@dataclasses.dataclass(frozen=True)
class Resources:
    registers: int
    static_shared_bytes: int
    local_bytes: int        # per-thread stack frame (local memory) bytes
    spill_stores: int
    spill_loads: int
    constant_bytes: int = 0


@dataclasses.dataclass
class Compiled:
    arch: str
    cubin: bytes
    log: str
    lowered: dict          # name expression -> mangled name
    resources: dict        # name expression -> Resources (also keyed by mangled name)
    options: tuple = ()    # every option NVRTC received


@functools.lru_cache(maxsize=None)
def cuda_include_dir() -> str:
    """The CUDA runtime wheel's include folder (cuda_fp16.h, vector types, ...)."""
    found = pathfinder_lookup("find_nvidia_header_directory", "cudart")
    if found:
        return found
    header = in_nvidia_wheels("include/cuda_fp16.h", ("nvidia.cu13", "nvidia.cuda_runtime"))
    if header:
        return str(header.parent)
    raise NvrtcError("cuda_fp16.h not found: install the CUDA runtime wheel (nvidia-cuda-runtime / cuda-toolkit[cudart])")


@functools.lru_cache(maxsize=None)
def include_dirs() -> tuple[str, ...]:
    """Folders NVRTC searches: the runtime wheel's headers, and the one holding crt/mma.h (nvidia-cuda-crt,
    cuda-toolkit[crt]) when that is another: <mma.h> (nvcuda::wmma) includes crt/mma.h."""
    folders = [cuda_include_dir()]
    crt = in_nvidia_wheels("include/crt/mma.h", ("nvidia.cu13", "nvidia.cuda_crt", "nvidia.cuda_nvcc"))
    if crt is not None and str(crt.parent.parent) not in folders:
        folders.append(str(crt.parent.parent))
    return tuple(folders)


_MISSING_CRT = 'cannot open source file "crt/mma.h"'


def _check(result, what: str, program=None):
    err = result[0]
    from cuda.bindings import nvrtc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = _log(program) if program is not None else ""
        raise NvrtcError(f"{what} failed: {err.name}\n{log}")
    return result[1] if len(result) == 2 else result[1:]


def _log(program) -> str:
    from cuda.bindings import nvrtc
    err, size = nvrtc.nvrtcGetProgramLogSize(program)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(program, buf)
    return buf.rstrip(b"\x00 ").decode(errors="replace")


_FUNC = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_LMEM = re.compile(r"(\d+) bytes lmem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_log(log: str) -> dict:
    """{mangled entry name: Resources} from a `ptxas -v` log (NVRTC program log)."""
    found: dict = {}
    frames: dict = {}
    current = None
    for line in log.splitlines():
        if m := _FUNC.search(line):
            current = m.group(1)
            found[current] = dict(registers=0, static_shared_bytes=0, local_bytes=0,
                                  spill_stores=0, spill_loads=0, constant_bytes=0)
            continue
        if m := _PROPS.search(line):
            props_for = m.group(1)
            continue
        if m := _FRAME.search(line):
            frames[props_for] = tuple(int(x) for x in m.groups())
            continue
        if current and (m := _USED.search(line)):
            entry = found[current]
            entry["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                entry["static_shared_bytes"] = int(s.group(1))
            if lm := _LMEM.search(line):
                entry["local_bytes"] = int(lm.group(1))
            if c := _CMEM.search(line):
                entry["constant_bytes"] = int(c.group(1))
    out = {}
    for name, entry in found.items():
        if name in frames:
            stack, stores, loads = frames[name]
            entry["local_bytes"] = max(entry["local_bytes"], stack)
            entry["spill_stores"], entry["spill_loads"] = stores, loads
        out[name] = Resources(**entry)
    return out


def compile_cubin(code: str, name_expressions=(), arch: str = DEFAULT_ARCH, options=(), name: str = "kernel.cu") -> Compiled:
    """Compile `code` to a cubin for `arch` (e.g. "sm_80", "sm_90"); instantiate each name expression.

    Raises NvrtcError with the program log on failure. A compile is cached on disk (compile_cache.py: keyed
    by the source, expressions, options and NVRTC's version); failures are not.
    """
    opts = (list(cupy_options(options)) + [f"-arch={arch}"] + [f"-I{d}" for d in include_dirs()]
            + ["--ptxas-options=-v"])
    parts = ["nvrtc", nvrtc_version(), _headers_fingerprint(), code, list(name_expressions), opts, name]
    return compile_cache.cached("nvrtc", parts, lambda: _compile_cubin(code, tuple(name_expressions), arch, opts, name),
                                types=(Compiled, Resources))


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=None)
def _headers_fingerprint() -> list:
    """The CUDA header folders' files (name, size, mtime): a reinstalled wheel is a new cache key."""
    out = []
    for folder in include_dirs():
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_file():
                st = entry.stat()
                out.append([folder, entry.name, st.st_size, int(st.st_mtime)])
    return out


def _compile_cubin(code: str, name_expressions: tuple, arch: str, opts: list, name: str) -> Compiled:
    from cuda.bindings import nvrtc

    program = _check(nvrtc.nvrtcCreateProgram(code.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(nvrtc.nvrtcAddNameExpression(program, expr.encode()), f"nvrtcAddNameExpression({expr!r})", program)
        (err,) = nvrtc.nvrtcCompileProgram(program, len(opts), [o.encode() for o in opts])
        log = _log(program)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            hint = ("\n<mma.h> needs crt/mma.h: install nvidia-cuda-crt (pip install 'cuda-toolkit[crt]')"
                    if _MISSING_CRT in log else "")
            raise NvrtcError(f"NVRTC compile for {arch} failed ({err.name}), options {opts}:\n{log}{hint}")
        size = _check(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize", program)
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN", program)
        lowered = {}
        for expr in name_expressions:
            mangled = _check(nvrtc.nvrtcGetLoweredName(program, expr.encode()), f"nvrtcGetLoweredName({expr!r})", program)
            lowered[expr] = mangled.decode() if isinstance(mangled, bytes) else mangled
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    by_mangled = parse_ptxas_log(log)
    resources = dict(by_mangled)
    for expr, mangled in lowered.items():
        if mangled in by_mangled:
            resources[expr] = by_mangled[mangled]
    return Compiled(arch, cubin, log, lowered, resources, tuple(opts))
