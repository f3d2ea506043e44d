"""The kernel families, one package each (numba_cuda, cupy_raw, micro, flashinfer: a peer's kernels from its
wheel; the NumPy variants numpy_*.py beside numpy_family.py), and wrong/, the negative controls;
sandbox.variant.registry names every variant and family."""
