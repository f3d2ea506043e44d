"""Run a function in a child process whose numba.cuda is in the other mode (simulator or real).

The simulator switch is read once, at the first import of numba.cuda, so a process cannot use
both. Whatever needs the other mode (compile_ptx needs real mode; simulated runs on a GPU machine
need the simulator) goes through `call_in_numba_mode`. Arguments and results travel by pickle.
"""
from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import traceback

from ..errors import Unsupported


class ChildProcessError_(RuntimeError):
    """The function raised in the child; the message carries the child's traceback."""


def call_in_numba_mode(simulated: bool, function: str, *args, **kwargs):
    """Call "package.module:function"(*args, **kwargs) in a child with NUMBA_ENABLE_CUDASIM set.

    ValueError raised in the child is raised again as ValueError (input errors stay input errors),
    and sandbox.Unsupported as Unsupported (a refusal stays a refusal).
    """
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1" if simulated else "0")
    with tempfile.TemporaryDirectory(prefix="sandbox-mode-") as tmp:
        request, response = os.path.join(tmp, "request.pkl"), os.path.join(tmp, "response.pkl")
        with open(request, "wb") as f:
            pickle.dump((function, args, kwargs), f)
        proc = subprocess.run([sys.executable, "-m", "sandbox.devices.other_mode", request, response],
                              env=env, capture_output=True, text=True)
        if not os.path.exists(response):
            raise ChildProcessError_(f"child process for {function} died (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        with open(response, "rb") as f:
            ok, value = pickle.load(f)
    if ok:
        return value
    kind, message = value
    if kind == "Unsupported":
        raise Unsupported(message)
    if kind == "ValueError":
        raise ValueError(message)
    raise ChildProcessError_(f"{function} failed in the {'simulator' if simulated else 'real-mode'} child:\n{message}")


def _serve(request: str, response: str) -> None:
    with open(request, "rb") as f:
        function, args, kwargs = pickle.load(f)
    module_name, attr = function.split(":")
    try:
        value = getattr(importlib.import_module(module_name), attr)(*args, **kwargs)
        payload = (True, value)
    except ValueError as exc:
        payload = (False, ("Unsupported" if isinstance(exc, Unsupported) else "ValueError", str(exc)))
    except BaseException:
        payload = (False, ("error", traceback.format_exc()))
    with open(response, "wb") as f:
        pickle.dump(payload, f)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
