"""The FlashInfer peer: another project's kernels, compiled from the headers its flashinfer-python wheel ships
(no code of theirs is copied), raced beside ours for reference (docs/peers.md).

Its kernels are CUDA C like the cupy family's: CuPy on a GPU (nvcc's cubin, census.py), the CPU executor elsewhere,
with the executor's checking modes and its traffic capture. FAMILY says how it differs: NVRTC cannot compile
FlashInfer's headers (they include the C++ standard library), so its compile census is nvcc's
(census.kernel_census: registers, shared memory and the cubin whose SASS gives the loads in flight); it is a peer
(its wrong answers are findings about FlashInfer, never the sandbox's failures, and the sweep labels it with the
wheel's version); and without the pinned wheel it is unavailable, with the reason (wheel.missing).
"""
from sandbox.variant.family import Family

from . import census, wheel

FAMILY = Family("flashinfer", runtime="gpu_or_cpu", capture="executor", census=census.kernel_census,
                summary="another project's CUDA C (FlashInfer's headers from its wheel): CuPy on a GPU, the CPU "
                        "executor elsewhere; a peer raced for reference",
                cpu_label="cpu-executor", executor_modes=True, compiles_at_first_launch=True,
                peer=wheel.label, unavailable=wheel.missing)
