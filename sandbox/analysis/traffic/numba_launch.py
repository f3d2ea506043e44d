"""One simulated launch as numba_sim.capture() records it: the hot path every element access takes,
the blocks' grouping into requests (numba_records, the core's requests.group), and the RawLaunch
made at the launch's end (sites named, simulator-only sites marked, notes)."""
from __future__ import annotations

import _thread
import sys
import threading
import time

import numpy as np

from .numba_records import block_records, merge_rows, spread_rows
from .numba_traced import SiteTable, TracedArray, Views, data_address, source_name, stored_name
from sandbox.cpucuda.raw import SECTOR_DTYPE, SITE_BLOCK_DTYPE, RawLaunch, Site
from .requests import group

CHECK_EVERY = 1 << 16  # records between two looks at the clock inside a block
# Device functions that exist only under the simulator (kernels/numba_cuda/reductions.py binds block_max /
# block_sum to them there; a GPU runs shuffle_block_max / shuffle_block_sum), with what a GPU does instead.
SIMULATOR_ONLY = {
    ("kernels.numba_cuda.reductions", "shared_block_max", "block_max"),
    ("kernels.numba_cuda.reductions", "shared_block_sum", "block_sum"),
}
GPU_REDUCTION = ("a GPU reduces with shfl_xor_sync instead: per reduction and warp, 1 shared store (lane 0 of "
                 "each warp) and 1 shared load (blockDim/32 lanes), 1 wavefront each")

_threads = threading._active  # ident -> Thread: every simulated thread is a started threading.Thread
_get_ident = _thread.get_ident


class SimulationTooLong(RuntimeError):
    """The capture's simulated time would exceed its max_seconds."""


class LaunchRecorder:
    """One launch being simulated: its sites, the current block's records, the finished blocks."""

    def __init__(self, capture, manager, context):
        """capture: the numba_sim.Capture this launch belongs to."""
        fn = manager._f
        self.capture = capture
        self.context = context
        self.fn = fn
        self.grid = tuple(int(g) for g in manager._grid_dim)
        self.block = tuple(int(b) for b in manager._block_dim)
        self.num_blocks = int(np.prod(self.grid))
        self.sites = SiteTable(fn.__code__, capture.machinery)
        self.views = Views()
        self.records: list = []
        self.check_at = CHECK_EVERY
        self.stopped: str | None = None
        self.blocks: list = []       # (linear block, rows, sectors) of the blocks simulated
        self.seen = 0                # blocks simulated or represented
        self.traced = None           # the traced kernel arguments, made at the first block
        self.arrays = {}             # argument name -> (fake base address, bytes)
        self.representatives = None  # numba_sample.Representatives, or None: every block runs
        self.local_arrays = {}       # "file:line" -> bytes per thread
        self.names = {}              # (id(code), offset) -> the name a shared array is stored under
        self.started = time.monotonic()

    # -- the hot path: one call per element access --------------------------------------------
    def record(self, frame, target_op: int, view: int, idx) -> None:
        """Log one element access: element `idx` of view `view`, made by `frame` (its address is
        computed with the block's others, in block_records)."""
        thread = _threads[_get_ident()]  # threading.current_thread() without its Python-level call
        sites = self.sites
        site = sites.known.get((frame.f_lasti << 24) | target_op) if frame.f_code is sites.kernel_code else None
        if site is None:  # SiteTable.lookup's first case inlined: most accesses are in the kernel's own code
            site = sites.lookup(frame, target_op)
        records = self.records
        records.append((thread.thread_id, thread._traffic_epoch, site, view, idx))
        if len(records) > self.check_at:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Stop the block's threads once the capture is out of time (each raises at its next access)."""
        if self.stopped is None:
            limit = self.capture.max_seconds
            elapsed = time.monotonic() - self.capture.started
            if limit is None or elapsed <= limit:
                self.check_at = len(self.records) + CHECK_EVERY
                return
            self.stopped = (f"{self.fn.__name__}: block {len(self.blocks) + 1} of the {self._to_run()} to simulate "
                            f"is unfinished after {elapsed:.0f} s of simulation (max_seconds = {limit:g}); the "
                            f"launch needs more than {elapsed * self._to_run():.0f} s: count fewer blocks "
                            f"(represent=) or use a smaller problem")
            self.check_at = -1
        raise SimulationTooLong(self.stopped)

    # -- per block -------------------------------------------------------------------------------
    def run_block(self, original_run, manager, grid_point, args):
        gx, gy, _ = self.grid
        x, y, z = (int(v) for v in grid_point)
        linear = x + gx * (y + gy * z)
        if self.traced is None:
            self._start(args)
        rep = self.representatives
        if rep is not None and rep.blocks[linear] != linear:
            self.seen += 1
            self._maybe_finish()
            return None
        self.records = []
        self.check_at = CHECK_EVERY
        self.sites.new_block()
        try:
            result = original_run(manager, grid_point, *self.traced)
            records = block_records(self.records, linear, self._widths(), self.views, self.target_name)
            rows, sectors = group(records, self._plain_sites())
        except BaseException:
            self.capture.current = None  # the launch is dropped; the next one starts afresh
            raise
        self.records = []
        self.sites.new_block()
        self.blocks.append((linear, rows, sectors))
        self.seen += 1
        self._watchdog()
        self._maybe_finish()
        return result

    def _start(self, args) -> None:
        """Trace the kernel's array arguments (the same objects serve every block of the launch)."""
        from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

        code = self.fn.__code__
        names = code.co_varnames[:code.co_argcount]
        traced, host = [], {}
        for i, arg in enumerate(args):
            name = names[i] if i < len(names) else f"arg{i}"
            if isinstance(arg, FakeWithinKernelCUDAArray):
                array = arg.__dict__["_item"]._ary
                target = self.sites.target(name, "global", array.itemsize, key=("argument", i))
                base = self.capture.addresses.base_of(array)
                arg = TracedArray(array, base, self, target)
                self.arrays[name] = (int(base), int(array.nbytes))
                host[name] = array
            else:
                host[name] = arg
            traced.append(arg)
        self.traced = tuple(traced)
        if self.capture.represent is not None:
            self.representatives = self.capture.represent(self.fn.__name__, self.grid, self.block, host)
            if self.representatives is not None:
                self.representatives.check(self.num_blocks)

    def _to_run(self) -> int:
        rep = self.representatives
        return self.num_blocks if rep is None else rep.simulated

    def _watchdog(self) -> None:
        limit = self.capture.max_seconds
        if limit is None:
            return
        now = time.monotonic()
        done = len(self.blocks)
        projected = (now - self.capture.started) + (now - self.started) / done * (self._to_run() - done)
        if projected > limit:
            raise SimulationTooLong(
                f"{self.fn.__name__}: {done} of {self._to_run()} blocks took {now - self.started:.1f} s to simulate; "
                f"the capture would take about {projected:.0f} s (max_seconds = {limit:g}): count fewer blocks "
                f"(represent=) or use a smaller problem")

    def _widths(self) -> np.ndarray:
        """int64 [sites]: bytes per access of each site (its target's element)."""
        targets = self.sites.targets
        return np.array([targets[s[4]].width for s in self.sites.sites], np.int64)

    def _plain_sites(self) -> list[Site]:
        """One Site per site id, unmerged (requests.group reads their op and space)."""
        targets = self.sites.targets
        return [Site(file, line, chain, op, targets[target].space, targets[target].name)
                for file, line, chain, op, target, _ in self.sites.sites]

    # -- shared and local arrays -----------------------------------------------------------------
    def shared(self, array: np.ndarray, root: np.ndarray, frame) -> TracedArray:
        key = (id(frame.f_code), frame.f_lasti)
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = stored_name(frame.f_code, frame.f_lasti) or f"shared@{frame.f_lineno}"
        where = (source_name(frame.f_code.co_filename), frame.f_lineno)
        target = self.sites.target(name, "shared", array.itemsize, key=("shared",) + where + (array.itemsize,))
        return TracedArray(array, data_address(array) - data_address(root), self, target)

    def note_local(self, frame, nbytes: int) -> None:
        self.local_arrays[f"{source_name(frame.f_code.co_filename)}:{frame.f_lineno}"] = int(nbytes)

    def target_name(self, target: int) -> str:
        return self.sites.targets[target].name

    # -- the end of the launch ---------------------------------------------------------------------
    def _maybe_finish(self) -> None:
        if self.seen == self.num_blocks:
            self.capture.launches.append(self.finish())
            self.capture.current = None

    def finish(self) -> RawLaunch:
        sites, index = self._named_sites()
        rows = [r for _, r, _ in self.blocks]
        all_rows = np.concatenate(rows) if rows else np.zeros(0, SITE_BLOCK_DTYPE)
        all_rows["site"] = index[all_rows["site"]] if len(all_rows) else all_rows["site"]
        rep = self.representatives
        if rep is not None:
            all_rows = spread_rows(all_rows, rep.blocks)
        all_rows = merge_rows(all_rows)
        order = sorted(range(len(self.blocks)), key=lambda i: self.blocks[i][0])
        streams = [self.blocks[i][2] for i in order]
        sectors = np.concatenate(streams) if streams else np.zeros(0, SECTOR_DTYPE)
        return RawLaunch(kernel=self.fn.__name__, grid=self.grid, block=self.block, sites=sites,
                         site_block=all_rows, sectors=sectors, notes=self._notes(sites),
                         represented_by=None if rep is None else rep.blocks.astype(np.int64), arrays=dict(self.arrays))

    def _named_sites(self):
        """The launch's Site list (instructions with equal descriptions merged) and each site id's index in it."""
        simulator_only = simulator_only_codes()
        named, index, out = {}, [], []
        for file, line, chain, op, target, codes in self.sites.sites:
            t = self.sites.targets[target]
            site = Site(file=file, line=line, chain=chain, op=op, space=t.space, target=t.name,
                        simulator_only=any(c in simulator_only for c in codes))
            if site not in named:
                named[site] = len(out)
                out.append(site)
            index.append(named[site])
        return out, np.array(index, np.int32)

    def _notes(self, sites) -> list[str]:
        notes = []
        only = [s for s in sites if s.simulator_only]
        if only:
            where = sorted({f"{s.file}:{s.line}" for s in only})
            notes.append(f"simulator-only path: {len(only)} shared-memory sites of the simulator's block reductions "
                         f"(shared_block_max / shared_block_sum: {', '.join(where)}), marked simulator_only; "
                         + GPU_REDUCTION)
        for where, nbytes in sorted(self.local_arrays.items()):
            notes.append(f"cuda.local.array at {where} ({nbytes} B per thread) not counted: registers or local "
                         "memory on a GPU (compile_report's local_bytes says which)")
        cap = _thread_cap()
        threads = int(np.prod(self.block))
        if cap is not None and threads == cap[0] < cap[1]:
            notes.append(f"blocks of {threads} threads: the simulator's launch size (SIM_MAX_THREADS = {cap[0]}), so "
                         f"warps are partial; a GPU launch uses up to {cap[1]} (prepare the variant inside "
                         "numba_sim.gpu_thread_counts() for GPU-sized blocks)")
        rep = self.representatives
        if rep is not None and rep.simulated < self.num_blocks:
            notes.append(f"blocks counted once and scaled: {rep.simulated} of {self.num_blocks} blocks simulated, "
                         f"each other block given its representative's counts ({rep.reason}); the sector stream "
                         f"holds only the simulated blocks (RawLaunch.represented_by); outputs of the others were "
                         "not computed")
        return notes


def simulator_only_codes() -> set:
    """Code objects of the device functions in SIMULATOR_ONLY that this process's kernels call."""
    codes = set()
    for module_name, function, bound_as in SIMULATOR_ONLY:
        module = sys.modules.get(module_name)
        fn = getattr(module, function, None)
        if fn is not None and getattr(module, bound_as, None) is fn:
            codes.add(getattr(fn, "fn", fn).__code__)
    return codes


def _thread_cap():
    module = sys.modules.get("kernels.numba_cuda.launch")
    if module is None:
        return None
    return module.SIM_MAX_THREADS, module.MAX_THREADS
