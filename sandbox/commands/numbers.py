"""argparse types for numbers: finite, in range, named in the message (argparse adds the flag's name).

Every command's numeric flags use these, so `nan`, `inf`, `1e308` and negative values are refused by the
parser (exit 2) before a command creates a folder:

    parser.add_argument("--budget-ms", type=numbers.real(low=0, low_open=True, high=1e7), ...)
"""
from __future__ import annotations

import argparse
import math


def _bounds_text(low, high, low_open: bool, high_open: bool) -> str:
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    return f"{left}{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}{right}"


def _check_range(value, text: str, what: str, low, high, low_open: bool, high_open: bool):
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise argparse.ArgumentTypeError(
            f"must be {what} in {_bounds_text(low, high, low_open, high_open)}, got {text!r}")
    return value


def real(low: float | None = None, high: float | None = None, *, low_open: bool = False,
         high_open: bool = False):
    """argparse type: a finite float within [low, high] (open ends with low_open / high_open)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        return _check_range(value, text, "a number", low, high, low_open, high_open)

    parse.__name__ = "number"  # argparse names the type in "invalid <type> value" messages
    return parse


def integer(low: int | None = None, high: int | None = None):
    """argparse type: an integer within [low, high] ("1e3" is refused: counts are written as integers)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        return _check_range(value, text, "an integer", low, high, False, False)

    parse.__name__ = "integer"
    return parse
