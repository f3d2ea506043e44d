"""FlashInfer's kernels compiled for sm_80/sm_90 with nvcc, as FlashInfer's own JIT compiles them.

    compile_one(code, expression, arch, include_dirs) -> (Resources, cubin, mangled name)
    kernel_census(kernel, arch) -> (Resources, cubin, mangled name)   one launched kernel (Family.census)
    report(code, wheel, plan, head_dim, dtype, arch) -> dict   compile_report's dict (decode and merge kernels)

NVRTC cannot compile FlashInfer's headers (they include <iostream> and the C++ standard library, which NVRTC
does not ship), so the census uses nvcc from the nvidia-cuda-nvcc wheel (cuda-toolkit[nvcc]; or nvcc on PATH)
with g++ as its host compiler and --expt-relaxed-constexpr as FlashInfer's JIT passes. One nvcc run per
instantiation (a host function takes the kernel's address, which instantiates it), cached on disk like the
NVRTC cubins (sandbox/analysis/compile_cache.py). ptxas -v's log gives the resources; the cubin goes to
`python -m sandbox sass` and to the traffic model, which reads each kernel's loads in flight from its SASS
(sandbox/analysis/loads_in_flight.py) as it does the CUDA C variants' NVRTC cubins.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from sandbox.analysis import compile_cache
from sandbox.analysis.cuda_wheels import in_nvidia_wheels
from sandbox.analysis.nvrtc import Resources, parse_ptxas_log

from . import wheel
from .dispatch import MERGE_THREADS, kernel_name, merge_launch, merge_name

FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-cubin", "-Xptxas", "-v")


class NvccError(RuntimeError):
    """nvcc is missing or failed; the message says which and carries its log."""


@functools.lru_cache(maxsize=None)
def nvcc() -> str:
    """The nvcc of the nvidia-cuda-nvcc wheel, else one on PATH; NvccError naming both when neither exists."""
    found = in_nvidia_wheels("bin/nvcc", ("nvidia.cu13", "nvidia.cuda_nvcc"))
    if found is not None:
        return str(found)
    on_path = shutil.which("nvcc")
    if on_path:
        return on_path
    raise NvccError("nvcc not found (neither the nvidia-cuda-nvcc wheel, cuda-toolkit[nvcc], nor nvcc on PATH): "
                    "FlashInfer's headers need nvcc, NVRTC has no C++ standard library")


def _version() -> str:
    out = subprocess.run([nvcc(), "--version"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "unknown"


def compile_one(code: str, expression: str, arch: str, include_dirs) -> tuple:
    """(Resources, cubin bytes, mangled name) of kernel `expression` in `code`, compiled for `arch`."""
    arch = arch if str(arch).startswith("sm_") else f"sm_{arch}"
    flags = list(FLAGS) + [f"-arch={arch}"] + [f"-I{d}" for d in include_dirs]
    parts = ["nvcc", _version(), code, expression, flags]
    return compile_cache.cached("nvcc", parts, lambda: _compile(code, expression, flags), types=(Resources,))


def kernel_census(kernel, arch: str) -> tuple:
    """The family's census (kernels/flashinfer/__init__.py, Family.census): nvcc's (Resources, cubin, mangled
    name) of one launched kernel (its `code` and name expression), for the traffic model's occupancy and SASS."""
    return compile_one(kernel.code, kernel.name, arch, wheel.locate().include_dirs)


def _compile(code: str, expression: str, flags: list) -> tuple:
    source = code + f"\nvoid sandbox_census_instantiate() {{ (void)&{expression}; }}\n"
    with tempfile.TemporaryDirectory(prefix="sandbox-nvcc-") as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        proc = subprocess.run([nvcc(), *flags, "-o", str(out), str(src)], capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise NvccError(f"nvcc failed on {expression}:\n{(proc.stderr or proc.stdout)[-3000:]}")
        resources = parse_ptxas_log(proc.stderr + proc.stdout)
        if len(resources) != 1:
            raise NvccError(f"nvcc compiled {len(resources)} entry functions for {expression}, expected one")
        (mangled, res), = resources.items()
        return res, out.read_bytes(), mangled


def report(code: str, wheel, plan, head_dim: int, dtype: str, arch: str) -> dict:
    """The decode kernel of `plan` and the merge kernel for `arch`: the decode's numbers on top, `kernels`
    listing both ("partition", "reduce") as the split-KV CUDA C variants' compile reports do."""
    itemsize = 2  # float16 and bfloat16, the dtypes the peer takes
    rows = []
    for role, expression, threads, shared in (
            ("partition", kernel_name(plan, dtype, False), plan.bdx * plan.bdy * plan.bdz, plan.shared_bytes),
            ("reduce", merge_name(head_dim, dtype), MERGE_THREADS, merge_launch(head_dim, itemsize, 1, 1, 1)[2])):
        res, cubin, mangled = compile_one(code, expression, arch, wheel.include_dirs)
        rows.append(dict(name=role, kernel=expression, registers=res.registers,
                         static_shared_bytes=res.static_shared_bytes, dynamic_shared_bytes=int(shared),
                         local_bytes=res.local_bytes, spill_stores=res.spill_stores, spill_loads=res.spill_loads,
                         threads_per_block=threads, image=(cubin, mangled)))
    arch = arch if str(arch).startswith("sm_") else f"sm_{arch}"
    main = {k: v for k, v in rows[0].items() if k != "name"}
    return dict(main, path="nvcc -> cubin", arch=arch, kernels=rows,
                note=f"{wheel.label}, GQA group {plan.bdy}; the merge runs only when the planner splits")
