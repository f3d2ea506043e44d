"""Plain-text tables for the sweep's summary sections (summary.py, mla_summary.py, model_summary.py)."""
from __future__ import annotations


def table(header: list[str], body: list[list[str]], indent: str = "  ") -> list[str]:
    """Left-aligned first column, right-aligned others."""
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    def line(r):
        cells = [str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)]
        return indent + "  ".join(cells).rstrip()
    return [line(header), *map(line, body)]
