"""Peers: kernels of other projects, compiled from the headers their wheels ship (no code of theirs is copied)."""
