"""Micro-benchmark kernels: one memory-system behaviour each, modelled like a variant and checked against published
measurements of the same kernel shape (`python -m sandbox model-check`).

They are CUDA C counted on the CPU executor, as the cupy family's are, and solve the "micro" problem kind
(sandbox.problem.micro), which sandbox.traffic counts its own way (one block, scaled by the grid:
sandbox/analysis/traffic/micro.py). Nothing checks them (they compute nothing anyone reads), so the executor's
checking modes are not theirs. FAMILY says how the harness runs them.
"""
from sandbox.variant.family import Family

FAMILY = Family("micro", runtime="gpu_or_cpu", capture="executor", census="nvrtc",
                summary="micro-benchmark CUDA C kernels: counted on the CPU executor, modelled, checked against "
                        "published measurements (model-check)",
                cpu_label="cpu-executor", compiles_at_first_launch=True)
