"""meta.json: what a run was measured on, with what, from which commit, and how."""
from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from . import device

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("numpy", "numba", "numba-cuda", "cuda-bindings", "cuda-python", "cupy", "cupy-cuda12x", "cupy-cuda13x",
            "torch", "matplotlib", "tqdm", "hypothesis", "pytest", "pytest-benchmark")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict:
    """Installed version of each package in PACKAGES (None when absent)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(repo: Path = REPO) -> dict:
    """{"commit": sha or None, "dirty": bool or None} of the checkout the sandbox runs from."""
    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def command_line(argv: list[str] | None = None) -> str:
    """How this run was started, as a person would type it."""
    if argv is not None:
        return " ".join(["python -m sandbox", *argv])
    if sys.argv and sys.argv[0].endswith(("sandbox/__main__.py", "sandbox/cli.py")):
        return " ".join(["python -m sandbox", *sys.argv[1:]])
    return " ".join(sys.argv)


def collect(argv: list[str], seed: int, on_gpu: bool) -> dict:
    """The run's context, written at the start (and completed at the end by the sweep)."""
    gpu = device.device_info() if on_gpu else {}
    if gpu:
        gpu["runtime_version"] = device.runtime_version()
    return {
        "kind": "sweep",
        "timing": "cuda-events" if on_gpu else "cpu-emulation",
        "gpu": gpu or None,
        "cpu": {"model": cpu_model(), "cores": os.cpu_count()},
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "git": git_state(),
        "command": command_line(argv),
        "seed": seed,
        "env": {k: os.environ[k] for k in ("NUMBA_ENABLE_CUDASIM", "CUDA_VISIBLE_DEVICES", "SANDBOX_FORCE_NO_GPU")
                if k in os.environ},
        "start_utc": utc_now(),
    }


def write(path: Path, meta: dict) -> None:
    """Write atomically (a crash never leaves half a meta.json)."""
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    os.replace(tmp, path)
