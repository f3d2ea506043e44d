"""Memory traffic of Numba kernels counted under the CUDA simulator: `capture()` -> RawLaunch list.

    with numba_sim.capture() as launches:
        launch = variant.prepare(problem, "cpu")
        launch.launch()
    launches  # one sandbox.cpucuda.raw.RawLaunch per simulated kernel launch, in order

Modules: numba_sim (this: the API), numba_patches (what is patched in the simulator),
numba_launch (one launch: the hot path, the finished RawLaunch), numba_traced (traced arrays, sites,
fake addresses), numba_records (per-block ordering), numba_sample (identical-work blocks, estimates).

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

import contextlib
import dataclasses
import threading
import time

import numpy as np

from kernels.numba_cuda import launch
from sandbox.cpucuda.raw import RawLaunch

from . import numba_patches
from .numba_launch import GPU_REDUCTION, SIMULATOR_ONLY, LaunchRecorder, SimulationTooLong  # noqa: F401
from .numba_traced import GlobalAddresses

_active = None
_active_lock = threading.Lock()


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
        numba_patches.install(_active, patches)
        yield _active.launches
    finally:
        for owner, name, previous in reversed(patches):
            if previous is numba_patches.ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        _active = None


@contextlib.contextmanager
def gpu_thread_counts():
    """Let the Numba variants size their "auto" blocks as on a GPU (up to MAX_THREADS, 128) while the
    simulator runs them; prepare() the variant inside. By default the simulator's "auto" launches are
    capped at SIM_MAX_THREADS (16) threads per block, so their warps are partial (a configured thread
    count is launched as it is either way)."""
    previous = launch.SIM_MAX_THREADS
    launch.SIM_MAX_THREADS = launch.MAX_THREADS
    try:
        yield
    finally:
        launch.SIM_MAX_THREADS = previous


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
