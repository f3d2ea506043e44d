"""The project's error types that cross layers: what a caller can fix, told apart from what went wrong inside.

``RefusedRequest`` is a request the user can correct (a bad argument, an impossible size): the CLI prints its
one-line message and exits 2, and it is raised before anything is written. ``OutputFailed`` is a write the
request needed that failed (exit 1, the path named). Every other exception escaping a command is an internal
error (exit 1). ``Unsupported`` is a variant's refusal of a problem outside its limits (a RefusedRequest;
``sandbox.Unsupported``; sandbox/variant/limits.py re-exports it): the backends' child processes carry it back.
"""


class RefusedRequest(ValueError):
    """A request refused before any work or any write; the message names the argument and the constraint."""


class OutputFailed(OSError):
    """A write the request needed failed (a full disk, a device that refuses, a folder that vanished): the
    CLI prints its one-line message, which names the path, and exits 1. A path that cannot work at all (a
    folder, a missing or read-only parent) is a RefusedRequest found before any work instead."""


class Unsupported(RefusedRequest):
    """A variant refuses a problem it was not built for (declared limits, or a prepare that cannot fit it).

    Raise it (not a bare ValueError) from `prepare` to refuse: the sweep records the point as
    `unsupported`; any other exception from a variant is an `error`.
    """
