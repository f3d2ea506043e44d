"""What a registry-walking test does with a variant's Limits: a problem the variant declares it does not support
is skipped with the variant's own reason; inside its declared limits, a refusal is a failure like a wrong answer."""
from __future__ import annotations

import pytest

from sandbox.variant import Unsupported, registry


def refusal(name: str, problem) -> str | None:
    """Why `name` declares it does not take `problem` (Limits.check's message), or None."""
    try:
        registry.get(name).limits.check(name, problem)
    except Unsupported as exc:
        return str(exc)
    return None


def require(name: str, problem) -> None:
    """Skip the calling test when `name` does not declare `problem`."""
    why = refusal(name, problem)
    if why:
        pytest.skip(why)


def within(name: str, problems) -> list:
    """The problems `name` declares; the calling test is skipped (with every reason) when there is none."""
    kept, reasons = [], []
    for problem in problems:
        why = refusal(name, problem)
        (reasons.append(why) if why else kept.append(problem))
    if not kept:
        pytest.skip("; ".join(dict.fromkeys(reasons)))
    return kept


def declares(name: str, dtype: str, block_size: int, head_dim: int, kv_dtype: str | None = None) -> bool:
    """Whether `name` declares this precision and shape (for tests that compile rather than run a problem)."""
    limits = registry.get(name).limits
    return (dtype in limits.dtypes and (kv_dtype is None or kv_dtype in limits.kv_dtypes)
            and (limits.block_sizes is None or block_size in limits.block_sizes)
            and (limits.head_dims is None or head_dim in limits.head_dims))
