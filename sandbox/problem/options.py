"""AttentionOptions: what real models add to plain softmax attention, in one frozen object.

For query head h at position p (decode: p = L - 1) and token t:
    k_t = float(key_cache[t]) * k_scale, v_t = float(value_cache[t]) * v_scale
    s_t = scale * (q . k_t)
    logits_soft_cap > 0:     s_t = cap * tanh(s_t / cap)           (Gemma 2)
    alibi_slopes not None:   s_t += alibi_slopes[h] * (t - p)      (BLOOM, MPT)
    window_left >= 0:        only tokens t >= p - window_left      (Mistral, Gemma)
"""
from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

# Names a variant lists in Limits.options for what it supports.
FEATURES = ("kv_scale", "window", "softcap", "alibi")


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionOptions:
    k_scale: float = 1.0
    v_scale: float = 1.0
    window_left: int = -1
    logits_soft_cap: float = 0.0
    alibi_slopes: np.ndarray | None = None  # float32 [num_heads]

    def __post_init__(self):
        if self.alibi_slopes is not None and isinstance(self.alibi_slopes, np.ndarray):
            slopes = np.array(self.alibi_slopes, copy=True)  # private, read-only: the object is frozen
            slopes.flags.writeable = False
            object.__setattr__(self, "alibi_slopes", slopes)

    def validate(self, num_heads: int | None = None) -> "AttentionOptions":
        """ValueError naming the option and its bound; num_heads checks alibi_slopes' shape."""
        for name in ("k_scale", "v_scale"):
            value = getattr(self, name)
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0
            if not ok:
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        w = self.window_left
        if not isinstance(w, numbers.Integral) or isinstance(w, bool) or w < -1:
            raise ValueError(f"window_left must be an integer >= -1 (-1: no window), got {w!r}")
        cap = self.logits_soft_cap
        if not isinstance(cap, numbers.Real) or isinstance(cap, bool) or not math.isfinite(cap) or cap < 0:
            raise ValueError(f"logits_soft_cap must be a finite number >= 0 (0: off), got {cap!r}")
        slopes = self.alibi_slopes
        if slopes is not None:
            if not isinstance(slopes, np.ndarray) or slopes.dtype != np.float32:
                got = slopes.dtype.name if isinstance(slopes, np.ndarray) else type(slopes).__name__
                raise ValueError(f"alibi_slopes must be a float32 NumPy array [num_heads], got {got}")
            if slopes.ndim != 1 or (num_heads is not None and slopes.shape[0] != num_heads):
                raise ValueError(f"alibi_slopes must have shape ({num_heads},) = [num_heads], got {slopes.shape}")
            if not np.isfinite(slopes).all():
                i = int(np.flatnonzero(~np.isfinite(slopes))[0])
                raise ValueError(f"alibi_slopes[{i}] = {slopes[i]} is not finite")
        return self

    @property
    def features(self) -> tuple[str, ...]:
        """The FEATURES this problem uses (what a variant must declare to accept it)."""
        used = []
        if self.k_scale != 1.0 or self.v_scale != 1.0:
            used.append("kv_scale")
        if self.window_left >= 0:
            used.append("window")
        if self.logits_soft_cap > 0:
            used.append("softcap")
        if self.alibi_slopes is not None:
            used.append("alibi")
        return tuple(used)

    def kwargs(self) -> dict:
        """Keyword arguments of sandbox.run / reference.paged_decode."""
        return dict(k_scale=self.k_scale, v_scale=self.v_scale, window_left=self.window_left,
                    logits_soft_cap=self.logits_soft_cap, alibi_slopes=self.alibi_slopes)

    def describe(self) -> str:
        parts = []
        if "kv_scale" in self.features:
            parts.append(f"k_scale={self.k_scale:g}, v_scale={self.v_scale:g}")
        if self.window_left >= 0:
            parts.append(f"window_left={self.window_left}")
        if self.logits_soft_cap > 0:
            parts.append(f"softcap={self.logits_soft_cap:g}")
        if self.alibi_slopes is not None:
            parts.append("alibi")
        return ", ".join(parts) or "plain"

    @classmethod
    def from_kwargs(cls, k_scale=1.0, v_scale=1.0, window_left=-1, logits_soft_cap=0.0, alibi_slopes=None):
        def real(x):  # NumPy scalars become Python numbers; anything else is left for validate() to name
            return x.item() if isinstance(x, np.generic) else x
        return cls(real(k_scale), real(v_scale), real(window_left), real(logits_soft_cap), alibi_slopes)


PLAIN = AttentionOptions()


def alibi_paper_slopes(num_heads: int) -> np.ndarray:
    """The ALiBi paper's geometric slopes (Press et al. 2022), float32 [num_heads].

    For n a power of two: 2^(-8/n), 2^(-16/n), ...; otherwise the closest lower power of two's
    slopes followed by every other slope of the next power of two (the paper's code does this).
    """
    def geometric(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    lower = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(lower)
    if lower < num_heads:
        slopes += geometric(2 * lower)[0::2][: num_heads - lower]
    return np.asarray(slopes, dtype=np.float32)
