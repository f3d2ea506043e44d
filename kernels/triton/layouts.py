"""Which lane of which warp holds each element of a Triton tensor: the TTGIR layouts of a kernel's memory operations.

A compiled kernel's TTGIR (Triton's GPU dialect, after its coalescing pass) gives every global load, store and
async copy a pointer tensor type such as `tensor<32x128x!tt.ptr<f16>, #blocked>`, where
`#blocked = #ttg.blocked<{sizePerThread = [1, 8], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>`,
and a source location. `memory_ops(ttgir)` lists them by (file, line); `Blocked.elements(shape, num_warps)` maps
each (warp, lane, register) to the element it holds. Rules (Triton's blocked layout):
  per dim d the CTA tile is sizePerThread * threadsPerWarp * warpsPerCTA elements; a thread's lane and warp are
  split over the dims fastest-first (`order`); a thread holds sizePerThread consecutive elements per tile
  repetition; a tensor smaller than the tile wraps (several threads hold one element: a broadcast);
  `#ttg.slice<{dim = k, parent = L}>` is L on the shape with a dim of 1 inserted at k, that dim then dropped.
A thread's registers run fastest along order[0]; `vector` of them are one access (see vector_width).
"""
from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

_BLOCKED = re.compile(r"^(#\w+) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = \[([\d, ]+)\], "
                      r"warpsPerCTA = \[([\d, ]+)\], order = \[([\d, ]+)\]", re.MULTILINE)
_LOC_DEF = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$", re.MULTILINE)
_FILE_LINE = re.compile(r"\"([^\"]+)\":(\d+):\d+")
_LOC_REF = re.compile(r"#loc\d*")
_OP = re.compile(r"\b(tt\.load|tt\.store|ttg\.async_copy_global_to_local)\b.* : (tensor<(?P<shape>(?:\d+x)+)!tt\.ptr<(?P<elem>\w+)>, "
                 r"(?P<layout>#ttg\.slice<\{dim = (?P<dim>\d+), parent = (?P<parent>#\w+)\}>|#\w+)>|!tt\.ptr<(?P<scalar>\w+)>)"
                 r".*loc\((?P<loc>#loc\d*)\)\s*$")
_CONTIGUITY = re.compile(r"contiguity = (\d+)")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


@dataclasses.dataclass(frozen=True)
class Blocked:
    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]

    def _split(self, index: int, counts: tuple[int, ...]) -> list[int]:
        """A linear lane (or warp) index split over the dims, order[0] fastest."""
        out = [0] * len(counts)
        for d in self.order:
            out[d] = index % counts[d]
            index //= counts[d]
        return out

    def elements(self, shape: tuple[int, ...], num_warps: int) -> np.ndarray:
        """int64 [num_warps, 32, registers]: the row-major flat index of the element each register holds; a
        thread's registers run along order[0] fastest (sizePerThread of them per tile repetition)."""
        ndim = len(shape)
        tiles = [self.size_per_thread[d] * self.threads_per_warp[d] * self.warps_per_cta[d] for d in range(ndim)]
        reps = [max(1, -(-shape[d] // tiles[d])) for d in range(ndim)]
        out = []
        for warp in range(num_warps):
            w = self._split(warp % int(np.prod(self.warps_per_cta)), self.warps_per_cta)
            lanes = []
            for lane in range(32):
                t = self._split(lane % int(np.prod(self.threads_per_warp)), self.threads_per_warp)
                # per dim: [reps, sizePerThread] coordinates, wrapped into the shape
                axes = [((np.arange(reps[d])[:, None] * tiles[d] + w[d] * self.size_per_thread[d] * self.threads_per_warp[d]
                          + t[d] * self.size_per_thread[d] + np.arange(self.size_per_thread[d])[None, :]) % shape[d])
                        for d in range(ndim)]
                # registers: dims slowest-first by reverse order, each as (rep, element), element of order[0] last
                slow_to_fast = list(reversed(self.order))
                rep_axes = [axes[d] for d in slow_to_fast]
                grids = np.meshgrid(*[a[:, 0] * 0 + np.arange(a.shape[0]) for a in rep_axes], indexing="ij")
                coords = []
                for reps_index in zip(*(g.ravel() for g in grids)):
                    inner = np.meshgrid(*[rep_axes[i][r] for i, r in enumerate(reps_index)], indexing="ij")
                    coords.append([c.ravel() for c in inner])
                flat = np.concatenate([np.ravel_multi_index([c[slow_to_fast.index(d)] for d in range(ndim)], shape)
                                       for c in coords])
                lanes.append(flat)
            out.append(lanes)
        return np.asarray(out, dtype=np.int64)

    def vector_elements(self) -> int:
        """Consecutive elements a thread holds along the fastest dim (the most one access can take)."""
        return self.size_per_thread[self.order[0]]


@dataclasses.dataclass(frozen=True)
class MemoryOp:
    """One global memory operation of the TTGIR: kind, pointer tensor shape, element type, layout, slice dim."""
    kind: str                       # tt.load, tt.store, ttg.async_copy_global_to_local
    shape: tuple[int, ...]          # () for a scalar pointer
    element: str                    # f16, f32, i32, ...
    layout: Blocked | None          # None for a scalar pointer
    sliced: int | None              # the dim a #ttg.slice layout removes from its parent's shape
    contiguity: int | None          # the async copy's proven contiguity (elements), if stated

    def elements(self, num_warps: int) -> np.ndarray:
        """int64 [num_warps, 32, registers] of flat element indices (a scalar: every lane holds element 0); computed
        once per (operation, num_warps): read-only."""
        return _held(self, num_warps)

    def _elements(self, num_warps: int) -> np.ndarray:
        if self.layout is None:
            return np.zeros((num_warps, 32, 1), np.int64)
        shape = self.shape if self.sliced is None else self.shape[:self.sliced] + (1,) + self.shape[self.sliced:]
        held = self.layout.elements(shape, num_warps)  # an inserted dim of 1 leaves the flat index alone
        # A wrapped dim repeats an element in one thread's registers: it holds (and accesses) it once.
        first = np.unique(held[0, 0], return_index=True)[1]
        return held[:, :, np.sort(first)]

    def vector(self, itemsize: int) -> int:
        """Elements per access: the thread's run along the fastest dim, at most 16 bytes, at most the contiguity
        the compiler proved (sliced layouts and scalars: 1)."""
        if self.layout is None or self.sliced is not None:
            return 1
        vector = min(self.layout.vector_elements(), max(1, 16 // itemsize))
        return min(vector, self.contiguity) if self.contiguity else vector


@functools.lru_cache(maxsize=256)
def _held(op: MemoryOp, num_warps: int) -> np.ndarray:
    held = op._elements(num_warps)
    held.flags.writeable = False
    return held


def _resolve(loc: str, defs: dict, depth: int = 0) -> tuple[str, int] | None:
    """(file, line) a #loc reference stands for, following named and call-site locations to the first file."""
    text = defs.get(loc, "")
    found = _FILE_LINE.search(text)
    if found:
        return found.group(1), int(found.group(2))
    if depth > 20:
        return None
    for ref in _LOC_REF.findall(text):
        resolved = _resolve(ref, defs, depth + 1)
        if resolved:
            return resolved
    return None


def memory_ops(ttgir: str) -> dict[tuple[str, int], list[MemoryOp]]:
    """{(file, line): [MemoryOp, ...]} for the global loads, stores and async copies of a TTGIR module."""
    layouts = {m.group(1): Blocked(*(_ints(m.group(i)) for i in range(2, 6))) for m in _BLOCKED.finditer(ttgir)}
    defs = {m.group(1): m.group(2) for m in _LOC_DEF.finditer(ttgir)}
    out: dict[tuple[str, int], list[MemoryOp]] = {}
    for line in ttgir.splitlines():
        m = _OP.search(line)
        if not m:
            continue
        where = _resolve(m.group("loc"), defs)
        if where is None:
            continue
        contiguity = _CONTIGUITY.search(line)
        if m.group("scalar"):
            op = MemoryOp(m.group(1), (), m.group("scalar"), None, None, None)
        else:
            name = m.group("parent") or m.group("layout")
            op = MemoryOp(m.group(1), _ints(m.group("shape").rstrip("x").replace("x", ",")), m.group("elem"),
                          layouts.get(name), int(m.group("dim")) if m.group("dim") else None,
                          int(contiguity.group(1)) if contiguity else None)
        out.setdefault(where, []).append(op)
    return out
