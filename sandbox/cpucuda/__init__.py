"""Run CUDA C kernels on the CPU, called exactly like ``cupy.RawKernel`` / ``cupy.RawModule``. A toolchain
below every other layer but the core: it owns g++ (toolchain.py), its caches (native.py) and its records (raw.py).

    from sandbox.cpucuda import CpuRawKernel, CpuRawModule
    k = CpuRawKernel(code, "name", options=("-std=c++17",))
    k(grid, block, (out, x, np.int32(n)), shared_mem=0)
    m = CpuRawModule(code=code, options=(...), name_expressions=["k<16, __half>"])
    m.get_function("k<16, __half>")(grid, block, args)

g++ compiles the source against a small runtime header (cached on disk);
blocks run one after another, every CUDA thread of a block is a fiber that
switches at barriers and warp operations. NumPy arrays pass as pointers and
are written in place; NumPy scalars pass by value with their exact C type;
a struct by value (a ``__grid_constant__`` Params) is a ``Struct(dtype, field=array or value)``.

Checks a GPU does not give: shared memory filled with NaN bytes before every
block; ``thread_order="reverse"`` (or ``SANDBOX_CPUCUDA_ORDER=reverse``) to
expose missing barriers; divergent ``__syncthreads``, deadlocks, failed
asserts and crashes raise ``CpuKernelError`` / ``CpuKernelMemoryError`` naming
the kernel, line and thread; ``asan=True`` (or ``SANDBOX_CPUCUDA_ASAN=1``) runs
each launch under AddressSanitizer in a child process and turns an
out-of-bounds access into ``CpuKernelMemoryError`` with file and line;
``racecheck=True`` (or ``SANDBOX_CPUCUDA_RACECHECK=1``) checks every access
against CUDA's ordering (barrier intervals, warp operations, tiles) in this
process and turns a data race between two threads of a block into
``CpuKernelRaceError``;
``poison="finite"`` (``SANDBOX_CPUCUDA_POISON=finite``) fills shared memory
with large finite values that NaN-blind code (fmaxf) cannot skip.
``traffic=True`` (``SANDBOX_CPUCUDA_TRAFFIC=1``) counts every global and
shared memory access into Nsight Compute's metrics: ``last_traffic()``.
``modes(...)`` sets these for every kernel launched inside a ``with`` block.

Not modelled: the memory model beyond barriers (fences do nothing; races
between blocks are not checked), exact half-precision rounding of
intrinsics (half math goes through float; fast intrinsics are libm's), and
performance (nothing here predicts GPU speed). README.md has the details.
"""
from .args import Struct
from .errors import CpuCompileError, CpuKernelError, CpuKernelMemoryError, CpuKernelRaceError
from .kernel import CpuRawKernel, CpuRawModule
from .modes import modes
from .poison import last as last_poison
from .substitute import substitute_source
from .traffic import capture as traffic_capture
from .traffic import last_raw as last_traffic_raw
from .traffic import last_traffic

__all__ = ["CpuRawKernel", "CpuRawModule", "CpuKernelError", "CpuKernelMemoryError", "CpuKernelRaceError",
           "CpuCompileError", "modes", "last_poison", "substitute_source", "last_traffic", "last_traffic_raw",
           "traffic_capture", "Struct"]
