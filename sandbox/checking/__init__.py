"""Checking a variant against the float64 truth: check (problems, expected outputs) and compare (tolerances)."""
