"""SASS, the GPU's own machine code, of every kernel variant, read without a GPU, and a census of it.

    disassemble(cubin) -> {function name: SASS text}    nvdisasm from the CUDA wheel (cuda-toolkit[nvdisasm])
    census(sass) -> Census                              instructions by class; global accesses by width
    collect(variants, block_sizes, head_dim, dtype, arch) -> list of rows, one per (variant, block size, kernel)

Why: `sandbox.analysis.resources` says whether a kernel fits an SM (registers, shared memory, spills); the
instructions say whether it does what its design claims: 16-byte K/V loads (LDG.E.128), no local
memory (LDL/STL), no float64 math, how many barriers and shuffles. These are static counts, not a
profile: an instruction inside a loop counts once, however often it runs.
"""
from __future__ import annotations

import concurrent.futures

import collections
import dataclasses
import functools
import os
import re
import shutil
import subprocess
import tempfile

from . import resources
from .cuda_wheels import in_nvidia_wheels, pathfinder_lookup
from .gpus import DEFAULT_ARCH

# One SASS instruction line of nvdisasm -c: "/*0e70*/  @!P1 LDG.E.128.CONSTANT R8, desc[UR8][R42.64] ;"
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")
_FUNCTION = re.compile(r"^//-+ \.text\.(\S+) +-+$", re.MULTILINE)  # nvdisasm pads short names with spaces
# Access width modifiers: .128/.64 (bits), .U16/.S16/.U8/.S8; none means 32 bits.
_WIDTH = re.compile(r"\.(?:(8|16|32|64|128|256)|[US](8|16))(?=\.|$)")

GLOBAL_LOADS = ("LDG", "LDGSTS")     # LDGSTS: cp.async, global -> shared
GLOBAL_STORES = ("STG",)
GENERIC = ("LD", "ST")               # address space unknown to the compiler: may be global, shared or local
LOCAL = ("LDL", "STL")               # per-thread stack: spills and local arrays
SHARED_LOADS = ("LDS", "LDSM")
SHARED_STORES = ("STS",)
ATOMICS = ("ATOM", "ATOMG", "ATOMS", "RED", "REDG")
FP64 = ("DADD", "DMUL", "DFMA", "DSETP", "DMNMX")   # and F2F to or from .F64 (a conversion)


class SassError(RuntimeError):
    """nvdisasm is missing or failed."""


@dataclasses.dataclass(frozen=True)
class Census:
    """Static instruction counts of one function (NOP padding left out).

    global_loads / global_stores: {access width in bits: instructions}; generic: LD/ST through a
    generic address; local: LDL + STL; calls: CALL to a subroutine (a slow path such as 64-bit
    integer division: its instructions are not counted here); fp64: double-precision instructions.
    """

    instructions: int
    global_loads: dict
    global_stores: dict
    generic: int
    local: int
    shared_loads: int
    shared_stores: int
    barriers: int
    shuffles: int
    atomics: int
    calls: int
    fp64: int

    @property
    def vector_loads(self) -> int:
        """Global loads of 128 bits or more (one 16-byte vector per thread per instruction)."""
        return sum(n for bits, n in self.global_loads.items() if bits >= 128)

    def as_row(self) -> dict:
        return dict(instructions=self.instructions, global_loads=_widths(self.global_loads),
                    global_stores=_widths(self.global_stores), vector_loads=self.vector_loads,
                    generic=self.generic, local=self.local, shared_loads=self.shared_loads,
                    shared_stores=self.shared_stores, barriers=self.barriers, shuffles=self.shuffles,
                    atomics=self.atomics, calls=self.calls, fp64=self.fp64)


def _widths(by_bits: dict) -> str:
    """{128: 16, 32: 11} -> "128b:16 32b:11" (widest first)."""
    return " ".join(f"{bits}b:{n}" for bits, n in sorted(by_bits.items(), reverse=True))


def access_bits(modifiers: str) -> int:
    """Width of a load or store from its modifiers (".E.128.CONSTANT" -> 128, ".E.U16" -> 16, ".E" -> 32)."""
    m = _WIDTH.search(modifiers)
    if not m:
        return 32
    return int(m.group(1) or m.group(2))


def census(sass: str) -> Census:
    """Count the instructions of one function's SASS (as nvdisasm -c prints it) by class."""
    counts: collections.Counter = collections.Counter()
    loads: collections.Counter = collections.Counter()
    stores: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        opcode, modifiers = m.groups()
        if opcode == "NOP":  # alignment padding after the last branch
            continue
        counts["instructions"] += 1
        if opcode in GLOBAL_LOADS:
            loads[access_bits(modifiers)] += 1
        elif opcode in GLOBAL_STORES:
            stores[access_bits(modifiers)] += 1
        elif opcode in GENERIC:
            counts["generic"] += 1
        elif opcode in LOCAL:
            counts["local"] += 1
        elif opcode in SHARED_LOADS:
            counts["shared_loads"] += 1
        elif opcode in SHARED_STORES:
            counts["shared_stores"] += 1
        elif opcode == "BAR":
            counts["barriers"] += 1
        elif opcode == "SHFL":
            counts["shuffles"] += 1
        elif opcode in ATOMICS:
            counts["atomics"] += 1
        elif opcode == "CALL":
            counts["calls"] += 1
        elif opcode in FP64 or (opcode == "F2F" and ".F64" in modifiers):
            counts["fp64"] += 1
    fields = ("instructions", "generic", "local", "shared_loads", "shared_stores", "barriers", "shuffles",
              "atomics", "calls", "fp64")
    return Census(global_loads=dict(loads), global_stores=dict(stores), **{f: counts[f] for f in fields})


@functools.lru_cache(maxsize=None)
def nvdisasm_path() -> str:
    """nvdisasm from the nvidia-cuda-nvdisasm wheel (a default dependency), else from PATH."""
    found = pathfinder_lookup("find_nvidia_binary_utility", "nvdisasm") or in_nvidia_wheels(
        "bin/nvdisasm", ("nvidia.cu13", "nvidia.cuda_nvdisasm"))
    if found:
        return str(found)
    found = shutil.which("nvdisasm")
    if found:
        return found
    raise SassError("nvdisasm not found: install the CUDA wheel (pip install 'cuda-toolkit[nvdisasm]')")


@functools.lru_cache(maxsize=64)
def disassemble(cubin: bytes) -> dict:
    """{function name (mangled): SASS text} of every function in `cubin`, in file order.

    Cached: a CUDA C module holds every block size of a kernel, and numba's code does not depend on
    the block size, so a sweep's rows share a few cubins.
    """
    if cubin[:4] != b"\x7fELF":
        raise ValueError("cubin must be an ELF image (a cubin), got bytes that do not start with \\x7fELF")
    with tempfile.TemporaryDirectory(prefix="sandbox-sass-") as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        done = subprocess.run([nvdisasm_path(), "-c", path], capture_output=True, text=True)
    if done.returncode != 0:
        raise SassError(f"nvdisasm failed ({done.returncode}): {done.stderr.strip()}")
    return split_functions(done.stdout)


def split_functions(listing: str) -> dict:
    """{function name: its part of an nvdisasm listing} (the text between two .text section headers)."""
    heads = list(_FUNCTION.finditer(listing))
    return {m.group(1): listing[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(listing)].strip("\n")
            for i, m in enumerate(heads)}


def entry_functions(functions: dict) -> list:
    """Names of the kernels (entry functions) among disassemble()'s functions, not the subroutines
    they call (e.g. __cuda_sm20_div_s64, the 64-bit division slow path)."""
    return [name for name, text in functions.items() if "STO_CUDA_ENTRY" in text]


def function_sass(cubin: bytes, function: str | None) -> str:
    """SASS of `function` in `cubin`; None takes the only kernel (numba links one per cubin)."""
    functions = disassemble(cubin)
    if function is None:
        entries = entry_functions(functions)
        if len(entries) != 1:
            raise SassError(f"the cubin holds {len(entries)} kernels ({', '.join(entries)}): name one")
        return functions[entries[0]]
    if function not in functions:
        raise SassError(f"function {function!r} not in the cubin; it holds: {', '.join(functions)}")
    return functions[function]


COLUMNS = ("variant", "kernel", "block_size", "head_dim", "dtype", "kv_dtype", "arch", "instructions", "global_loads",
           "vector_loads", "global_stores", "generic", "local", "shared_loads", "shared_stores", "barriers",
           "shuffles", "atomics", "calls", "fp64")


def collect(variants=None, block_sizes=(16,), head_dim: int = 128, dtype: str = "float16", arch: str = DEFAULT_ARCH,
            keep_sass: bool = False, progress=None, kv_dtype: str | None = None) -> list[dict]:
    """One row per (variant, block size, kernel) with COLUMNS (and `sass`, the listing, if keep_sass).

    Compiles through sandbox.analysis.resources (the same configurations it reports), so a variant that
    cannot take the configuration gives a row with `skipped`, one that fails to compile `error`.
    dtype: the query's (bfloat16 too); kv_dtype: an fp8 cache (None: the query's dtype).
    """
    compiled = resources.collect(variants, block_sizes, head_dim, dtype, arch, progress=progress, images=True,
                                 kv_dtype=kv_dtype)
    return census_rows(compiled, keep_sass)


def census_rows(resource_rows, keep_sass: bool = False) -> list[dict]:
    """collect()'s rows from sandbox.analysis.resources rows collected with images=True.

    Each distinct cubin is disassembled once, in parallel over the cores (nvdisasm is a process: about
    0.9 s a cubin, 77 of them in a default sweep)."""
    wanted: dict = {}  # cubin -> the functions asked of it (None: its only kernel)
    for row in resource_rows:
        for _, cubin, function in () if ("skipped" in row or "error" in row) else row["images"]:
            wanted.setdefault(cubin, set()).add(function)
    workers = max(1, min(8, os.cpu_count() or 1, len(wanted)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        texts = dict(zip(wanted, pool.map(lambda cubin: _texts(cubin, wanted[cubin]), wanted)))
    rows = []
    for row in resource_rows:
        base = {k: row[k] for k in ("variant", "block_size", "head_dim", "dtype", "arch")}
        base["kv_dtype"] = row.get("kv_dtype") or row["dtype"]
        if "skipped" in row or "error" in row:
            rows.append(dict(base, kernel="", **{k: row[k] for k in ("skipped", "error") if k in row}))
            continue
        for kernel, cubin, function in row["images"]:
            text = texts[cubin][function]
            entry = dict(base, kernel=kernel, **census(text).as_row())
            if keep_sass:
                entry["sass"] = text
            rows.append(entry)
    return rows


def _texts(cubin: bytes, functions) -> dict:
    """{function: its SASS} for the functions asked of one cubin (function_sass's rules for None)."""
    return {function: function_sass(cubin, function) for function in functions}
