"""Compile CUDA C source to a shared object with g++, cached on disk.

The source is rewritten (``source.rewrite_shared``), entry points are
appended (one ``extern "C"`` launcher per kernel name or name expression), and
g++ compiles it against ``include/cpucuda_runtime.h``. The shared object is
cached under a hash of everything that affects it, written to a temporary
name and renamed into place so parallel processes never see half a file, with
its digest beside it, checked before it is loaded (cache_entry.py: a damaged
entry is rebuilt; a folder others can write is refused).

Cache folder: ``$SANDBOX_CPUCUDA_CACHE``, else
``$XDG_CACHE_HOME/paged-attention-sandbox/cpucuda``, else
``~/.cache/paged-attention-sandbox/cpucuda``.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import cache_entry
from . import instrument as _instrument
from . import pch as _pch
from . import ptx as _ptx
from . import source as _source
from . import template_keyword as _template_keyword
from .errors import CpuCompileError
from .modes import build_mode
from .substitute import substituted
from .toolchain import INCLUDE_DIR, SOURCE_ROOT, cache_dir, compiler  # noqa: F401  (cpucuda's modules read them here too)
from .toolchain import compiler_version as _compiler_version

CACHE_VERSION = "cpucuda-4"  # 4: entries carry a digest (cache_entry.py)
# How messages name the cached copy of a source given as a string (`code`).
CODE_LABEL = "<code>"

_BASE_FLAGS = [
    "-fPIC", "-shared", "-fvisibility=hidden",
    # CUDA code type-puns through reinterpret_cast (float4 loads of halves):
    # strict aliasing would let g++ reorder those accesses.
    "-fno-strict-aliasing",
    "-fno-threadsafe-statics", "-w",
    # Probe every page of large frames, so a kernel whose locals outgrow its
    # fiber stack hits the guard page (reported) instead of a neighbour's stack.
    "-fstack-clash-protection",
    # A device function declared but never defined is a link error here (with the
    # linker's own lines), not a dlopen failure at the first launch.
    "-Wl,-z,defs",
]
# Defines a GPU compile would have; passed before the user's options so that
# a user -U (say -U__CUDA_ARCH__) can remove them.
# __CUDACC_VER_*__ say which CUDA compiled the kernel: the NVRTC that builds the sm_80/sm_90 census (13.5).
# Headers test them to choose their production paths (FlashInfer's cp.async, CCCL's "CUDA 12 or newer"), so
# leaving them undefined would run a fallback no GPU build runs.
CUDA_VERSION_MAJOR, CUDA_VERSION_MINOR = 13, 5
_CUDA_DEFINES = ["-D__CUDACC__=1", "-D__CUDA_ARCH__=800", "-D__CPUCUDA__=1", "-D__NVCC__=1",
                 f"-D__CUDACC_VER_MAJOR__={CUDA_VERSION_MAJOR}", f"-D__CUDACC_VER_MINOR__={CUDA_VERSION_MINOR}",
                 "-D__CUDACC_VER_BUILD__=0",
                 # CCCL's own switches off its fp16/bf16/fp8 overloads of cuda::std (math, limits, casts): they
                 # need CUDA's internals of those types, not the executor's stand-ins (include/cpucuda_half.h)
                 "-DCCCL_DISABLE_FP16_SUPPORT", "-DCCCL_DISABLE_BF16_SUPPORT", "-DCCCL_DISABLE_NVFP8_SUPPORT"]
# NVRTC/nvcc options that only mean something on a GPU: accepted and ignored.
_IGNORED_PREFIXES = (
    "-arch", "--gpu-architecture", "-code", "--use_fast_math", "-use_fast_math", "-lineinfo",
    "--generate-line-info", "-G", "--device-debug", "-rdc", "--relocatable-device-code", "-ftz",
    "--ftz", "-prec-div", "--prec-div", "-prec-sqrt", "--prec-sqrt", "-fmad", "--fmad", "-maxrregcount",
    "--maxrregcount", "-Xptxas", "--ptxas-options", "-dlto", "--dlink-time-opt", "-default-device",
    "--device-as-default-execution-space", "--expt-relaxed-constexpr", "-expt-relaxed-constexpr",
    "--extended-lambda", "-extended-lambda", "-restrict", "--restrict", "-w", "--disable-warnings",
    "-dopt", "--dopt", "-O", "-ewp", "--extensible-whole-program", "-dw", "--device-w", "-t",
    "--split-compile", "-split-compile", "--fdevice-time-trace", "-builtin-move-forward",
    "-builtin-initializer-list", "--minimal", "-minimal", "-no-source-include", "--no-source-include",
    "-G", "-pch", "--pch", "-time", "--time",
)


@dataclass
class Options:
    """The parts of an NVRTC option list that mean something to g++."""

    std: str = "c++17"
    flags: list[str] = field(default_factory=list)  # -D/-U/-include, in order
    include_dirs: list[Path] = field(default_factory=list)


def parse_options(options) -> Options:
    """Keep ``-D``/``-U``/``-I``/``-std``/``-include``; ignore GPU-only options.

    Other options are ignored too (NVRTC has many that do not apply), except
    ones that look like typos of the kept ones.
    """
    if isinstance(options, str):
        options = (options,)
    opts = Options()
    items = list(options or ())
    i = 0
    while i < len(items):
        opt = str(items[i])
        i += 1
        value = None
        for short, long in (("-D", "--define-macro"), ("-U", "--undefine-macro"), ("-I", "--include-path"),
                            ("-include", "--pre-include")):
            if opt == short or opt == long:
                if i >= len(items):
                    raise ValueError(f"option {opt} needs a value")
                value, i = str(items[i]), i + 1
            elif opt.startswith(long + "="):
                value = opt[len(long) + 1:]
            elif opt.startswith(short) and short != "-include" and not opt.startswith("-include"):
                value = opt[len(short):]
            if value is not None:
                if short == "-I":
                    opts.include_dirs.append(Path(value).expanduser().resolve())
                elif short == "-include":
                    opts.flags += ["-include", value]
                else:
                    opts.flags.append(short + value)
                break
        if value is not None:
            continue
        m = re.fullmatch(r"--?std=(?:c|gnu)\+\+(\d+)", opt)
        if m:
            opts.std = f"c++{max(int(m.group(1)), 17)}" if m.group(1) not in ("03", "98") else "c++17"
            continue
        if opt.startswith(_IGNORED_PREFIXES) or not opt.startswith("-"):
            continue
        # Unknown NVRTC options are ignored, like GPU-only ones; nothing is lost on the CPU.
    return opts


@functools.lru_cache(maxsize=None)
def _runtime_fingerprint() -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in INCLUDE_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(INCLUDE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def fiber_flags() -> list[str]:
    """``SANDBOX_CPUCUDA_FIBERS=ucontext`` forces the portable context switch."""
    impl = os.environ.get("SANDBOX_CPUCUDA_FIBERS", "auto")
    if impl not in ("auto", "asm", "ucontext"):
        raise ValueError(f"SANDBOX_CPUCUDA_FIBERS={impl!r}: use 'auto', 'asm' or 'ucontext'")
    return ["-DCPUCUDA_UCONTEXT"] if impl == "ucontext" else []


@dataclass(frozen=True)
class Build:
    """A compiled shared object and what it exports."""

    so_path: Path
    source_path: Path
    entries: dict  # kernel name or name expression -> entry index
    shared_names: dict  # generated __shared__ storage name -> source name
    mode: str
    dynamic_names: tuple = ()  # extern __shared__ arrays (views of the dynamic shared memory)
    constants: tuple = ()  # source.ConstantDecl of every __constant__ variable


ENTRY_LINES = 4  # lines entry_code writes per kernel name (_explain maps an error's line back to its name)


def entry_code(names: list[str]) -> str:
    """One launcher, signature, parameter-name and parameter-size function per kernel name."""
    lines = ["", "// ---- sandbox.cpucuda entry points (generated) ----"]
    for i, name in enumerate(names):
        label = json.dumps(name)  # a valid C string literal for these names
        lines += [
            f"CPUCUDA_EXPORT int cpucuda_launch_{i}(void** cpucuda_args, const ::cpucuda::LaunchConfig* cpucuda_cfg,"
            f" char* cpucuda_err, size_t cpucuda_errlen) {{ return ::cpucuda::launch(&{name}, cpucuda_args,"
            f" cpucuda_cfg, cpucuda_err, cpucuda_errlen, {label}); }}",
            f"CPUCUDA_EXPORT const char* cpucuda_signature_{i}(void) {{ return ::cpucuda::signature(&{name}); }}",
            f"CPUCUDA_EXPORT const char* cpucuda_param_type_{i}(int cpucuda_index)"
            f" {{ return ::cpucuda::param_type_name(&{name}, cpucuda_index); }}",
            f"CPUCUDA_EXPORT size_t cpucuda_param_size_{i}(int cpucuda_index)"
            f" {{ return ::cpucuda::param_size(&{name}, cpucuda_index); }}",
        ]
    return "\n".join(lines) + "\n"


def mode_flags(mode: str) -> list[str]:
    """The g++ flags of ``mode`` (its BuildMode's). ``SANDBOX_CPUCUDA_OPT`` replaces the normal mode's -O2,
    ``SANDBOX_CPUCUDA_RACECHECK_OPT`` the racecheck build's -O2 and ``SANDBOX_CPUCUDA_ASAN_OPT`` the ASan
    build's -O1 (the checkers see every access that reaches memory at any level: what the optimiser keeps in
    registers never did); traffic builds keep their -O2, whose accesses are what the counts describe."""
    spec = build_mode(mode)
    flags = list(spec.flags)
    if spec.recorder:  # traffic.py's or racecheck.py's instrumentation flags, with the recorder's hash
        flags += _recorder(mode).compile_flags()
    level = os.environ.get(spec.opt_variable, "") if spec.opt_variable else ""
    if level:
        levels = ("-O0", "-O1", "-O2", "-O3")
        if level not in levels:
            raise ValueError(f"{spec.opt_variable}={level!r}: use -O0, -O1, -O2 or -O3")
        flags = [level if f in levels else f for f in flags]
    return flags


def split_user_flags(opts: Options) -> tuple[list[str], list[str]]:
    """The user's ``-D``/``-U`` options and their ``-include`` pairs, each in the order given.

    Defines go before the runtime header (a user -U__CUDA_ARCH__ or -DNDEBUG reaches it); the
    user's forced includes after it, so they can use CUDA's built-ins (and the precompiled
    runtime header stays the first thing g++ reads).
    """
    defines, includes = [], []
    i = 0
    while i < len(opts.flags):
        if opts.flags[i] == "-include":
            includes += opts.flags[i:i + 2]
            i += 2
        else:
            defines.append(opts.flags[i])
            i += 1
    return defines, includes


def build(code: str, options, names: list[str], mode: str = "normal") -> Build:
    """Compile ``code`` with launchers for ``names``; reuse the cached object if any."""
    flags = mode_flags(mode)
    code = substituted(code)
    opts = parse_options(options)
    headers = _source.user_includes(code, opts.include_dirs)
    rewritten = _source.rewrite_shared(_ptx.translate_source(_template_keyword.insert(code)))
    shared_names = dict(rewritten.names)
    dynamic_names = list(rewritten.dynamic)
    with_constants, constants = _source.rewrite_constants(rewritten.source)
    full = with_constants + entry_code(names)
    flags = ["-std=" + opts.std] + flags + _BASE_FLAGS + fiber_flags() + _CUDA_DEFINES
    defines, pre_includes = split_user_flags(opts)

    h = hashlib.sha256()
    h.update(json.dumps([CACHE_VERSION, mode, flags, defines, pre_includes, [str(d) for d in opts.include_dirs],
                         names, str(INCLUDE_DIR), _compiler_version(), _runtime_fingerprint()]).encode())
    h.update(full.encode())
    for path in headers:
        h.update(str(path).encode() + b"\0" + path.read_bytes())
    key = h.hexdigest()[:32]

    root = cache_entry.checked_folder(cache_dir())
    so_path = root / f"{key}.so"
    src_path = root / f"{key}.cu"
    overlay = root / f"{key}.include"
    overlay_flags = _write_overlay(headers, opts.include_dirs, overlay, shared_names, dynamic_names)
    if not cache_entry.verified(so_path, "compiled kernel"):
        cache_entry.replace_file(src_path, full.encode())
        include_flags = pch_flags(flags, defines) + ["-I", str(INCLUDE_DIR)] + overlay_flags
        for d in opts.include_dirs:
            include_flags += ["-I", str(d)]
        _compile(src_path, so_path, flags + defines, include_flags, pre_includes, names, mode)
    return Build(so_path, src_path, {n: i for i, n in enumerate(names)}, shared_names, mode, tuple(dynamic_names),
                 tuple(constants))


def pch_flags(flags: list[str], defines: list[str]) -> list[str]:
    """``-I`` of the precompiled runtime header for this flag set (pch.py), built if missing; [] without one."""
    return _pch.include_flags(compiler(), _compiler_version(), flags, defines, INCLUDE_DIR, _runtime_fingerprint(),
                              cache_dir())


def _declares(text: str, word: str) -> bool:
    return any(t.kind == "word" and t.text == word for t in _source.tokenize(text))


def _write_overlay(headers, include_dirs, overlay: Path, shared_names: dict, dynamic_names: list) -> list[str]:
    """Copies of the user's headers, searched before the user's -I folders, when any declares ``__shared__``.

    A header that declares ``__shared__`` (or ``__constant__``) must be
    rewritten, and g++ must find the rewritten copy whichever way it is
    included: through any -I folder it lies under (``-I csrc -I
    csrc/attention`` reaches ``csrc/attention/a.cuh`` as ``attention/a.cuh``
    and as ``a.cuh``), or relative to the header that includes it. So every
    user header is copied (rewritten where needed) to its path relative to
    every -I folder that holds it; the copies of one header are hard links of
    one file, so ``#pragma once`` still sees one file.
    """
    texts = {p: p.read_text(errors="replace") for p in headers}
    rewrite = {p: _declares(t, "__shared__") or _declares(t, "__constant__") or _ptx.has_asm(t)
               or bool(_template_keyword.sites(t)) for p, t in texts.items()}
    if not any(rewrite.values()):
        return []
    folders: list[Path] = []
    for k, path in enumerate(headers):
        text = texts[path]
        rels = [path.relative_to(d) for d in include_dirs if path.is_relative_to(d)]
        if not rels:
            if rewrite[path]:
                raise CpuCompileError(f"{path}: declares __shared__ or __constant__, holds inline PTX or needs "
                                      "the template keyword (template_keyword.py) but is not under an -I folder; "
                                      "pass its folder with -I")
            continue
        if rewrite[path]:
            text = _template_keyword.insert(text)
            # a header's untranslatable PTX stops a launch that reaches it, not the compile (ptx.translate)
            rewritten = _source.rewrite_shared(_ptx.translate_source(text, defer=True), tag=f"h{k}_")
            shared_names.update(rewritten.names)
            dynamic_names.extend(rewritten.dynamic)
            text, _ = _source.rewrite_constants(rewritten.source)
        # #line keeps g++ and the sanitizers pointing at the user's file.
        first = overlay / rels[0]
        first.parent.mkdir(parents=True, exist_ok=True)
        cache_entry.replace_file(first, f'#line 1 "{path}"\n{text}'.encode())
        for rel in rels[1:]:
            _atomic_link(first, overlay / rel)
        folders.append(path.parent)  # includes the scan could not resolve: after all else
    # One -idirafter per folder: removing repeated *tokens* would drop every -idirafter but the first,
    # and the folders after it would reach the linker as input files.
    return ["-I", str(overlay)] + [f for d in dict.fromkeys(folders) for f in ("-idirafter", str(d))]


def _atomic_link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # no hard links here: a copy (#pragma once may then see two files)
        tmp.write_bytes(source.read_bytes())
    os.replace(tmp, target)


def _recorder(mode: str):
    """The module (traffic, racecheck) whose RECORDER is linked into ``mode``'s objects (instrument.py)."""
    return importlib.import_module(f".{build_mode(mode).recorder}", __package__)


def _compile(src: Path, so_path: Path, flags, include_flags, pre_includes, names, mode: str = "normal") -> None:
    fd, tmp = tempfile.mkstemp(dir=so_path.parent, prefix=so_path.name + ".", suffix=".tmp")
    os.close(fd)
    cmd = [compiler(), *flags, *include_flags, "-include", "cpucuda_runtime.h", *pre_includes, "-x", "c++", str(src),
           "-x", "none", "-o", tmp]
    if build_mode(mode).recorder:  # an instrumented object, then a link with the recorder (instrument.py)
        steps = _instrument.build_steps(cmd, tmp, _recorder(mode).RECORDER)
    else:
        steps = [cmd]
    started = time.perf_counter()
    try:
        for step in steps:
            # from the repository's root: a repo-relative `#line` name (kernels/cupy_raw/load_source) then resolves to
            # the real file in the debug info ASan and the traffic sites read, whatever the caller's folder
            proc = subprocess.run(step, capture_output=True, text=True, cwd=SOURCE_ROOT)
            if proc.returncode != 0:
                raise CpuCompileError(_explain(proc.stderr, src, names) + "\ncommand: " + shlex.join(step))
        cache_entry.install(tmp, so_path)
    finally:
        Path(tmp).unlink(missing_ok=True)
        Path(tmp + ".o").unlink(missing_ok=True)
    _log_compile(so_path, mode, names, time.perf_counter() - started)


def _log_compile(so_path: Path, mode: str, names, seconds: float) -> None:
    """One JSON line per g++ build to ``$SANDBOX_CPUCUDA_COMPILE_LOG``, when set: where a cold cache's time goes."""
    log = os.environ.get("SANDBOX_CPUCUDA_COMPILE_LOG")
    if not log:
        return
    line = json.dumps({"seconds": round(seconds, 3), "mode": mode, "object": so_path.name, "kernels": list(names)[:4],
                       "test": os.environ.get("PYTEST_CURRENT_TEST", "")})
    with open(log, "a") as f:  # one short write per line: appends from parallel processes stay whole
        f.write(line + "\n")


_REFUSAL = re.compile(r"^(.*?):(\d+):\d+: error: static assertion failed: " + re.escape(_ptx.REFUSAL) + r" (.*)$")


def _ptx_refusals(lines: list[str], src: Path) -> list[str]:
    """"file:line: inline PTX ..." for each asm statement ptx.py refused (a static_assert g++ reached)."""
    out = []
    for ln in lines:
        m = _REFUSAL.match(ln)
        if m:
            file = CODE_LABEL if m.group(1) == str(src) else m.group(1)
            out.append(f"{file}:{m.group(2)}: inline PTX {m.group(3)}")
    return list(dict.fromkeys(out))


_LINKER_FAILED = re.compile(r"^collect2: error: ld returned")
_LINKER_LINE = re.compile(r"^(?:\S*/)?(?:ld|ld\.\w+|collect2)(?:\.exe)?: ")


def _explain(stderr: str, src: Path, names: list[str]) -> str:
    """g++'s errors, with a hint when a requested kernel name did not resolve."""
    text = src.read_text()
    first_entry_line = text.count("\n", 0, text.index("// ---- sandbox.cpucuda entry points")) + 2
    bad = set()
    for m in re.finditer(re.escape(str(src)) + r":(\d+):\d+: error", stderr):
        line = int(m.group(1))
        if line >= first_entry_line:
            bad.add(names[(line - first_entry_line) // ENTRY_LINES])
    lines = stderr.splitlines()
    refused = _ptx_refusals(lines, src)
    if refused:
        more = f"\n(and {len(refused) - 1} more inline PTX statement(s) refused)" if len(refused) > 1 else ""
        return "\n".join(refused[:10]) + more
    first = next((i for i, ln in enumerate(lines) if ": error" in ln), 0)
    if lines[first:first + 1] and _LINKER_FAILED.match(lines[first]):
        # The linker's own lines come before collect2's summary: show them, not only the summary.
        first = next((i for i, ln in enumerate(lines) if _LINKER_LINE.match(ln)), first)
        shown = lines[first:first + 30]
        return "the linker could not link the kernel's shared object:\n" + "\n".join(shown)
    shown = lines[first:first + 30]
    msg = "g++ could not compile the kernel source:\n" + "\n".join(shown)
    if bad:
        msg = (f"no __global__ function matches {sorted(bad)} (check the name or name expression; templates need "
               f"name_expressions with every template argument)\n" + msg)
    return msg
