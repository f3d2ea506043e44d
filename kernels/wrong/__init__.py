"""Negative controls: deliberately broken variants (wrong.<family>.<flaw>) that every check must reject, each a
small subclass or copy of a real family's variant with one named flaw."""
