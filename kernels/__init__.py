"""Kernel variants, one module each; sandbox.variant.registry maps names to them."""
