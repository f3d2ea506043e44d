"""Exceptions raised by the CPU executor."""
from __future__ import annotations


class CpuKernelError(RuntimeError):
    """A kernel misbehaved: divergent barrier, deadlock, failed assert, crash.

    The message names the kernel and, where the runtime knows it, the source
    file and line and the CUDA thread and block.
    """


class CpuKernelMemoryError(CpuKernelError):
    """An invalid memory access: an ASan report (asan=True) or a caught SIGSEGV."""


class CpuCompileError(CpuKernelError):
    """g++ rejected the source, or the source rewriter did not understand it."""


class CpuKernelRaceError(CpuKernelError):
    """A data race between two threads of one block in one barrier interval (racecheck mode).

    The message names the kernel, the kind (read-after-write, write-after-read,
    write-after-write), the array, the block, both threads and both source lines.
    """
