"""The executor's checking modes and their process-wide switches.

Each mode can be set per kernel (``CpuRawKernel(..., asan=True)``), per
launch where it makes sense (``kernel(..., thread_order="reverse")``) or for
the whole process through an environment variable read at every launch:

    SANDBOX_CPUCUDA_ASAN=1              AddressSanitizer in a child process
    SANDBOX_CPUCUDA_RACECHECK=1|strict  race detection (racecheck.py)
    SANDBOX_CPUCUDA_ORDER=reverse       threads (and blocks) in reverse order
    SANDBOX_CPUCUDA_POISON=finite       large finite shared-memory poison instead of NaN
    SANDBOX_CPUCUDA_POISON_SEED=N       the finite poison's seed (default: a new one per launch)
    SANDBOX_CPUCUDA_TRAFFIC=1           count memory traffic (traffic.py; sandbox.cpucuda.last_traffic())

``modes(...)`` sets them for a ``with`` block, so kernels built by code you do
not control (``sandbox.devices.backends.raw_module``, the kernels/cupy_raw launchers)
run in those modes too. A kernel's own setting wins over the environment.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass



@dataclass(frozen=True)
class BuildMode:
    """One way to compile and run a kernel: a small, named set of g++ flags plus runtime choices.

    A new mode is one row of BUILD_MODES: its flags (the precompiled runtime header and the cache
    key follow them), how large its fiber stacks are, whether a launch runs in this process or in
    a sanitizer child (``runner``: the module of this package whose ``launch()`` runs it), whether
    its shared object holds every kernel of a module or only the one launched, and which module's
    recorder its instrumented object is linked with (``recorder``: instrument.py).
    """

    name: str
    flags: tuple[str, ...]
    stack_factor: int = 1       # fiber stacks: this many times SANDBOX_CPUCUDA_STACK_KB
    runner: str | None = None   # "asan": a child process with that sanitizer; None: in process
    whole_module: bool = True   # False: sanitizer builds compile several times slower, so one kernel each
    recorder: str | None = None  # "traffic", "racecheck": the module whose RECORDER and compile_flags() it adds
    opt_variable: str | None = None  # the environment variable whose -O level replaces the mode's own


BUILD_MODES = {m.name: m for m in (
    # SANDBOX_CPUCUDA_OPT=-O1 compiles big template modules about twice as fast
    BuildMode("normal", ("-O2",), opt_variable="SANDBOX_CPUCUDA_OPT"),
    BuildMode("asan", ("-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"), 4, "asan", False,
              opt_variable="SANDBOX_CPUCUDA_ASAN_OPT"),
    # racecheck and traffic: in process, flags from racecheck/traffic.compile_flags() (instrumentation that
    # feeds race_checker.cpp / traffic_recorder.cpp)
    BuildMode("race", (), 1, None, False, "racecheck", opt_variable="SANDBOX_CPUCUDA_RACECHECK_OPT"),
    BuildMode("traffic", (), 1, None, False, "traffic"),
)}


def build_mode(name: str) -> BuildMode:
    """The BuildMode called ``name``; a ValueError lists the known ones."""
    try:
        return BUILD_MODES[name]
    except KeyError:
        raise ValueError(f"mode {name!r}: use one of {sorted(BUILD_MODES)}") from None


ORDERS = ("forward", "reverse")
POISONS = ("nan", "finite")
RACECHECK = ("off", "on", "strict")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def default_thread_order() -> str:
    """``SANDBOX_CPUCUDA_ORDER`` (forward|reverse), read at each launch."""
    order = os.environ.get("SANDBOX_CPUCUDA_ORDER", "forward")
    if order not in ORDERS:
        raise ValueError(f"SANDBOX_CPUCUDA_ORDER={order!r}: use one of {ORDERS}")
    return order


def default_asan() -> bool:
    """``SANDBOX_CPUCUDA_ASAN=1`` runs every launch under AddressSanitizer."""
    return os.environ.get("SANDBOX_CPUCUDA_ASAN", "").lower() in _TRUE


def default_traffic() -> bool:
    """``SANDBOX_CPUCUDA_TRAFFIC=1`` counts every launch's memory traffic (see traffic.py)."""
    return os.environ.get("SANDBOX_CPUCUDA_TRAFFIC", "").lower() in _TRUE


def resolve_racecheck(value, what: str = "racecheck") -> str:
    """True/"on"/1 -> "on", "strict" -> "strict", False/None/"off"/0 -> "off"."""
    if value is None or value is False:
        return "off"
    if value is True:
        return "on"
    text = str(value).lower()
    if text == "strict":
        return "strict"
    if text in _TRUE:
        return "on"
    if text in _FALSE:
        return "off"
    raise ValueError(f"{what}={value!r}: use True, False or 'strict'")


def default_racecheck() -> str:
    """``SANDBOX_CPUCUDA_RACECHECK`` (1|strict|0), read at each launch: "on", "strict" or "off"."""
    return resolve_racecheck(os.environ.get("SANDBOX_CPUCUDA_RACECHECK", ""), "SANDBOX_CPUCUDA_RACECHECK")


def resolve_poison(value, what: str = "poison") -> str:
    if value not in POISONS:
        raise ValueError(f"{what}={value!r}: use one of {POISONS}")
    return value


def default_poison() -> str:
    """``SANDBOX_CPUCUDA_POISON`` (nan|finite), read at each launch."""
    return resolve_poison(os.environ.get("SANDBOX_CPUCUDA_POISON", "nan") or "nan", "SANDBOX_CPUCUDA_POISON")


def _env_value(name: str, value) -> str:
    if name in ("asan", "traffic"):
        return "1" if value else "0"
    if name == "racecheck":
        return {"on": "1", "strict": "strict", "off": "0"}[resolve_racecheck(value)]
    if name == "order":
        if value not in ORDERS:
            raise ValueError(f"order={value!r}: use one of {ORDERS}")
        return value
    if name == "poison":
        return resolve_poison(value)
    return str(int(value))  # poison_seed


_ENV = {"asan": "SANDBOX_CPUCUDA_ASAN", "racecheck": "SANDBOX_CPUCUDA_RACECHECK", "order": "SANDBOX_CPUCUDA_ORDER",
        "poison": "SANDBOX_CPUCUDA_POISON", "poison_seed": "SANDBOX_CPUCUDA_POISON_SEED",
        "traffic": "SANDBOX_CPUCUDA_TRAFFIC"}


@contextlib.contextmanager
def modes(*, asan=None, racecheck=None, order=None, poison=None, poison_seed=None, traffic=None):
    """Set the process-wide switches for a ``with`` block (None leaves one as it is).

        with sandbox.cpucuda.modes(racecheck=True, poison="finite"):
            check_problem("cupy.v2", problem)

    Implemented with the environment variables, so child processes and kernels
    built anywhere in the process see the same modes; restored on exit.
    """
    given = {"asan": asan, "racecheck": racecheck, "order": order, "poison": poison, "poison_seed": poison_seed,
             "traffic": traffic}
    values = {_ENV[k]: _env_value(k, v) for k, v in given.items() if v is not None}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
