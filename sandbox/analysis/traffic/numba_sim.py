"""Memory traffic of Numba kernels counted under the CUDA simulator: `capture()` -> RawLaunch list.

    with numba_sim.capture() as launches:
        launch = variant.prepare(problem, "cpu")
        launch.launch()
    launches  # one sandbox.analysis.traffic.raw.RawLaunch per simulated kernel launch, in order

Inside the block, every simulated launch is recorded: its device arrays are replaced by traced
arrays (numba_traced) that log each element access with its thread, barrier epoch and source site;
`cuda.shared.array` (static and dynamic) returns traced arrays too; `cuda.atomic.*` on a traced
array is logged as op "atomic"; `syncthreads` advances the thread's epoch. At the end of each block
the log is put in an execution order that does not depend on the simulator's thread interleaving
(block_records) and the core's requests.group turns it into warp-level requests (rows per site,
global sector stream); at the end of the launch the sites are named and the RawLaunch is appended.

Not counted: `cuda.local.array` (registers or local memory on a GPU: which one is the compiler's
choice, shown by compile_report's local_bytes and spills, not by the simulator; each launch's notes
name the local arrays it made), scalar kernel arguments (parameter space), and anything a kernel
reads through NumPy calls on a whole array (none of the project's kernels does). The
definitions and what differs from a GPU are in docs/performance-model.md ("How the Numba simulator
counts").

Cost: the simulator's own time times about 1.3-3.9 (measured in docs/performance-model.md). Large
problems: `represent=` counts one block for each class of identical-work blocks (numba_sample),
and `max_seconds=` refuses a capture whose simulated time would exceed it, with an estimate.
"""
from __future__ import annotations

import _thread
import contextlib
import dataclasses
import dis
import sys
import threading
import time

import numpy as np

from .numba_traced import GlobalAddresses, SiteTable, TracedArray, Views, data_address, source_name
from .raw import SECTOR_DTYPE, SITE_BLOCK_DTYPE, RawLaunch, Site
from .requests import RECORD_DTYPE, group

CHECK_EVERY = 1 << 16  # records between two looks at the clock inside a block
ATOMIC_OPS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin", "cas",
              "compare_and_swap")
# Device functions that exist only under the simulator (kernels/numba_cuda/common.py binds block_max /
# block_sum to them there; a GPU runs shuffle_block_max / shuffle_block_sum), with what a GPU does instead.
SIMULATOR_ONLY = {
    ("kernels.numba_cuda.common", "shared_block_max", "block_max"),
    ("kernels.numba_cuda.common", "shared_block_sum", "block_sum"),
}
GPU_REDUCTION = ("a GPU reduces with shfl_xor_sync instead: per reduction and warp, 1 shared store (lane 0 of "
                 "each warp) and 1 shared load (blockDim/32 lanes), 1 wavefront each")

_active = None
_active_lock = threading.Lock()
_threads = threading._active  # ident -> Thread: every simulated thread is a started threading.Thread
_get_ident = _thread.get_ident


class SimulationTooLong(RuntimeError):
    """The capture's simulated time would exceed its max_seconds."""


@contextlib.contextmanager
def capture(represent=None, max_seconds: float | None = None):
    """Record every simulated kernel launch made inside the block; yields the list of RawLaunch.

    represent    None (simulate every block), or a callable (kernel name, grid, block, args) ->
                 numba_sample.Representatives | None, asked once per launch (args: the kernel's
                 parameters by name, arrays as host NumPy arrays): blocks it maps to another block
                 are not simulated and get their representative's counts (numba_sample.decode_representatives).
    max_seconds  refuse (SimulationTooLong, with the projected time) once the simulated time of
                 the capture would exceed it; None: no limit.
    """
    global _active
    _require_simulator()
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be positive or None, got {max_seconds!r}")
    with _active_lock:
        if _active is not None:
            raise RuntimeError("numba_sim.capture() is already active in this process: captures do not nest")
        _active = Capture(represent, max_seconds)
    patches = []
    try:
        _install(_active, patches)
        yield _active.launches
    finally:
        for owner, name, previous in reversed(patches):
            if previous is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        _active = None


@contextlib.contextmanager
def gpu_thread_counts():
    """Let the Numba variants size their blocks as on a GPU (up to MAX_THREADS, 128) while the
    simulator runs them; prepare() the variant inside. By default the simulator's launches are
    capped at SIM_MAX_THREADS (16) threads per block, so their warps are partial."""
    from kernels.numba_cuda import common

    previous = common.SIM_MAX_THREADS
    common.SIM_MAX_THREADS = common.MAX_THREADS
    try:
        yield
    finally:
        common.SIM_MAX_THREADS = previous


def _require_simulator() -> None:
    from numba import config
    if not config.ENABLE_CUDASIM:
        raise RuntimeError("numba_sim.capture() counts traffic under the Numba CUDA simulator: this process runs "
                           "numba.cuda in real mode (set NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported)")


class Capture:
    """State of one capture(): the finished launches, the fake address space, the launch in progress."""

    def __init__(self, represent, max_seconds):
        self.launches: list[RawLaunch] = []
        self.addresses = GlobalAddresses()
        self.machinery = {}
        self.represent = represent
        self.max_seconds = max_seconds
        self.started = time.monotonic()
        self.current: LaunchRecorder | None = None

    def launch_for(self, manager) -> "LaunchRecorder":
        from numba.cuda.simulator import kernel

        context = kernel._get_kernel_context()
        if self.current is None or self.current.context is not context:
            self.current = LaunchRecorder(self, manager, context)  # an unfinished one raised: dropped
        return self.current


class LaunchRecorder:
    """One launch being simulated: its sites, the current block's records, the finished blocks."""

    def __init__(self, capture: Capture, manager, context):
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
            all_rows = _spread(all_rows, rep.blocks)
        all_rows = _merge_rows(all_rows)
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


def block_records(records: list, block: int, widths: np.ndarray, views: Views, target_name) -> np.ndarray:
    """One block's (thread, epoch, site, view, index) tuples as RECORD_DTYPE rows, in an execution
    order that does not depend on how the simulator interleaved its threads: by epoch, warp, the
    access's place in its thread's program order within the epoch, lane."""
    out = np.zeros(len(records), RECORD_DTYPE)
    if not records:
        return out
    thread, epoch, site, view, idx = zip(*records)
    thread, epoch, site = (np.array(c, np.int64) for c in (thread, epoch, site))
    by_thread = np.lexsort((epoch, thread))  # stable: a thread's records keep their program order
    first = np.ones(len(records), bool)
    first[1:] = (thread[by_thread][1:] != thread[by_thread][:-1]) | (epoch[by_thread][1:] != epoch[by_thread][:-1])
    index = np.arange(len(records))
    position = np.empty(len(records), np.int64)
    position[by_thread] = index - np.maximum.accumulate(np.where(first, index, 0))
    out["block"] = block
    out["warp"], out["lane"] = thread // 32, thread % 32
    out["epoch"], out["site"] = epoch, site
    out["address"] = views.addresses(np.array(view, np.int64), idx, target_name)
    out["width"] = widths[site]
    return out[np.lexsort((out["lane"], position, out["warp"], epoch))]


def without_simulator_only(launch: RawLaunch) -> RawLaunch:
    """The launch without the rows of its simulator_only sites: the counts of the code a GPU runs,
    less what the GPU does in their place (GPU_REDUCTION: 2 shared requests per warp and reduction).
    Those sites are shared-memory ones, so the sector stream is unchanged."""
    keep = np.array([not s.simulator_only for s in launch.sites] or [True], bool)
    rows = launch.site_block[keep[launch.site_block["site"]]] if len(launch.site_block) else launch.site_block
    notes = [n for n in launch.notes if not n.startswith("simulator-only path")]
    if not keep.all():
        notes.append("simulator-only sites left out (without_simulator_only); " + GPU_REDUCTION)
    return dataclasses.replace(launch, site_block=rows, notes=notes)


def _spread(rows: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Rows for every block: each represented block gets a copy of its representative's rows."""
    order = np.argsort(rows["block"], kind="stable")
    rows = rows[order]
    bounds = np.searchsorted(rows["block"], np.arange(len(blocks) + 1))
    take = np.concatenate([np.arange(bounds[r], bounds[r + 1]) for r in blocks]) if len(blocks) else []
    out = rows[np.asarray(take, np.int64)]
    out["block"] = np.repeat(np.arange(len(blocks)), np.diff(bounds)[blocks])
    return out


def _merge_rows(rows: np.ndarray) -> np.ndarray:
    """One row per (block, site), sums of the rows that share them, ordered by block then site."""
    if not len(rows):
        return rows
    order = np.lexsort((rows["site"], rows["block"]))
    rows = rows[order]
    first = np.ones(len(rows), bool)
    first[1:] = (rows["block"][1:] != rows["block"][:-1]) | (rows["site"][1:] != rows["site"][:-1])
    starts = np.flatnonzero(first)
    out = rows[starts].copy()
    for field in SITE_BLOCK_DTYPE.names[2:]:
        out[field] = np.add.reduceat(rows[field], starts)
    return out


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
    module = sys.modules.get("kernels.numba_cuda.common")
    if module is None:
        return None
    return module.SIM_MAX_THREADS, module.MAX_THREADS


_STORES = {"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"}


def stored_name(code, offset: int) -> str | None:
    """The variable the call at `offset` stores its result in (`sh = cuda.shared.array(...)` -> "sh")."""
    for ins in dis.get_instructions(code):
        if ins.offset > offset and ins.opname not in ("CACHE", "PRECALL"):
            return ins.argval if ins.opname in _STORES else None
    return None


# ---------------------------------------------------------------------------------------------
# The patches, installed for the capture and removed after it.
_ABSENT = object()


def _install(cap: Capture, patches: list) -> None:
    """Patch the simulator for `cap`, appending (owner, name, previous value) to `patches` as it goes."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator import kernel, kernelapi

    try:  # kernels/numba_cuda/common.py serialises shared allocations when first imported: before our patch
        import kernels.numba_cuda.common  # noqa: F401
    except ImportError:
        pass
    def patch(owner, name, value):
        patches.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, value)

    original_run = kernel.BlockManager.run
    original_sync = kernel.BlockThread.syncthreads
    original_local = kernelapi.FakeCUDALocal.array
    allocation_lock = threading.Lock()

    def run(manager, grid_point, *args):
        return cap.launch_for(manager).run_block(original_run, manager, grid_point, args)

    def syncthreads(thread):
        thread._traffic_epoch += 1
        launch = cap.current
        if launch is not None and cap.max_seconds is not None:
            launch.checkpoint()
        original_sync(thread)

    def shared_array(shared, shape, dtype, alignment=None):
        # The simulator's own allocation (static arrays keyed by the caller's file and line, dynamic
        # ones views of one buffer), made here because the key is the caller's frame: a wrapper
        # calling the original would key every array by the wrapper's line.
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        dtype = np.dtype(dtype)
        frame = sys._getframe(1)
        if shape == 0:
            array = np.frombuffer(shared._dynshared.data, dtype=dtype, count=shared._dynshared_size // dtype.itemsize)
            root = shared._dynshared
        else:
            key = (frame.f_code.co_filename, frame.f_lineno)
            with allocation_lock:
                array = shared._allocations.get(key)
                if array is None:
                    array = shared._allocations[key] = np.empty(shape, dtype)
            root = array
        launch = cap.current
        return array if launch is None else launch.shared(array, root, frame)

    def local_array(local, shape, dtype, alignment=None):
        array = original_local(local, shape, dtype, alignment)
        launch = cap.current
        if launch is not None:
            launch.note_local(sys._getframe(1), array.nbytes)
        return array

    shared_array.serialised = True  # it takes a lock too: common.serialise_simulated_shared_arrays leaves it
    patch(kernel.BlockManager, "run", run)
    patch(kernel.BlockThread, "syncthreads", syncthreads)
    patch(kernel.BlockThread, "_traffic_epoch", 0)
    patch(kernelapi.FakeCUDAShared, "array", shared_array)
    patch(kernelapi.FakeCUDALocal, "array", local_array)
    for name in ATOMIC_OPS:
        patch(kernelapi.FakeCUDAAtomic, name, _traced_atomic(name, getattr(kernelapi.FakeCUDAAtomic, name)))


def _traced_atomic(name, original):
    """cuda.atomic.<name> that performs the operation on the raw array and records it as one access."""
    if name == "compare_and_swap":  # (array, old, val): the first element
        def atomic(self, array, old, val):
            if type(array) is not TracedArray:
                return original(self, array, old, val)
            result = original(self, array._ary, old, val)
            array._recorder.record(sys._getframe(1), array._atomic, array._view, (0,) * array.ndim)
            return result
    else:
        def atomic(self, array, index, *values):
            if type(array) is not TracedArray:
                return original(self, array, index, *values)
            result = original(self, array._ary, index, *values)
            array._recorder.record(sys._getframe(1), array._atomic, array._view, index)
            return result
    atomic.__name__ = name
    return atomic
