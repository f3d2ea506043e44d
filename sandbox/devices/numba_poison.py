"""Poison the Numba CUDA simulator's shared memory before every block, as sandbox.cpucuda does.

The simulator (numba.cuda.simulator) gives a static ``cuda.shared.array`` an
``np.empty`` array keyed by its source line, created once and never reset
between blocks, and dynamic shared memory ``np.zeros``. So a kernel that
reads a slot no thread of the block wrote sees whatever the previous block
left (or zero, or stale heap bytes) and can pass by luck. This patch makes
such reads loud:

* before each block, every static shared array the kernel has allocated is
  filled with NaN (float and complex dtypes), the dtype's minimum (signed
  integers), its maximum (unsigned integers) or True (bool);
* a static shared array is filled the same way when it is first created;
* dynamic shared memory is filled with 0xFF bytes before each block (NaN
  for float16/32/64, -1 for integers), whatever dtype views it.

It wraps two methods, ``FakeCUDAShared.__init__`` (its allocation table
poisons each array stored in it) and ``BlockManager.run`` (poisons before
the block). Two more patches ride on the same hook because they are about the
same simulator and are what makes the poisoned kernels affordable: a device
function whose code never reaches ``numba.cuda`` is called directly (see
``_direct_device_calls``), and the block scheduler waits on a barrier instead
of polling (numba_scheduler.py). ``install()`` is idempotent; ``sandbox.devices.backends.configure_numba``
calls it when it chooses the simulator. numba.cuda is not imported early:
the patch is applied when the simulator's kernel module is first imported
(an import hook), or at once if it already is.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import numpy as np

from . import numba_scheduler

_TARGET = "numba.cuda.simulator.kernel"
_PATCHED = "_sandbox_poisoned"


def poison(array: np.ndarray) -> None:
    """Fill ``array`` in place with its dtype's sentinel (NaN, integer min/max, True)."""
    kind = array.dtype.kind
    if kind in "fc":
        array.fill(np.nan)
    elif kind == "i":
        array.fill(np.iinfo(array.dtype).min)
    elif kind == "u":
        array.fill(np.iinfo(array.dtype).max)
    elif kind == "b":
        array.fill(True)
    else:
        array.view(np.uint8).fill(0xFF)


class _PoisonedAllocations(dict):
    """FakeCUDAShared._allocations that poisons each static shared array as it is stored.

    Hooking the store rather than ``FakeCUDAShared.array`` keeps the poison
    when something else replaces ``array`` (kernels/numba_cuda/simulator.py
    serialises it under a lock): every version stores its new array here.
    """

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray):
            poison(value)
        super().__setitem__(key, value)


def _apply() -> None:
    from numba.cuda.simulator import kernel, kernelapi

    numba_scheduler.apply(kernel)  # first: the poison's run wraps the scheduler's
    shared_cls = kernelapi.FakeCUDAShared
    if getattr(shared_cls, _PATCHED, False):
        return
    original_init = shared_cls.__init__
    original_run = kernel.BlockManager.run

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self._allocations = _PoisonedAllocations(self._allocations)

    def run(self, grid_point, *args):
        shared = getattr(kernel._get_kernel_context(), "_shared", None)
        if shared is not None:
            for allocation in shared._allocations.values():
                poison(allocation)
            shared._dynshared.view(np.uint8).fill(0xFF)
        return original_run(self, grid_point, *args)

    shared_cls.__init__ = __init__
    kernel.BlockManager.run = run
    _direct_device_calls(kernel)
    setattr(shared_cls, _PATCHED, True)


def _global_names(code) -> set:
    """Global names a code object (and the code objects nested in it) may look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _global_names(const)
    return names


def _reaches_cuda(fn, cuda, fake_module_type) -> bool:
    """Whether fn's code names the cuda module, or a module that holds it (``common.cuda``).

    While another thread runs inside a swapped call, the module's ``cuda`` global is a fake
    module of the kernel (fake_module_type): that counts as cuda too.
    """
    def is_cuda(value):
        return value is cuda or isinstance(value, fake_module_type)

    globs = fn.__globals__
    for name in _global_names(fn.__code__):
        value = globs.get(name)
        if is_cuda(value) or is_cuda(getattr(value, "cuda", None)):
            return True
    return False


def _direct_device_calls(kernel) -> None:
    """Call device functions that never touch numba.cuda as plain Python functions.

    The simulator wraps every device-function call in ``swapped_cuda_module``: two lock
    acquisitions and, when no other thread is inside, a scan of the function's module globals to
    swap ``cuda`` for the kernel's fake module. Element conversions (bfloat16/fp8 decoding) and
    small math helpers are called per element, and that bookkeeping made numba.naive 45x slower
    (0.6 s -> 29 s on a 3 x 200-token problem). A function whose code cannot reach ``cuda`` gains
    nothing from the swap, so it is called directly; the others keep the simulator's path.
    """
    from numba import cuda
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    cls = kernel.FakeCUDAKernel
    original_call = cls.__call__

    def __call__(self, *args):
        if self._device:
            direct = self.__dict__.get("_sandbox_direct")
            if direct is None:
                direct = self._sandbox_direct = not _reaches_cuda(self.fn, cuda, FakeCUDAModule)
            if direct:
                return self.fn(*args)
        return original_call(self, *args)

    cls.__call__ = __call__


class _Hook(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Applies the patch right after numba.cuda.simulator.kernel is imported."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Hook)]
            _apply()

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Poison the simulator's shared memory from now on (at its import if it is not imported yet)."""
    if _TARGET in sys.modules:
        _apply()
    elif not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
