"""One module per CLI command, and what several of them share: the top layer, which parses and checks the
arguments and calls the studies, drivers and variants below it."""
import argparse
import fnmatch

from ..problem.validate import MAX_BLOCK_SIZE
from ..variant import registry, tunables
from ..errors import RefusedRequest

FAMILIES = (*registry.FAMILIES, "wrong")  # what --variants accepts as a family name (the negative controls too)


def align(lines: list[list[str]]) -> str:
    """Rows of cells as text columns, each padded to its widest cell; the last column (free text) is not padded."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in lines)


def add_names_argument(parser, what: str) -> None:
    """Variant names as positional arguments (every command's convention), with --variants as an alias:
    names, families (numpy, numba, cupy, triton, wrong) or globs (numba.*), space or comma separated."""
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"{what}: names, families (numba, cupy, wrong) or "
                                                                 "globs (numba.*), space or comma separated")
    parser.add_argument("--variants", nargs="+", metavar="LIST", help="the same as the positional names")


def names_given(args) -> list[str]:
    """The positional names and --variants together, in order ([] when neither was given)."""
    return list(args.names or []) + list(getattr(args, "variants", None) or [])


def add_block_sizes_argument(parser, default: tuple[int, ...], what: str = "") -> None:
    """--block-sizes N,N or N N (block_size_list; the one parser of every command)."""
    parser.add_argument("--block-sizes", nargs="+", type=block_size_list, default=[default], metavar="N",
                        help=f"block sizes, comma or space separated, each in 1..{MAX_BLOCK_SIZE} "
                             f"(default {','.join(map(str, default))}{what})")


def block_sizes_given(args) -> tuple[int, ...]:
    """--block-sizes flattened: sorted, unique."""
    return tuple(sorted({b for group in args.block_sizes for b in group}))


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


def add_config_argument(parser) -> None:
    """--config NAME=VALUE,...: the tunables of every variant the command runs (sandbox.tunables(name))."""
    parser.add_argument("--config", type=config_text, default={}, metavar="NAME=VALUE,...",
                        help="tunables for every named variant, e.g. threads=64,partition_size=256 "
                             "(python -m sandbox list shows each variant's; default: each variant's defaults)")


def config_text(text: str) -> dict:
    """argparse type of --config: tunables.parse, its ValueError as a usage error."""
    try:
        return tunables.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def resolve_configs(names, config: dict) -> dict:
    """{name: resolved configuration} for each variant, defaults filled in; a parameter a variant does not
    declare, or a value it does not allow, is a ValueError naming the variant, the parameter and what it
    allows, before anything runs or is written."""
    out = {}
    for name in names:
        entry = registry.get_cache_writer(name) if name in registry.CACHE_WRITERS else registry.get(name)
        out[name] = tunables.resolve(name, entry.module, config)
    return out


def select_names(text, known: list, by_family) -> list:
    """Names matching comma-separated exact names, families (numpy, numba, cupy, triton, wrong) or globs (numba.*),
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
            raise RefusedRequest(f"unknown variant {item!r}; valid names: {', '.join(known)}")
        if not matches:
            raise RefusedRequest(f"--variants {item!r} matches no registered variant; valid names: {', '.join(known)}")
        chosen += [m for m in matches if m not in chosen]
    if not chosen:
        raise RefusedRequest(f"--variants {text!r} names no variant")
    return chosen
