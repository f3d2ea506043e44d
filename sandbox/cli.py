"""python -m sandbox COMMAND: each command is a module with add_arguments(parser) and main(args) -> int.

Exit status: the command's; 2 for a request it refuses (sandbox.errors.RefusedRequest, or the parser's
refusal, a SystemExit(2) from parse_args: one line "error: ...", no traceback, nothing written); 1 for an
output that could not be written (sandbox.errors.OutputFailed, or standard output refusing a write: one line
naming it) and for an internal error (any other exception: one line with its type and cause, the traceback
in a log file whose path the line gives); 130 on Ctrl-C (one line). Errors are told apart by type: a
ValueError from inside a command is an internal error (docs/exit-codes.md).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback

from .errors import OutputFailed, RefusedRequest

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


class _Parser(argparse.ArgumentParser):
    """argparse whose refusals are one line (naming the flag and the bound, then where the usage is) and
    SystemExit(2), as argparse's own; --help still prints and exits 0. Subcommands inherit it."""

    def error(self, message):
        print(f"error: {message} (usage: {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(command)
    return parser


def _internal_error_log(command: str) -> str:
    """The current exception's traceback in a new file under the temporary folder; its path ("" if unwritable)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        fd, path = tempfile.mkstemp(prefix=f"sandbox-{command}-{stamp}-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(f"python -m sandbox {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
        return path
    except OSError:
        return ""


class StdoutFailed(OSError):
    """Standard output refused a write (/dev/full, an I/O error); not a broken pipe (the reader left: fine)."""


class _GuardedStdout:
    """sys.stdout during a command: its write errors become StdoutFailed, told apart from a file the command
    writes."""

    def __init__(self, stream):
        self._stream = stream

    def _guard(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc.errno, exc.strerror) from None

    def write(self, text):
        return self._guard(self._stream.write, text)

    def flush(self):
        return self._guard(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _stdout_failed(stream, exc: OSError) -> int:
    """One line, exit 1; what is still buffered goes to /dev/null so the interpreter's last flush cannot fail."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): nothing buffered there
        pass
    print(f"error: cannot write to standard output ({exc.strerror or exc})", file=sys.stderr)
    return 1


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)  # a refused command line: one line, SystemExit(2)
    stream = sys.stdout
    sys.stdout = _GuardedStdout(stream)
    try:
        status = int(importlib.import_module(args._module).main(args) or 0)
        sys.stdout.flush()  # a full stdout fails here at the latest, inside the handlers below
        return status
    except RefusedRequest as exc:  # bad input from the user: the message says what and why, nothing written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OutputFailed as exc:  # the message names the path
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except StdoutFailed as exc:
        return _stdout_failed(stream, exc)
    except BrokenPipeError:  # `python -m sandbox ... | head`: the reader left, that is fine
        stream = None
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT
        print(f"interrupted: python -m sandbox {args.command} stopped (Ctrl-C)", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, or a failure no check foresaw: one line here, the traceback in the log
        return _internal(args.command, exc)
    finally:
        sys.stdout = stream


def _internal(command: str, exc: BaseException) -> int:
    log = _internal_error_log(command)
    cause = (str(exc).splitlines() or [""])[0]
    where = f" (traceback: {log})" if log else ""
    print(f"internal error: {type(exc).__name__}: {cause}{where}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
