"""One module per CLI command, and what several of them share."""
import argparse
import fnmatch

from ..problem.validate import MAX_BLOCK_SIZE

FAMILIES = ("numpy", "numba", "cupy", "wrong")


def align(lines: list[list[str]]) -> str:
    """Rows of cells as text columns, each padded to its widest cell; the last column (free text) is not padded."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in lines)


def block_size_list(text: str) -> tuple[int, ...]:
    """argparse type of --block-sizes: "16,1,16" -> (1, 16), sorted and unique, each in 1..MAX_BLOCK_SIZE
    (any integer: 61 and 528 are block sizes too; a variant that needs powers of two refuses the others)."""
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,16,61,256, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > MAX_BLOCK_SIZE:
        raise argparse.ArgumentTypeError(f"block sizes must be integers in 1..{MAX_BLOCK_SIZE}, got {text!r}")
    return tuple(sorted(set(values)))


def select_names(text, known: list, by_family) -> list:
    """Names matching comma-separated exact names, families (numpy, numba, cupy, wrong) or globs (numba.*),
    in the order asked, without repeats. `text` may be a list of such strings (several arguments).
    An item that matches nothing is a ValueError listing the valid names."""
    if isinstance(text, (list, tuple)):
        text = ",".join(text)
    chosen: list = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if item in FAMILIES:
            matches = by_family(item)
        elif any(ch in item for ch in "*?["):
            matches = fnmatch.filter(known, item)
        elif item in known:
            matches = [item]
        else:
            raise ValueError(f"unknown variant {item!r}; valid names: {', '.join(known)}")
        if not matches:
            raise ValueError(f"--variants {item!r} matches no registered variant; valid names: {', '.join(known)}")
        chosen += [m for m in matches if m not in chosen]
    if not chosen:
        raise ValueError(f"--variants {text!r} names no variant")
    return chosen
