"""Static resources of every kernel variant, compiled for a real GPU architecture without a GPU.

    collect(variants=None, block_sizes=POW2_BLOCK_SIZES, head_dim=128, dtype="float16", arch="sm_90")
        -> list[dict], one row per (variant, block size)

Walks the registry (variants and cache writers of every family) and asks each module that defines
`compile_report(block_size, head_dim, dtype, arch)` for its registers, shared memory, local memory
and spills, then adds the theoretical occupancy (sandbox.occupancy). Numba's compile_ptx needs
numba.cuda in real mode, so a simulator process runs the collection in a real-mode child.

Also here, for any PTX producer: `link_ptx(ptx, arch)` links with nvJitLink and parses its log.
`collect(..., images=True)` also returns each kernel's cubin, for sandbox.sass to disassemble.
"""
from __future__ import annotations

import re

from . import registry
from .backends import numba_simulated
from .occupancy import occupancy
from .variant import POW2_BLOCK_SIZES

ARCHS = ("sm_80", "sm_90")
DTYPES = ("float32", "float16")
# nvJitLink's summary line for sm_90 counts 1 KB more shared memory than the kernel declares
# (observed: a kernel without shared memory reports 1024 bytes smem on sm_90, 0 on sm_80; one with
# 256 bytes reports 1280 / 256; NVRTC's ptxas reports 256 on both). We subtract it; the runtime's
# per-block reserve is added back by sandbox.occupancy.
LINKER_EXTRA_SMEM = {"sm_90": 1024, "sm_80": 0}
COLUMNS = ("variant", "family", "block_size", "head_dim", "dtype", "arch", "registers", "static_shared_bytes",
           "dynamic_shared_bytes", "local_bytes", "spill_stores", "spill_loads", "threads_per_block",
           "occupancy", "limiter", "path")


def parse_arch(arch: str) -> tuple[int, int]:
    """"sm_90" -> (9, 0); refuses anything but ARCHS."""
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    digits = arch[3:]
    return int(digits[:-1]), int(digits[-1])


_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_LINK_USED = re.compile(r"^info\s*: used (\d+) registers(.*)", re.MULTILINE)
_SMEM = re.compile(r"(\d+) bytes smem")
_STACK = re.compile(r"(\d+) stack")
_LMEM = re.compile(r"(\d+) bytes lmem")


def parse_link_log(log: str, arch: str) -> dict:
    """Resources of the (one) kernel in an nvJitLink `-verbose` info log.

    registers, static_shared_bytes, local_bytes (stack frame: local arrays and spills, per thread),
    spill_stores, spill_loads (bytes). The largest value wins when several functions are listed.
    """
    out = dict(registers=0, static_shared_bytes=0, local_bytes=0, spill_stores=0, spill_loads=0)
    for m in _FRAME.finditer(log):
        out["local_bytes"] = max(out["local_bytes"], int(m.group(1)))
        out["spill_stores"] = max(out["spill_stores"], int(m.group(2)))
        out["spill_loads"] = max(out["spill_loads"], int(m.group(3)))
    for m in _PTXAS_USED.finditer(log):
        out["registers"] = max(out["registers"], int(m.group(1)))
        if s := _SMEM.search(m.group(2)):
            out["static_shared_bytes"] = max(out["static_shared_bytes"], int(s.group(1)))
    for m in _LINK_USED.finditer(log):
        out["registers"] = max(out["registers"], int(m.group(1)))
        rest = m.group(2)
        if s := _SMEM.search(rest):
            declared = max(0, int(s.group(1)) - LINKER_EXTRA_SMEM.get(arch, 0))
            out["static_shared_bytes"] = max(out["static_shared_bytes"], declared)
        for pattern in (_STACK, _LMEM):
            if s := pattern.search(rest):
                out["local_bytes"] = max(out["local_bytes"], int(s.group(1)))
    if not out["registers"]:
        raise RuntimeError(f"no register count in the nvJitLink log for {arch}:\n{log}")
    return out


def link_ptx(ptx: str, arch: str) -> dict:
    """Link PTX for `arch` with nvJitLink (-verbose): parse_link_log() of its info log, plus `image`,
    (cubin, None): the linked cubin and None for "its only entry function"."""
    from cuda.bindings import nvjitlink

    parse_arch(arch)
    options = [f"-arch={arch}", "-verbose"]
    handle = nvjitlink.create(len(options), options)
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
            nvjitlink.complete(handle)
        except Exception as exc:
            raise RuntimeError(f"nvJitLink failed for {arch}: {exc}\n{_log(nvjitlink, handle, 'error')}") from exc
        info = parse_link_log(_log(nvjitlink, handle, "info"), arch)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return dict(info, image=(bytes(cubin), None))
    finally:
        nvjitlink.destroy(handle)


def _log(nvjitlink, handle, kind: str) -> str:
    size = getattr(nvjitlink, f"get_{kind}_log_size")(handle)
    buf = bytearray(size)
    if size:
        getattr(nvjitlink, f"get_{kind}_log")(handle, buf)
    return bytes(buf).rstrip(b"\x00").decode(errors="replace")


def _modules(names):
    """[(name, family, module)] for the given names, or every registered variant and cache writer."""
    if names is None:
        names = registry.variants() + registry.cache_writers()
    out = []
    for name in names:
        if name in registry.CACHE_WRITERS:
            entry = registry.get_cache_writer(name)
        else:
            try:
                entry = registry.get(name)
            except ValueError:
                valid = ", ".join(registry.variants() + registry.cache_writers())
                raise ValueError(f"unknown variant {name!r}; valid names: {valid}") from None
        out.append((name, entry.family, entry.module))
    return out


def without_compile_report(names=None) -> list[str]:
    """The selected (default: every registered) variants and cache writers that define no compile_report."""
    return [name for name, _, module in _modules(names) if not hasattr(module, "compile_report")]


def _supported(module, block_size: int, head_dim: int, dtype: str) -> str | None:
    """Why this variant cannot take the configuration (by its LIMITS), or None."""
    limits = getattr(module, "LIMITS", None)
    if limits is None:
        return None
    if limits.block_sizes is not None and block_size not in limits.block_sizes:
        return f"block_size {block_size} not supported"
    if limits.head_dims is not None and head_dim not in limits.head_dims:
        return f"head_dim {head_dim} not supported"
    if dtype not in limits.dtypes:
        return f"dtype {dtype} not supported"
    return None


def _with_occupancy(entry: dict, arch: str) -> dict:
    occ = occupancy(int(entry["registers"]), int(entry["static_shared_bytes"]) + int(entry["dynamic_shared_bytes"]),
                    int(entry["threads_per_block"]), arch)
    return dict(entry, occupancy=round(occ.fraction, 4), limiter=occ.limiter, blocks_per_sm=occ.blocks_per_sm)


def _take_images(report: dict) -> list:
    """Pop the compiled images out of a compile_report() dict and its `kernels`: [(kernel, cubin, function)].

    A single-kernel report without `kernels` names its kernel "main"; function None means the
    cubin's only entry function.
    """
    top = report.pop("image", None)
    images = [(k.get("name", "main"), *k.pop("image")) for k in report.get("kernels", []) if "image" in k]
    if not images and top is not None:
        images = [("main", *top)]
    return images


def _collect_here(variants=None, block_sizes=POW2_BLOCK_SIZES, head_dim=128, dtype="float16", arch="sm_90",
                  progress=None, images=False) -> list[dict]:
    rows = []
    for name, family, module in _modules(variants):
        if not hasattr(module, "compile_report"):
            continue
        for block_size in block_sizes:
            row = dict(variant=name, family=family, block_size=block_size, head_dim=head_dim, dtype=dtype, arch=arch)
            if progress:
                progress(f"{name} block_size={block_size}")
            reason = _supported(module, block_size, head_dim, dtype)
            if reason:
                rows.append(dict(row, skipped=reason))
                continue
            try:
                report = dict(module.compile_report(block_size, head_dim, dtype, arch))
            except Exception as exc:  # one variant failing to compile must not hide the others
                rows.append(dict(row, error=f"{type(exc).__name__}: {exc}"))
                continue
            compiled = _take_images(report)
            kernels = [_with_occupancy(dict(k, **{f: k.get(f, report[f]) for f in
                                                  ("threads_per_block", "dynamic_shared_bytes")}), arch)
                       for k in report.pop("kernels", [])]
            row.update(_with_occupancy(report, arch))
            row.setdefault("path", "")
            if kernels:
                row["kernels"] = kernels
            if images:
                row["images"] = compiled
            rows.append(row)
    return rows


def collect(variants=None, block_sizes=POW2_BLOCK_SIZES, head_dim: int = 128, dtype: str = "float16",
            arch: str = "sm_90", progress=None, images: bool = False) -> list[dict]:
    """One row per (variant, block size) with the COLUMNS above (plus `kernels` for multi-kernel
    variants, `note`, and `skipped` / `error` where a row has no numbers).

    images=True adds `images`: [(kernel name, cubin bytes, function name or None)] per row.
    """
    parse_arch(arch)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    block_sizes = tuple(int(b) for b in block_sizes)
    _modules(variants)  # unknown names fail here, in this process, with the valid list
    if numba_simulated():
        from .other_mode import call_in_numba_mode
        return call_in_numba_mode(False, "sandbox.resources:_collect_here", variants, block_sizes, head_dim, dtype, arch,
                                  images=images)
    return _collect_here(variants, block_sizes, head_dim, dtype, arch, progress, images)
