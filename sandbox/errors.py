"""The project's error types that cross layers: what a caller can fix, told apart from what went wrong inside.

``RefusedRequest`` is a request the user can correct (a bad argument, an impossible size): the CLI prints its
one-line message and exits 2, and it is raised before anything is written. Every other exception escaping a
command is an internal error (exit 1).
"""


class RefusedRequest(ValueError):
    """A request refused before any work or any write; the message names the argument and the constraint."""


class OutputFailed(OSError):
    """A write the request needed failed (a full disk, a device that refuses, a folder that vanished): the
    CLI prints its one-line message, which names the path, and exits 1. A path that cannot work at all (a
    folder, a missing or read-only parent) is a RefusedRequest found before any work instead."""
