"""The CUDA C family: a .cu and a small launcher per variant, run by CuPy on a GPU or the CPU executor elsewhere.

Its kernels share common.cuh (codecs, options, KV access, attend, reductions) and common.py (template
arguments, option arguments, shared-memory sizes); loading and launching is the harness's
(sandbox/variant/cuda_source.py, cuda_launch.py). FAMILY says how the harness runs them.
"""
from sandbox.variant.family import Family

FAMILY = Family("cupy", runtime="gpu_or_cpu", capture="executor", census="nvrtc",
                summary="CUDA C kernels: CuPy on a GPU, the CPU executor (sandbox.cpucuda) elsewhere",
                cpu_label="cpu-executor", executor_modes=True, compiles_at_first_launch=True)
