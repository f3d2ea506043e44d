"""A kernel family as the harness sees it: how its variants run, get counted and report their compile census.

    Family(name, runtime, capture, census, summary)   declared once per family, as FAMILY in its package
    family.resolve(backend) -> "cpu" | "gpu"          where a variant runs ("auto" chosen, the impossible refused)
    family.needs_other_process(resolved) -> bool      a run that must go to a child process (numba's other mode)
    family.executor_modes                             the CPU executor's checks (ASan, racecheck, order) apply
    family.first_launch_compiles(resolved) -> bool    whether a first launch may compile (then it is not timed)
    family.capture_unavailable() -> str | None        why its launches cannot be counted in this process

A family picks one of the harness's mechanisms for each concern (RUNTIMES, CAPTURES, CENSUSES) and inherits
everything built on it: a CUDA C family on runtime "cuda_c" runs on CuPy and on the CPU executor, with ASan,
racecheck, shared-memory poison and thread-order checks, counts its traffic with capture "executor" and
reports registers and occupancy with census "nvrtc", with no further edit. A family that needs something
else subclasses Family (docs/adding-a-family.md). The registry (sandbox/variant/registry.py, FAMILIES) names
each family's package in one line.
"""
from __future__ import annotations

import dataclasses

from ..devices import backends

# Where a family's launch() runs: backends.resolve's runtimes.
RUNTIMES = {
    "host": "NumPy on the CPU only",
    "cuda_c": "CUDA C: cupy.RawModule on a GPU, the CPU executor (sandbox.cpucuda) elsewhere",
    "numba": "numba.cuda on a GPU, its simulator elsewhere; a run in the other mode goes to a child process",
}
# How sandbox.traffic counts a variant's launches (sandbox/analysis/traffic/variant.py).
CAPTURES = {
    "executor": "the CPU executor's traffic mode records every access of the CUDA C kernels it runs",
    "numba_simulator": "the Numba simulator's patched arrays record every access (sandbox/analysis/traffic/numba_sim.py)",
}
# How `resources`, `sass` and the traffic model learn a kernel's registers and shared memory.
CENSUSES = {
    "nvrtc": "each launched kernel's own source compiled NVRTC -> cubin (module compile_report: the same)",
    "numba_ptx": "the module's compile_report: compile_ptx + nvJitLink, in a real-mode child under the simulator",
}


@dataclasses.dataclass(frozen=True)
class Family:
    """One kernel family: its variants' name prefix and the mechanisms it runs on (see the module docstring)."""

    name: str                  # the variants' prefix: "cupy" for cupy.v1 (and wrong.cupy.*)
    runtime: str               # RUNTIMES
    capture: str | None        # CAPTURES, or None: nothing a GPU would run (no traffic to count)
    census: str | None         # CENSUSES, or None: no compile census
    summary: str = ""
    no_capture: str = ""       # with capture None: why (said in the sweep's traffic_note)

    def __post_init__(self):
        for field, value, known in (("runtime", self.runtime, RUNTIMES), ("capture", self.capture, CAPTURES),
                                    ("census", self.census, CENSUSES)):
            if value is not None and value not in known:
                raise ValueError(f"Family {self.name!r}: {field} must be one of {', '.join(known)}, got {value!r}")
        if self.runtime is None:
            raise ValueError(f"Family {self.name!r}: runtime must be one of {', '.join(RUNTIMES)}")

    def resolve(self, backend: str) -> str:
        """"cpu" or "gpu" for `backend` ("auto", "cpu", "gpu"); a backend this family cannot use here is refused."""
        return backends.resolve(backend, self.name, runtime=self.runtime)

    def needs_other_process(self, resolved: str) -> bool:
        """True when a run on `resolved` must go to a child process (numba.cuda is in the other mode here)."""
        return self.runtime == "numba" and backends.numba_needs_other_process(resolved)

    @property
    def executor_modes(self) -> bool:
        """Whether the CPU executor's checking modes (sandbox.cpucuda.modes) apply to its CPU runs."""
        return self.runtime == "cuda_c"

    def first_launch_compiles(self, resolved: str) -> bool:
        """Whether a first launch may compile (the executor builds at its first launch; a GPU compiles and warms
        up), so that a benchmark does not time it; the simulator and NumPy compile nothing."""
        return resolved == "gpu" or self.runtime == "cuda_c"

    def capture_unavailable(self) -> str | None:
        """Why this family's launches cannot be counted in this process (None: they can)."""
        if self.capture is None:
            return self.no_capture or f"no traffic capture for the {self.name} family"
        if self.capture == "numba_simulator" and not backends.numba_simulated():
            return "the Numba capture needs the simulator (numba.cuda is in real mode here)"
        return None
