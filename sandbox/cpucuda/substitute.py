"""Run a kernel module with different source text, without touching the launcher that builds it.

    with substitute_source(original_code, mutated_code):
        prepared = v2.prepare(problem, "cpu")   # builds from `original_code` as usual...
        prepared.launch()                       # ...but g++ compiles `mutated_code`

Every compile of exactly ``original_code`` inside the block uses
``replacement`` instead (the compiled-object cache is keyed on the text g++
sees, so both versions stay cached side by side). This is how the mutation
test removes one ``__syncthreads()`` at a time from the CUDA C variants:
their launchers (kernels/cupy_raw) load and cache modules by path, and this
hook swaps the text underneath them. Process-wide, like the SANDBOX_CPUCUDA_*
switches.
"""
from __future__ import annotations

import contextlib
import threading

_LOCK = threading.Lock()
_SUBSTITUTES: dict[str, str] = {}


def substituted(code: str) -> str:
    """The text to compile for ``code``: its substitute inside substitute_source(), else itself."""
    with _LOCK:
        return _SUBSTITUTES.get(code, code)


@contextlib.contextmanager
def substitute_source(original: str, replacement: str):
    """Compile ``replacement`` wherever ``original`` is compiled, inside the block."""
    with _LOCK:
        previous = _SUBSTITUTES.get(original)
        _SUBSTITUTES[original] = replacement
    try:
        yield
    finally:
        with _LOCK:
            if previous is None:
                _SUBSTITUTES.pop(original, None)
            else:
                _SUBSTITUTES[original] = previous
