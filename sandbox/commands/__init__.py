"""One module per CLI command."""


def align(lines: list[list[str]]) -> str:
    """Rows of cells as text columns, each padded to its widest cell; the last column (free text) is not padded."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in lines)
