"""scripts/gpu-check's prerequisite step on the CPU: each missing piece faked in turn, the driver-too-old
refusal, and the bash script end to end with a fake nvidia-smi (exit 3, everything missing listed, nothing run)."""
from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
spec = importlib.util.spec_from_file_location("gpu_prereqs", SCRIPTS / "gpu_prereqs.py")
prereqs = importlib.util.module_from_spec(spec)
sys.modules["gpu_prereqs"] = prereqs  # dataclasses look their module up
spec.loader.exec_module(prereqs)

SMI = "+----+\n| NVIDIA-SMI 580.65  Driver Version: 580.65  CUDA Version: 13.0 |\n"
WHEELS_13 = {"cuda-bindings": ["13.0.3", 13], "cupy-cuda13x": ["14.0.0", 13]}


def fake_runner(fail_label=None, smi=SMI, wheels=WHEELS_13):
    """A run() where every check passes except the one labelled `fail_label`; records what ran."""
    labels = {c.argv: c.label for c in prereqs.checks()}
    ran = []

    def run(argv, timeout=300):
        ran.append(argv)
        template = tuple("{python}" if a == "python-under-test" else a for a in argv)
        if labels.get(template) == fail_label and fail_label is not None:
            return 1, "Traceback ...\nRuntimeError: it broke here\n"
        if argv == ("nvidia-smi",):
            return 0, smi
        if len(argv) == 3 and argv[2] == prereqs.WHEELS:
            return 0, json.dumps(wheels) + "\n"
        return 0, ""

    return run, ran


@pytest.mark.parametrize("label", [c.label for c in prereqs.checks()])
def test_each_missing_prerequisite_is_listed_and_refused(monkeypatch, label):
    monkeypatch.setenv("PYTHON", "python-under-test")
    run, ran = fake_runner(label)
    printed = []
    assert prereqs.main(run=run, out=printed.append) == 3
    assert prereqs.MISSING_HEADER in printed
    listed = [p for p in printed if p.startswith("  - ")]
    assert len(listed) == 1 and listed[0].startswith(f"  - {label}"), printed
    check = next(c for c in prereqs.checks() if c.label == label)
    if check.phase == 2:  # what went wrong is shown for a GPU check
        assert "RuntimeError: it broke here" in listed[0]
    else:  # phase-2 checks (launching kernels) are not tried on top of a missing import
        assert not any(argv[-1] in (prereqs.NUMBA_KERNEL, prereqs.CUPY_HALF_KERNEL) for argv in ran)


def test_the_checks_launch_kernels_and_find_compilers_headers():
    labels = " | ".join(c.label for c in prereqs.checks())
    codes = " ".join(" ".join(c.argv) for c in prereqs.checks())
    for needed in ("one-line kernel compiled and launched", "<cuda_fp16.h> and <cuda_bf16.h> adding two __half",
                   "g++", "libasan", "CUDA headers NVRTC needs"):
        assert needed in labels
    assert "#include <cuda_fp16.h>" in codes and "#include <cuda_bf16.h>" in codes and "__hadd" in codes
    assert "add_one[1, 32]" in codes and "cuda_include_dir()" in codes and "libasan()" in codes


def test_all_present_passes_and_prints_the_driver_beside_the_wheels(monkeypatch):
    monkeypatch.setenv("PYTHON", "python-under-test")
    run, _ = fake_runner()
    printed = []
    assert prereqs.main(run=run, out=printed.append) == 0
    assert printed == ["gpu-check: driver supports CUDA 13.0; installed CUDA wheels: cuda-bindings 13.0.3 (CUDA 13), "
                       "cupy-cuda13x 14.0.0 (CUDA 13)"]


def test_a_driver_too_old_for_the_wheels_is_said_plainly(monkeypatch):
    monkeypatch.setenv("PYTHON", "python-under-test")
    run, _ = fake_runner(smi=SMI.replace("CUDA Version: 13.0", "CUDA Version: 12.4"))
    printed = []
    assert prereqs.main(run=run, out=printed.append) == 3
    assert "gpu-check: driver supports CUDA 12.4; installed CUDA wheels: cuda-bindings 13.0.3 (CUDA 13), " \
           "cupy-cuda13x 14.0.0 (CUDA 13)" in printed
    (item,) = [p for p in printed if p.startswith("  - ")]
    assert "this driver supports CUDA 12.4, too old for the installed CUDA 13 wheels (cuda-bindings, cupy-cuda13x)" \
        in item and "cupy-cuda12x" in item


def test_gpu_check_script_with_a_fake_driver_lists_what_is_missing_and_runs_nothing(tmp_path):
    """The bash script end to end: a fake nvidia-smi reporting CUDA 12.4 beside this venv's CUDA 13 wheels."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake (UUID: GPU-0)'\necho '| NVIDIA-SMI 550  Driver Version: 550  "
                   "CUDA Version: 12.4 |'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PYTHON=sys.executable, PATH=f"{bin_dir}:{os.environ['PATH']}")
    done = subprocess.run([str(SCRIPTS / "gpu-check"), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    out = done.stdout
    assert "missing prerequisites (nothing was run)" in out and "nvidia-smi / the NVIDIA driver" not in out
    assert "driver supports CUDA 12.4" in out
    if importlib.util.find_spec("cupy") is None:
        assert "python package 'cupy'" in out
    assert "== [1/2]" not in out and not (tmp_path / "out" / "results").exists()
