"""python -m sandbox COMMAND: each command is a module with add_arguments(parser) and main(args) -> int.

Exit status: the command's; 2 for a request it refuses (a ValueError: one line "error: ...", no
traceback); 130 on Ctrl-C (one line).
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "list": ("sandbox.commands.list_variants", "list the registered variants and their limits"),
    "check": ("sandbox.commands.check", "check variants against the reference on edge-case and random problems"),
    "memory": ("sandbox.commands.memory", "memory-waste study: paged against contiguous KV allocation"),
    "serving": ("sandbox.commands.serving", "online serving simulation: max request rate under a latency bound, "
                                            "paged against contiguous KV allocation"),
    "sweep": ("sandbox.commands.sweep", "race every variant over block sizes and shapes: check, time, plot"),
    "compare": ("sandbox.commands.compare", "compare two sweep runs point by point; flag regressions"),
    "resources": ("sandbox.commands.resources", "registers, shared/local memory, spills and occupancy per variant (sm_80/sm_90)"),
    "sass": ("sandbox.commands.sass", "each variant's SASS (sm_80/sm_90) without a GPU: census of loads by width, "
                                      "local memory, barriers, shuffles; --dump for the listing"),
    "traffic": ("sandbox.commands.traffic", "memory traffic counted on the CPU (Nsight Compute's metrics) and the "
                                            "modelled GPU time, per variant and block size"),
    "model-check": ("sandbox.commands.model_check", "the performance model against published measurements: model, "
                                                    "measured and error per row, median |error|"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(command)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except ValueError as exc:  # bad input from the user: the message says what and why
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `python -m sandbox ... | head`: the reader left, that is fine
        sys.stdout = None
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT
        print(f"interrupted: python -m sandbox {args.command} stopped (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
