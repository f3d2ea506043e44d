"""Micro-benchmark kernels: one memory-system behaviour each, modelled like a variant and checked against published
measurements of the same kernel shape (`python -m sandbox model-check`)."""
