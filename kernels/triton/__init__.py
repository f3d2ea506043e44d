"""The Triton family: @triton.jit kernels run by Triton's interpreter on the CPU (no torch) or launched on a GPU.

The family's surface:
    launch.Launch / launch.Call      prepare() results: the kernel calls of one launch, on either backend
    interpret.run(kernel, grid, memory, *args, **constexprs)   one interpreted launch over memory.Memory
    memory.Memory, memory.OutOfBounds                           checked NumPy-backed device memory on the CPU
    census.compile_report(module, ...), census.compile_call(call, arch)   sm_80/sm_90 cubins and their resources
    traffic.capture(prepared), traffic.capture_variant(...)    RawLaunch records for sandbox.analysis.traffic
Variants: naive.py, split.py, unified.py (one module each, registered in sandbox/variant/registry.py).
FAMILY says how the harness runs them (sandbox/variant/family.py): CuPy arrays on a GPU, the interpreter
elsewhere; counted by the family's own capture (traffic.capture_variant: the interpreter's accesses mapped
onto the compiled TTGIR layouts, each call's census carrying its cubin so that sandbox.traffic reads the loads
in flight from its SASS); its compile census is each module's compile_report (census.py).

The kernels stay @triton.jit functions (compiled for the census and a GPU) and the interpreter is run on demand,
so TRITON_INTERPRET=1, which turns every @triton.jit into an interpreted function at import, is refused.
"""
import os

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    raise ImportError("kernels/triton runs Triton's interpreter itself (on the CPU backend) and compiles the same "
                      "kernels for the census and a GPU: unset TRITON_INTERPRET")

from sandbox.variant.family import Family  # noqa: E402  (after the TRITON_INTERPRET refusal: Triton reads it at import)

from .traffic import capture_variant  # noqa: E402

FAMILY = Family("triton", runtime="gpu_or_cpu", capture=capture_variant, census="compile_report",
                summary="Triton kernels: launched on a GPU, Triton's interpreter on the CPU (no torch)",
                cpu_label="cpu-interpreter")
