"""The Triton family: @triton.jit kernels run by Triton's interpreter on the CPU (no torch) or launched on a GPU.

The family's surface, for a plug-in interface to call:
    launch.Launch / launch.Call      prepare() results: the kernel calls of one launch, on either backend
    interpret.run(kernel, grid, memory, *args, **constexprs)   one interpreted launch over memory.Memory
    memory.Memory, memory.OutOfBounds                           checked NumPy-backed device memory on the CPU
Variants: naive.py, split.py, unified.py (one module each, registered in sandbox/variant/registry.py).
"""
