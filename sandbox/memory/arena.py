"""Contiguous KV reservation (pre-vLLM systems): address ranges of one arena handed out first-fit."""
from __future__ import annotations

import bisect

from sandbox.errors import RefusedRequest

RESERVE_POLICIES = ("max", "pow2", "oracle")


class FirstFitArena:
    """Address ranges [0, size) handed out first-fit; free ranges kept sorted and coalesced."""

    def __init__(self, size: int):
        self.size = size
        self.starts = [0]
        self.lengths = [size]

    def alloc(self, length: int) -> int:
        """Start of the first free range that holds ``length``, or -1 (nothing changes then)."""
        for i, free in enumerate(self.lengths):
            if free >= length:
                start = self.starts[i]
                if free == length:
                    del self.starts[i], self.lengths[i]
                else:
                    self.starts[i] += length
                    self.lengths[i] -= length
                return start
        return -1

    def free(self, start: int, length: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        assert i == len(self.starts) or start + length <= self.starts[i], "double free or overlap"
        assert i == 0 or self.starts[i - 1] + self.lengths[i - 1] <= start, "double free or overlap"
        if i < len(self.starts) and start + length == self.starts[i]:
            self.starts[i] = start
            self.lengths[i] += length
        else:
            self.starts.insert(i, start)
            self.lengths.insert(i, length)
        if i > 0 and self.starts[i - 1] + self.lengths[i - 1] == start:
            self.lengths[i - 1] += self.lengths[i]
            del self.starts[i], self.lengths[i]

    def free_below(self, length: int) -> int:
        """Free slots in ranges shorter than ``length``."""
        return sum(f for f in self.lengths if f < length)

    @property
    def num_free(self) -> int:
        return sum(self.lengths)


def reservation(prompt: int, output: int, max_len: int, policy: str) -> int:
    """Slots one request reserves, as the vLLM paper's Orca baselines (Sec. 6.1): max_len (Max); the prompt plus
    the next power of two of its true output length, capped at max_len (Pow2: "over-reserves the space for
    outputs by at most 2x", 25 output tokens reserve 32); or exactly prompt + output (Oracle, which needs the
    true output length in advance)."""
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(max_len, prompt + (1 << (output - 1).bit_length()))
    if policy == "oracle":
        return prompt + output
    raise RefusedRequest(f"unknown reserve policy {policy!r}; choose one of {', '.join(RESERVE_POLICIES)}")
