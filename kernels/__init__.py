"""Kernel variants, one module each; sandbox.registry maps names to them."""
