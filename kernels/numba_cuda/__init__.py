"""The Numba CUDA family: kernels written in Python with numba.cuda, run on a GPU or under Numba's simulator.

Its variants (naive, block, split, gqa, multi, mla), their shared device code (codecs, options, reductions,
token ranges) and compile reports (reports.py) live here; FAMILY says how the harness runs them.
"""
from sandbox.variant.family import Family

FAMILY = Family("numba", runtime="numba", capture="numba_simulator", census="numba_ptx",
                summary="numba.cuda kernels: a GPU, or the Numba simulator on the CPU", cpu_label="cpu-sim")
