"""Shared-memory poisons: what an unwritten __shared__ slot holds when a block starts.

* ``nan`` (default): 0xFF bytes, NaN for float, half and double, -1 for
  integers. Any arithmetic on an unwritten slot shows as NaN in the output.
* ``finite``: large finite values of alternating sign (about 1e34 as a
  float, 32768..65504 as a half, 3e7..2e9 as an int), a new random pattern per
  launch from a seed. It catches what NaN hides: ``fmaxf``/``fminf`` drop a
  NaN operand, comparisons with NaN are false, and filters such as
  ``x == x`` skip it. Two unwritten consecutive floats always hold one
  positive and one negative value (as do the two halves of each 4-byte
  word), so a max (or min) over them is wrong whatever the seed.

The seed of each launch is printed in every error message of that launch
(and ``last()`` tells it after a launch that returned), so a failure can be
replayed with ``SANDBOX_CPUCUDA_POISON=finite SANDBOX_CPUCUDA_POISON_SEED=<seed>``.
"""
from __future__ import annotations

import itertools
import os
import threading

KINDS = {"nan": 0, "finite": 1}  # PoisonKind in include/cpucuda_sched.h
_counter = itertools.count(1)
_lock = threading.Lock()
_last: list = [None]


def _mix(x: int) -> int:
    """splitmix64: consecutive launches get unrelated seeds."""
    x = (x + 0x9E3779B97F4A7C15) & (2**64 - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return x ^ (x >> 31)


def seed_for_launch(kind: str, explicit=None) -> int:
    """The launch's seed: ``explicit``, else SANDBOX_CPUCUDA_POISON_SEED, else a new one per launch.

    Without a fixed seed the sequence is still deterministic per process
    (launch n of a process always gets the same seed), so reruns reproduce.
    """
    if kind == "nan":
        return 0
    if explicit is None:
        env = os.environ.get("SANDBOX_CPUCUDA_POISON_SEED", "")
        explicit = int(env, 0) if env.strip() else None
    if explicit is not None:
        return int(explicit) & 0xFFFFFFFF
    with _lock:
        return _mix(next(_counter)) & 0xFFFFFFFF


def describe(kind: str, seed: int) -> str:
    """One line for error messages: the poison and how to replay it."""
    if kind == "nan":
        return "shared memory poison: nan (0xFF bytes)"
    return (f"shared memory poison: finite, seed {seed}; replay with SANDBOX_CPUCUDA_POISON=finite "
            f"SANDBOX_CPUCUDA_POISON_SEED={seed}")


def record(kind: str, seed: int) -> None:
    _last[0] = describe(kind, seed)


def last() -> str | None:
    """The poison of the most recent launch in this process (for messages about wrong results)."""
    return _last[0]
