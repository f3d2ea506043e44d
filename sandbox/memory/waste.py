"""Where the KV budget goes, as the vLLM paper's Fig. 2 splits it, each as a share of the whole budget.

Per step (sampled after the step's tokens are written), every slot of the budget is exactly one of:
- tokens: holds a token's KV (a shared slot counts once);
- reserved: allocated to a request and will hold one of its future tokens;
- internal: allocated to a request but will never hold a token (over-provisioning: the tail of a
  max-length or power-of-two reservation, the slots of a last block past the request's final length);
- external: free but unusable: holes too small for the request at the head of the queue (counted
  while someone waits), and for paged allocation the budget left over below one block (always);
- free: free and usable (the paper's "External frag. & Others" bar holds external + free).

A share is the category's slots summed over steps / (steps * budget), so every step weighs the same.
"""
from __future__ import annotations

CATEGORIES = ("tokens", "reserved", "internal", "external", "free")


class WasteAccumulator:
    """Sums slots per category over steps for one budget of ``budget`` slots."""

    def __init__(self, budget: int):
        self.budget = budget
        self.steps = 0
        self.tokens = self.reserved = self.internal = self.external = 0

    def add(self, tokens: int, reserved: int, internal: int, external: int) -> None:
        assert min(tokens, reserved, internal, external) >= 0, (tokens, reserved, internal, external)
        assert tokens + reserved + internal + external <= self.budget, "more slots than the budget"
        self.steps += 1
        self.tokens += tokens
        self.reserved += reserved
        self.internal += internal
        self.external += external

    def shares(self) -> dict:
        """{category: share of budget-steps} (zeros before any step); the five sum to 1."""
        total = self.steps * self.budget
        if not total:
            return dict.fromkeys(CATEGORIES, 0.0)
        out = dict(tokens=self.tokens / total, reserved=self.reserved / total, internal=self.internal / total,
                   external=self.external / total)
        out["free"] = 1.0 - sum(out.values())
        return out

    @property
    def utilization(self) -> float:
        """Slots holding tokens / slots allocated (tokens + reserved + internal)."""
        used = self.tokens + self.reserved + self.internal
        return self.tokens / used if used else 0.0
