"""Link PTX for a real GPU architecture with nvJitLink (no GPU needed) and read the resources ptxas reports.

    link_ptx(ptx, arch) -> dict      registers, static_shared_bytes, local_bytes, spill_stores, spill_loads, image
    parse_link_log(log, arch)        the same from an nvJitLink `-verbose` info log
    parse_arch("sm_90") -> (9, 0)    refuses anything but ARCHS

A toolchain for any PTX producer (the Numba family's compile reports); sandbox.analysis.resources re-exports it.
"""
from __future__ import annotations

import re

from ..errors import RefusedRequest
from .occupancy import ARCHS as _SMS

ARCHS = tuple(_SMS)  # the architectures are listed once, in sandbox.analysis.occupancy
# nvJitLink's summary line for sm_90 counts 1 KB more shared memory than the kernel declares
# (observed: a kernel without shared memory reports 1024 bytes smem on sm_90, 0 on sm_80; one with
# 256 bytes reports 1280 / 256; NVRTC's ptxas reports 256 on both). We subtract it (occupancy.SM's
# linker_extra_shared); the runtime's per-block reserve is added back by sandbox.analysis.occupancy.
LINKER_EXTRA_SMEM = {arch: sm.linker_extra_shared for arch, sm in _SMS.items()}


def parse_arch(arch: str) -> tuple[int, int]:
    """"sm_90" -> (9, 0); refuses anything but ARCHS."""
    if arch not in ARCHS:
        raise RefusedRequest(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
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
