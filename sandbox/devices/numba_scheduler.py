"""The Numba CUDA simulator's block scheduler without its busy poll: a barrier the threads release themselves.

The simulator runs one Python thread per CUDA thread. Its ``BlockManager.run`` starts them, then
polls them in a loop that holds the GIL (``is_alive`` and a blocked flag on every thread, over and
over) until all of them wait at ``syncthreads`` or have ended, and releases them. That poll competes
with the threads doing the work for the one GIL: in a profile of a numba.split launch it is nearly
all of the launching thread's time. Here the barrier is a condition the threads keep themselves: the
last thread to arrive (or the last one to end while the others wait) releases the rest; the launching
thread only joins them. What the simulator promises stays: every thread of the block waits at each
``syncthreads`` until every thread still running has reached one (so, as there, a thread that has
returned no longer holds the others back and divergent barriers are not detected); the first
exception of a block aborts the others at their next barrier and is raised, naming the thread.

``apply(kernel_module)`` replaces ``BlockManager.run`` and ``BlockThread.syncthreads`` of
``numba.cuda.simulator.kernel``; sandbox.devices.numba_poison applies it at the simulator's import,
before its own patch wraps ``run``. The syncthreads_count/and/or helpers call ``syncthreads`` and so
use this barrier too.
"""
from __future__ import annotations

import threading

import numpy as np

_APPLIED = "_sandbox_scheduler"


class BlockBarrier:
    """The barrier of one block of `threads` threads; `first_failed` is the first thread that raised."""

    def __init__(self, threads: int):
        self.cond = threading.Condition(threading.Lock())
        self.running = threads   # threads that have not ended
        self.arrived = 0         # threads waiting at the current barrier
        self.generation = 0
        self.aborted = False
        self.first_failed = None

    def wait(self) -> None:
        with self.cond:
            if self.aborted:
                raise RuntimeError("abort flag set on syncthreads call")
            self.arrived += 1
            if self.arrived == self.running:
                self._release()
            else:
                generation = self.generation
                while generation == self.generation and not self.aborted:
                    self.cond.wait()
            if self.aborted:
                raise RuntimeError("abort flag set on syncthreads clear")

    def leave(self, thread, failed: bool) -> None:
        """`thread` ended (raised, if failed): it no longer counts at the barrier."""
        with self.cond:
            self.running -= 1
            if failed:
                if self.first_failed is None:
                    self.first_failed = thread
                self.aborted = True
                self.cond.notify_all()
            elif self.arrived and self.arrived == self.running:
                self._release()

    def _release(self) -> None:
        self.arrived = 0
        self.generation += 1
        self.cond.notify_all()


def apply(kernel) -> None:
    """Patch numba.cuda.simulator.kernel (`kernel`) once."""
    if getattr(kernel.BlockManager, _APPLIED, False):
        return

    def run(manager, grid_point, *args):
        barrier = BlockBarrier(int(np.prod(manager._block_dim)))
        manager._sandbox_barrier = barrier

        def target():
            thread = threading.current_thread()
            try:
                manager._f(*args)
            except BaseException:
                barrier.leave(thread, failed=True)
                raise  # BlockThread.run records it, with the thread's and block's indices
            barrier.leave(thread, failed=False)

        threads = [kernel.BlockThread(target, manager, grid_point, block_point, manager._debug)
                   for block_point in np.ndindex(*manager._block_dim)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = barrier.first_failed
        if failed is not None:
            raise failed.exception[0].with_traceback(failed.exception[1])

    def syncthreads(thread):
        thread._manager._sandbox_barrier.wait()

    kernel.BlockManager.run = run
    kernel.BlockThread.syncthreads = syncthreads
    setattr(kernel.BlockManager, _APPLIED, True)
