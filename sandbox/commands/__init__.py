"""One module per CLI command, and what several of them share."""
import argparse


def align(lines: list[list[str]]) -> str:
    """Rows of cells as text columns, each padded to its widest cell; the last column (free text) is not padded."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in lines)


def block_size_list(text: str) -> tuple[int, ...]:
    """argparse type of --block-sizes: "16,1,16" -> (1, 16), sorted and unique, each >= 1."""
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,16,256, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"block sizes must be integers >= 1, got {text!r}")
    return tuple(sorted(set(values)))
