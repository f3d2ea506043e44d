"""The allocator's refusal, apart from the allocator so that its mixins (swap.py) raise it without a cycle."""


class OutOfBlocks(RuntimeError):
    """Too few free blocks for the request; the manager is unchanged."""
