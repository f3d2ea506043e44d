"""A kernel family as the harness sees it: how its variants run, get counted and report their compile census.

    Family(name, runtime, capture, census, ...)       declared once per family, as FAMILY in its package
    family.resolve(backend) -> "cpu" | "gpu"          where a variant runs ("auto" chosen, the impossible refused)
    family.needs_other_process(resolved) -> bool      a run that must go to a child process (numba's other mode)
    family.first_launch_compiles(resolved) -> bool    whether a first launch may compile (then it is not timed)
    family.capture_unavailable() -> str | None        why its launches cannot be counted in this process
    family.label(resolved) -> str                     what a sweep row says it ran on: gpu, cpu-executor, ...
    family.why_unavailable() -> str | None            why its variants cannot run here at all (a peer's wheel missing)
    family.peer_label() -> str | None                 another project's kernels: "peer: FlashInfer 0.7.4"; else None

A family picks one of the harness's mechanisms for each concern (RUNTIMES, CAPTURES, CENSUSES) and inherits
everything built on it: a CUDA C family (runtime "gpu_or_cpu", executor_modes, capture "executor", census
"nvrtc") runs on CuPy and on the CPU executor, with ASan, racecheck, shared-memory poison and thread-order
checks, counts its traffic and reports registers and occupancy, with no further edit. A family with a
capture of its own passes it as a function, and one whose kernels NVRTC cannot compile passes its own compile
as `census` (docs/adding-a-family.md). A peer family (another project's kernels, raced for reference) names
itself with `peer`: its wrong or failed points are findings about it and never the sandbox's exit status. The registry
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
# resources), as the two below do; a launch's resources may carry `image`: (cubin bytes, function name) of the
# kernel compiled for device.arch, whose SASS sandbox.traffic reads for the loads in flight (kernels/triton).
CAPTURES = {
    "executor": "the CPU executor's traffic mode records every access of the CUDA C kernels it runs",
    "numba_simulator": "the Numba simulator's patched arrays record every access (sandbox/analysis/traffic/numba_sim.py)",
}
# How `resources`, `sass` and the traffic model learn a kernel's registers and shared memory. A family may instead
# pass its own compile: census(kernel, arch) -> (analysis.nvrtc.Resources, cubin bytes, function name in the cubin)
# for one launched kernel (its `name`, `code`, `options`); the traffic model reads the loads in flight from that
# cubin's SASS as it does from NVRTC's, and `resources`/`sass` read the module's compile_report.
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
    census: str | Callable | None  # CENSUSES, the family's own compile function, or None: no compile census
    summary: str = ""
    cpu_label: str = "cpu"       # a CPU run's backend column in the sweep (never mistaken for a GPU time)
    executor_modes: bool = False  # its CPU runs are CUDA C on the executor: check's --asan, --racecheck, ... apply
    compiles_at_first_launch: bool = False  # on the CPU (the executor builds a kernel at its first launch)
    no_capture: str = ""         # with capture None: why (said in the sweep's traffic_note)
    # Another project's kernels (a peer raced for reference): peer() -> "FlashInfer 0.7.4" (or why none runs).
    # Its failures are findings about it: check and the sweep report them and never fail on them.
    peer: Callable[[], str] | None = None
    # unavailable() -> why its variants cannot run here at all (a wheel missing, another version), or None:
    # check says it in one SKIP line, the sweep in one log line.
    unavailable: Callable[[], str | None] | None = None

    def __post_init__(self):
        for field, value, known in (("runtime", self.runtime, RUNTIMES), ("census", self.census, CENSUSES)):
            if (value is not None or field == "runtime") and not (field == "census" and callable(value)) \
                    and value not in known:
                raise ValueError(f"Family {self.name!r}: {field} must be one of {', '.join(known)}, got {value!r}"
                                 + (" (or the family's own compile function)" if field == "census" else ""))
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
        missing = self.why_unavailable()
        if missing:
            return f"unavailable: {missing}"
        if self.capture == "numba_simulator" and not backends.numba_simulated():
            return "the Numba capture needs the simulator (numba.cuda is in real mode here)"
        return None

    def why_unavailable(self) -> str | None:
        """Why this family's variants cannot run here at all (unavailable()), or None."""
        return self.unavailable() if self.unavailable is not None else None

    def peer_label(self) -> str | None:
        """"peer: <project> <version>" for a peer family (its failures are findings about it), else None."""
        return f"peer: {self.peer()}" if self.peer is not None else None
