"""Run CUDA C kernels on the CPU, called exactly like ``cupy.RawKernel`` / ``cupy.RawModule``.

(Full docs: README.md in this folder.)
"""
from .errors import CpuCompileError, CpuKernelError, CpuKernelMemoryError
from .kernel import CpuRawKernel, CpuRawModule

__all__ = ["CpuRawKernel", "CpuRawModule", "CpuKernelError", "CpuKernelMemoryError", "CpuCompileError"]
