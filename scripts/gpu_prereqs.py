"""The prerequisite step of scripts/gpu-check: everything the GPU run needs, tried before anything runs.

    python scripts/gpu_prereqs.py        (PYTHON=... names the interpreter the checks run in)

Each check runs in its own child process of $PYTHON (a failed CUDA initialisation must not poison the
next check) or as a command; every failure is listed, then the exit status is 3 (0 when nothing is
missing). Besides imports it compiles and launches a one-line Numba kernel, compiles and launches a
CuPy RawKernel that includes <cuda_fp16.h> and <cuda_bf16.h> and adds two __half, finds g++ and
libasan (the CPU-executor tests still run on the GPU machine), finds the CUDA headers NVRTC needs
(sandbox/analysis/nvrtc.py), and prints the driver's CUDA version beside the major version of the installed
CUDA wheels, saying plainly when the driver is too old for them.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from typing import Callable

MISSING_HEADER = "gpu-check: missing prerequisites (nothing was run):"

NUMBA_KERNEL = """
import numpy as np
from numba import config, cuda
assert not config.ENABLE_CUDASIM, "numba.cuda is in simulator mode"
@cuda.jit
def add_one(x):
    x[cuda.grid(1)] += 1
x = cuda.to_device(np.zeros(32, dtype=np.int32))
add_one[1, 32](x)
assert (x.copy_to_host() == 1).all()
"""

CUPY_HALF_KERNEL = r'''
import cupy, numpy as np
code = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void add_half(const __half *a, const __half *b, __half *out, __nv_bfloat16 *unused) {
    out[threadIdx.x] = __hadd(a[threadIdx.x], b[threadIdx.x]);
}
"""
from sandbox.devices.backends import raw_module
kernel = raw_module("gpu", code, ("-std=c++17",)).get_function("add_half")
a = cupy.full(32, 1.5, dtype=cupy.float16)
b = cupy.full(32, 2.25, dtype=cupy.float16)
out = cupy.zeros(32, dtype=cupy.float16)
kernel((1,), (32,), (a, b, out, cupy.zeros(1, dtype=cupy.uint16)))
assert (out.get() == np.float16(3.75)).all(), out
'''

WHEELS = """
import importlib.metadata as md, json, re
out = {}
for dist in md.distributions():
    name = (dist.metadata["Name"] or "").lower()
    m = re.fullmatch(r"cupy-cuda(\\d\\d)x", name)
    if m:
        out[name] = [dist.version, int(m.group(1)[:2])]
    elif name in ("cuda-bindings", "cuda-python") or re.fullmatch(r"nvidia-cuda-(runtime|nvrtc)(-cu\\d+)?", name):
        suffix = re.search(r"-cu(\\d+)$", name)
        out[name] = [dist.version, int(suffix.group(1)) if suffix else int(dist.version.split(".")[0])]
print(json.dumps(out))
"""


@dataclasses.dataclass(frozen=True)
class Check:
    label: str          # what is missing when the check fails, as the user reads it
    argv: tuple         # a command; "{python}" is replaced by the interpreter
    phase: int = 1      # 2: tried only when every phase-1 check passed (the imports it relies on)


def checks() -> list[Check]:
    py = "{python}"
    out = [
        Check("python3 >= 3.10 (set PYTHON=...)", (py, "-c", "import sys; assert sys.version_info >= (3, 10)")),
        Check("nvidia-smi / the NVIDIA driver", ("nvidia-smi", "-L")),
    ]
    for module in ("numpy", "numba", "hypothesis", "pytest"):
        out.append(Check(f"python package '{module}'", (py, "-c", f"import {module}")))
    out += [
        Check("python package 'numba-cuda' (numba.cuda)", (py, "-c", "import numba.cuda")),
        Check("python package 'cupy' (cupy-cuda12x or cupy-cuda13x)", (py, "-c", "import cupy")),
        Check("python package 'cuda-bindings' (the sandbox finds the GPU through cuda.bindings.driver)",
              (py, "-c", "import cuda.bindings.driver")),
        Check("g++ (the CPU-executor tests compile CUDA C with it; set SANDBOX_CPUCUDA_CXX=...)",
              (py, "-c", "import os, shutil, sys; sys.exit(shutil.which(os.environ.get('SANDBOX_CPUCUDA_CXX', 'g++')) is None)")),
        Check("libasan (gcc's AddressSanitizer runtime, e.g. apt install libasan8: the ASan tests need it)",
              (py, "-c", "from sandbox.cpucuda.asan import libasan; libasan()")),
        Check("the CUDA headers NVRTC needs (cuda_fp16.h: pip 'nvidia-cuda-runtime' / cuda-toolkit[cudart])",
              (py, "-c", "from sandbox.analysis.nvrtc import cuda_include_dir; cuda_include_dir()")),
        Check("a GPU seen by numba.cuda in real mode: a one-line kernel compiled and launched", (py, "-c", NUMBA_KERNEL), 2),
        Check("a GPU seen by CuPy: a RawKernel with <cuda_fp16.h> and <cuda_bf16.h> adding two __half, "
              "compiled and launched", (py, "-c", CUPY_HALF_KERNEL), 2),
        Check("a GPU seen by sandbox.devices.backends.gpu_present() (cuda.bindings.driver)",
              (py, "-c", "from sandbox.devices.backends import gpu_present; assert gpu_present()"), 2),
    ]
    return out


def run_command(argv, timeout: float = 300) -> tuple[int, str]:
    """(exit status, stdout + stderr) of a command; 127 when it cannot be started."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g} s"
    return done.returncode, done.stdout + done.stderr


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def driver_cuda_version(run: Callable = run_command) -> tuple[int, int] | None:
    """The CUDA version the driver supports, from nvidia-smi's header ("CUDA Version: 12.4")."""
    code, out = run(("nvidia-smi",))
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", out) if code == 0 else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def wheel_majors(python: str, run: Callable = run_command) -> dict:
    """{distribution: [version, CUDA major]} of the installed CUDA wheels (cuda-bindings, cupy-cudaNNx, ...)."""
    import json
    code, out = run((python, "-c", WHEELS))
    if code != 0:
        return {}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def driver_line(driver, wheels) -> tuple[str, str | None]:
    """(the line printed, the missing item or None): the driver's CUDA beside the wheels' major versions."""
    shown = ", ".join(f"{name} {version} (CUDA {major})" for name, (version, major) in sorted(wheels.items())) or "none found"
    have = "unknown (nvidia-smi printed no CUDA version)" if driver is None else f"{driver[0]}.{driver[1]}"
    line = f"driver supports CUDA {have}; installed CUDA wheels: {shown}"
    if driver is None or not wheels:
        return line, None
    newest = max(major for _, major in wheels.values())
    if driver[0] < newest:
        too_new = ", ".join(name for name, (_, major) in sorted(wheels.items()) if major > driver[0])
        return line, (f"an NVIDIA driver for CUDA {newest}: this driver supports CUDA {have}, too old for the "
                      f"installed CUDA {newest} wheels ({too_new}); install a newer driver or the "
                      f"CUDA {driver[0]} wheels (e.g. cupy-cuda{driver[0]}x)")
    return line, None


def main(argv=None, run: Callable = run_command, out=print) -> int:
    python = os.environ.get("PYTHON", sys.executable)
    missing = []
    for phase in (1, 2):
        if phase == 2 and missing:
            break
        for check in checks():
            if check.phase != phase:
                continue
            code, text = run(tuple(python if a == "{python}" else a for a in check.argv))
            if code != 0:
                detail = last_line(text)
                missing.append(check.label + (f" [{detail}]" if detail and phase == 2 else ""))
    if not any(m.startswith("nvidia-smi") for m in missing):
        line, too_old = driver_line(driver_cuda_version(run), wheel_majors(python, run))
        out(f"gpu-check: {line}")
        if too_old:
            missing.append(too_old)
    if missing:
        out(MISSING_HEADER)
        for item in missing:
            out(f"  - {item}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
