"""A kernel family as the harness sees it: how its variants run, get counted and report their compile census.

    Family(name, runtime, capture, census, ...)       declared once per family, as FAMILY in its package
    family.resolve(backend) -> "cpu" | "gpu"          where a variant runs ("auto" chosen, the impossible refused)
    family.needs_other_process(resolved) -> bool      a run that must go to a child process (numba's other mode)
    family.first_launch_compiles(resolved) -> bool    whether a first launch may compile (then it is not timed)
    family.capture_unavailable() -> str | None        why its launches cannot be counted in this process
    family.label(resolved) -> str                     what a sweep row says it ran on: gpu, cpu-executor, ...

A family picks one of the harness's mechanisms for each concern (RUNTIMES, CAPTURES, CENSUSES) and inherits
everything built on it: a CUDA C family (runtime "gpu_or_cpu", executor_modes, capture "executor", census
"nvrtc") runs on CuPy and on the CPU executor, with ASan, racecheck, shared-memory poison and thread-order
checks, counts its traffic and reports registers and occupancy, with no further edit. A family with a
capture of its own passes it as a function (docs/adding-a-family.md). The registry
(sandbox/variant/registry.py, FAMILIES) names each family's package in one line.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..devices import backends

# Where a family's launch() runs: backends.resolve's runtimes.
RUNTIMES = {
    "host": "the CPU only (NumPy)",
    "gpu_or_cpu": "a GPU where CuPy can use one, the family's CPU stand-in elsewhere",
    "numba": "numba.cuda on a GPU, its simulator elsewhere; a run in the other mode goes to a child process",
}
# How sandbox.traffic counts a variant's launches (sandbox/analysis/traffic/variant.py). A family may instead
# pass its own function: capture(name, problem, counted, census, config, device, kind) -> (launches, grids,
# resources), as the two below do.
CAPTURES = {
    "executor": "the CPU executor's traffic mode records every access of the CUDA C kernels it runs",
    "numba_simulator": "the Numba simulator's patched arrays record every access (sandbox/analysis/traffic/numba_sim.py)",
}
# How `resources`, `sass` and the traffic model learn a kernel's registers and shared memory.
CENSUSES = {
    "nvrtc": "each launched kernel's own source compiled NVRTC -> cubin (module compile_report: the same)",
    "numba_ptx": "the module's compile_report: compile_ptx + nvJitLink, in a real-mode child under the simulator",
    "compile_report": "the module's compile_report, in this process",
}


@dataclasses.dataclass(frozen=True)
class Family:
    """One kernel family: its variants' name prefix and the mechanisms it runs on (see the module docstring)."""

    name: str                    # the variants' prefix: "cupy" for cupy.v1 (and wrong.cupy.*)
    runtime: str                 # RUNTIMES
    capture: str | Callable | None  # CAPTURES, the family's own capture function, or None: nothing to count
    census: str | None           # CENSUSES, or None: no compile census
    summary: str = ""
    cpu_label: str = "cpu"       # a CPU run's backend column in the sweep (never mistaken for a GPU time)
    executor_modes: bool = False  # its CPU runs are CUDA C on the executor: check's --asan, --racecheck, ... apply
    compiles_at_first_launch: bool = False  # on the CPU (the executor builds a kernel at its first launch)
    no_capture: str = ""         # with capture None: why (said in the sweep's traffic_note)

    def __post_init__(self):
        for field, value, known in (("runtime", self.runtime, RUNTIMES), ("census", self.census, CENSUSES)):
            if (value is not None or field == "runtime") and value not in known:
                raise ValueError(f"Family {self.name!r}: {field} must be one of {', '.join(known)}, got {value!r}")
        if self.capture is not None and not callable(self.capture) and self.capture not in CAPTURES:
            raise ValueError(f"Family {self.name!r}: capture must be one of {', '.join(CAPTURES)}, a function or "
                             f"None, got {self.capture!r}")

    def resolve(self, backend: str) -> str:
        """"cpu" or "gpu" for `backend` ("auto", "cpu", "gpu"); a backend this family cannot use here is refused."""
        return backends.resolve(backend, self.name, runtime=self.runtime)

    def needs_other_process(self, resolved: str) -> bool:
        """True when a run on `resolved` must go to a child process (numba.cuda is in the other mode here)."""
        return self.runtime == "numba" and backends.numba_needs_other_process(resolved)

    def first_launch_compiles(self, resolved: str) -> bool:
        """Whether a first launch may compile (a GPU compiles and warms up; on the CPU, compiles_at_first_launch),
        so that a benchmark does not time it; the simulator and NumPy compile nothing."""
        return resolved == "gpu" or self.compiles_at_first_launch

    def label(self, resolved: str) -> str:
        """What a point ran on: "gpu", or the family's CPU stand-in (cpu_label)."""
        return "gpu" if resolved == "gpu" else self.cpu_label

    def capture_unavailable(self) -> str | None:
        """Why this family's launches cannot be counted in this process (None: they can)."""
        if self.capture is None:
            return self.no_capture or f"no traffic capture for the {self.name} family"
        if self.capture == "numba_simulator" and not backends.numba_simulated():
            return "the Numba capture needs the simulator (numba.cuda is in real mode here)"
        return None
