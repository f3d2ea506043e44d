"""The NumPy family: variants that gather on the host with NumPy (numpy.gather, numpy.mla), a baseline that
needs no GPU, no compiler and no simulator. Its variants are modules beside this one (kernels/numpy_*.py)."""
from sandbox.variant.family import Family

FAMILY = Family("numpy", runtime="host", capture=None, census=None,
                summary="NumPy gathers on the host: the CPU baseline", cpu_label="cpu-numpy",
                no_capture="no kernel: NumPy gathers on the host")
