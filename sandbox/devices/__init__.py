"""Where kernels run: the GPU or the CPU (backends), Numba's simulator and real mode in one program
(other_mode, numba_poison), and CUDA's launch limits checked before any launch (grid).
The CPU executor for CUDA C is its own package, sandbox.cpucuda."""
