"""The family's traffic capture: every tl.load / tl.store the interpreter runs, grouped into a GPU's warp requests.

While a Launch runs in the interpreter, memory.Memory reports each access of each program as (argument, byte
offsets [shape], mask [shape]) and this capture notes the kernel source line that made it. The kernel compiled
for sm_90 (census.compile_call) has, for that line, a TTGIR memory operation whose layout says which (warp,
lane) holds each element and how many consecutive elements one access takes (layouts.py). One warp-level
request is then: one warp, one access slot of the layout (a group of `vector` registers), the lanes whose
elements there are active; its sectors are the distinct 32-byte pieces of those elements' bytes. These are
the records sandbox.analysis.traffic.requests.group() turns into Nsight Compute's metrics, as for the other
families (docs/performance-model.md). Arrays are placed at 256-byte aligned fake bases, as cudaMalloc would.

What the interpreter cannot see is said in each launch's notes: shared memory the compiler inserts (dot
operands, layout conversions, reductions) is not counted, and a store of an element that several threads hold
is counted once (Triton predicates the copies off).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import triton

from sandbox.analysis.occupancy import occupancy
from sandbox.analysis.traffic.requests import RECORD_DTYPE, group
from sandbox.cpucuda.raw import RawLaunch, Site
from sandbox.variant import runner

from . import census, interpret, layouts

_HERE = Path(__file__).resolve().parent
_TRITON = str(Path(triton.__file__).resolve().parent)
_MACHINERY = {str(_HERE / n) for n in ("memory.py", "interpret.py", "traffic.py", "launch.py")}
NOTES = ("shared memory the Triton compiler inserts (dot operands, layout conversions, reductions) is not seen by "
         "the interpreter: shared requests and wavefronts are not counted",
         "an element several threads hold is loaded by each of them and stored by one (Triton masks the copies)")


@dataclasses.dataclass
class _Access:
    program: tuple
    line: tuple            # (file, line) of the kernel source
    target: str
    store: bool
    itemsize: int
    addresses: np.ndarray  # uint64 [elements] fake byte addresses, row-major
    mask: np.ndarray       # bool [elements]
    shape: tuple


def _source_line() -> tuple[str, int]:
    """(file, line) of the innermost kernel-source frame (the first outside Triton's package and this family's
    machinery): the tl.load / tl.store being interpreted."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TRITON) and name not in _MACHINERY:
            return name, frame.f_lineno
        frame = frame.f_back
    raise RuntimeError("a memory access outside any kernel source")


class Recorder:
    """Memory.recorder for one Launch: every access with its program, source line and fake addresses."""

    def __init__(self, memory):
        self.memory, self.accesses, self.bases = memory, [], {}

    def base(self, buffer) -> int:
        if buffer.name not in self.bases:  # 256-byte aligned, one after another
            end = max((b + n for b, n in self.bases.values()), default=0)
            self.bases[buffer.name] = (-(-end // 256) * 256, buffer.bytes.size)
        return self.bases[buffer.name][0]

    def __call__(self, buffer, offsets, mask, store, itemsize):
        addresses = (offsets.astype(np.int64).ravel() + self.base(buffer)).astype(np.uint64)
        self.accesses.append(_Access(self.memory.program, _source_line(), buffer.name, store, itemsize,
                                     addresses, np.asarray(mask).ravel().copy(), offsets.shape))


def _contiguous(access: _Access, slots: np.ndarray) -> bool:
    """Whether every slot's active elements lie at consecutive addresses (what one vector access needs)."""
    if slots.shape[3] == 1:
        return True
    addresses = access.addresses[slots].astype(np.int64)
    both = access.mask[slots][..., 1:] & access.mask[slots][..., :-1]
    return bool(np.all(~both | (np.diff(addresses, axis=3) == access.itemsize)))


def _records(access: _Access, op: layouts.MemoryOp, site: int, num_warps: int, block: int, epoch: int):
    """RECORD_DTYPE rows of one access: one per (warp, access slot, active lane), epochs numbering the slots."""
    held = op.elements(num_warps)                         # [warps, 32, registers]
    size = int(np.prod(access.shape)) if access.shape else 1
    if held.max(initial=0) >= size:
        raise RuntimeError(f"TTGIR layout of {access.line} covers {held.max() + 1} elements, the access has {size}")
    vector = op.vector(access.itemsize)
    if held.shape[2] % vector or not _contiguous(access, held.reshape(num_warps, 32, -1, vector)):
        vector = 1  # addresses the layout's run does not make consecutive (a stride, a gather): one access each
    slots = held.reshape(num_warps, 32, -1, vector)       # [warps, lanes, slots, vector]
    active = access.mask[slots]
    if access.store:  # only the first thread holding an element stores it
        first_holder = np.full(size, -1, np.int64)
        flat = slots.reshape(-1)
        thread_of = np.repeat(np.arange(num_warps * 32), slots.shape[2] * vector)
        order = np.argsort(flat, kind="stable")
        firsts = np.ones(len(flat), bool)
        firsts[1:] = flat[order][1:] != flat[order][:-1]
        first_holder[flat[order][firsts]] = thread_of[order][firsts]
        active &= (first_holder[slots] == np.arange(num_warps * 32).reshape(num_warps, 32, 1, 1))
    addresses = access.addresses[slots]
    starts = np.where(active, addresses, np.uint64(np.iinfo(np.uint64).max)).min(axis=3)
    counts = active.sum(axis=3)
    warp, lane, slot = np.nonzero(counts)
    out = np.zeros(len(warp), RECORD_DTYPE)
    out["block"], out["warp"], out["lane"] = block, warp, lane
    out["epoch"] = epoch + slot
    out["site"] = site
    out["address"] = starts[warp, lane, slot]
    out["width"] = counts[warp, lane, slot] * access.itemsize
    return out[np.lexsort((lane, warp, slot))], slots.shape[2]


def raw_launch(call, recorder: Recorder, accesses: list, arch: str = "sm_90") -> RawLaunch:
    """The RawLaunch of one Call from its recorded accesses (in execution order)."""
    compiled = census.compile_call(call, arch)
    ops = layouts.memory_ops(compiled["ttgir"])
    grid = tuple(call.grid) + (1,) * (3 - len(call.grid))
    sites, site_index, parts, epoch = [], {}, [], 0
    notes = list(NOTES)
    for access in accesses:
        key = (access.line, access.target, access.store)
        candidates = [o for o in ops.get(access.line, []) if (o.kind == "tt.store") == access.store]
        if not candidates:
            raise RuntimeError(f"{call.name}: no TTGIR {'store' if access.store else 'load'} at "
                               f"{access.line[0]}:{access.line[1]} (the interpreter's access to {access.target})")
        if key not in site_index:
            site_index[key] = len(sites)
            relative = Path(access.line[0]).resolve()
            try:
                relative = relative.relative_to(Path.cwd())
            except ValueError:
                pass
            sites.append(Site(str(relative), access.line[1], (), "store" if access.store else "load", "global",
                              access.target))
        x, y, z = access.program
        block = x + grid[0] * (y + grid[1] * z)
        rows, slots = _records(access, candidates[0], site_index[key], call.num_warps, block, epoch)
        epoch += slots
        parts.append(rows)
    records = np.concatenate(parts) if parts else np.zeros(0, RECORD_DTYPE)
    records = records[np.argsort(records["block"], kind="stable")]  # launch order: blockIdx.x fastest
    site_block, sectors = group(records, sites)
    arrays = {name: base_size for name, base_size in recorder.bases.items()}
    return RawLaunch(call.name, grid, (32 * call.num_warps, 1, 1), sites, site_block, sectors, notes=notes,
                     arrays=arrays)


def capture(prepared, arch: str = "sm_90") -> list[RawLaunch]:
    """Run a CPU-backend launch.Launch once in the interpreter, recording: one RawLaunch per kernel call."""
    memory = prepared.args.memory
    recorder = Recorder(memory)
    memory.recorder = recorder
    out = []
    try:
        for call in prepared.calls:
            recorder.accesses = []
            interpret.run(call.kernel, call.grid, memory, *call.args, **call.constexprs)
            out.append((call, recorder.accesses))
    finally:
        memory.recorder = None
    return [raw_launch(call, recorder, accesses, arch) for call, accesses in out]


def resources(call, arch: str = "sm_90") -> dict:
    """The compile census of one call for the performance model: registers, shared memory, spills, occupancy, and
    `image` (cubin, function), the very cubin Triton built, whose SASS sandbox.traffic reads the loads in flight
    from (sandbox/variant/family.py: a capture function's census may carry its image)."""
    compiled = census.compile_call(call, arch)
    threads = 32 * call.num_warps
    occ = occupancy(compiled["registers"], compiled["dynamic_shared_bytes"], threads, arch)
    return dict(registers=compiled["registers"], static_shared_bytes=0,
                dynamic_shared_bytes=compiled["dynamic_shared_bytes"], local_bytes=compiled["local_bytes"],
                spill_stores=compiled["spill_stores"], spill_loads=compiled["spill_loads"],
                threads_per_block=threads, occupancy=round(occ.fraction, 4), blocks_per_sm=occ.blocks_per_sm,
                limiter=occ.limiter, image=tuple(compiled["image"]))


def capture_variant(name: str, problem, counted, with_census: bool, config, device, kind: str = "decode"
                    ) -> tuple[list, list, list]:
    """The family's capture (FAMILY.capture, called by sandbox.traffic): (RawLaunch per call of `counted`, the
    grids of `problem`'s calls, each call's census), the layouts and the census those of `device`'s architecture
    (sm_80 or sm_90: what census.compile_call targets)."""
    if kind != "decode":
        raise ValueError(f"{name}: the Triton capture counts decode problems, not {kind!r}")
    whole, _ = runner.prepare(name, problem, "cpu", config)
    part = whole if counted is problem else runner.prepare(name, counted, "cpu", config)[0]
    launches = capture(part, device.arch)
    grids = [tuple(c.grid) + (1,) * (3 - len(c.grid)) for c in whole.calls]
    res = [resources(c, device.arch) if with_census else dict(census_error="not asked for (census=False)",
                                                              threads_per_block=32 * c.num_warps,
                                                              dynamic_shared_bytes=0)
           for c in whole.calls]
    return launches, grids, res
