"""Memory-waste study: paged KV allocation against contiguous reservation (python -m sandbox memory)."""
