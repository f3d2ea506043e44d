"""Nsight Compute beside the CPU's traffic counts, on a GPU: scripts/gpu-check's third step.

    python -m sandbox.analysis.traffic.ncu OUTDIR [--ncu PATH] [--timeout S]

1. counts POINTS on the CPU executor (sandbox.traffic, the model for the H200);
2. runs `ncu --csv --print-units base --clock-control none --metrics NCU_METRICS --log-file OUTDIR/ncu.csv
   python -m sandbox.analysis.traffic.ncu --launch`, which launches the same points once each on the GPU;
3. prints, per kernel, every metric counted here beside the hardware's, and the modelled time beside the
   measured one (gpu__time_duration.sum); ncu-compare.txt in OUTDIR keeps the table.
Exit 0 when it ran; 3 when ncu or the GPU is missing (nothing run); 1 when the profile could not be read.

ncu's defaults kept: kernel replay flushes the caches before each kernel (so a split-KV reduce reads the
partition kernel's output from DRAM, where the model's L2 still holds it). The clocks are left free
(--clock-control none): the model uses the boost clock.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import sandbox
from sandbox.commands.traffic import problem_for
from sandbox.devices.backends import gpu_present
from sandbox.sweep.shapes import parse_shape
from sandbox.variant import runner

from .metrics import METRICS

SHAPE = "16x2048x32/8x128xfp16"   # 256 MiB of K/V: 4x the H200's L2, counted here in seconds
POINTS = (("cupy.rows", 16), ("cupy.gqa", 16), ("cupy.v1", 16), ("cupy.rows", 1))
TIME = "gpu__time_duration.sum"
# Our metrics Nsight Compute has under the same names (the tensor-core counts are the sandbox's own).
NCU_METRICS = tuple(m for m in METRICS if not m.startswith("sandbox__") and "pipe_tensor" not in m) + (TIME,)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def ncu_command(ncu: str, python: str, log: Path) -> list[str]:
    return [ncu, "--csv", "--print-units", "base", "--clock-control", "none", "--metrics", ",".join(NCU_METRICS),
            "--log-file", str(log), python, "-m", "sandbox.analysis.traffic.ncu", "--launch"]


def value(text: str, unit: str) -> float:
    """A metric value as ncu prints it ("1,073,741,824", unit "byte" / "Kbyte" / "usecond") in base units
    (bytes, nanoseconds, counts)."""
    number = float(text.replace(",", "").strip() or "nan")
    unit = unit.strip()
    if unit in _TIME_NS:
        return number * _TIME_NS[unit]
    m = re.fullmatch(r"([KMGT]?)(byte|sector|inst|request|wavefront)s?(/second)?", unit)
    return number * _SCALE[m.group(1)] if m else number


def parse_csv(text: str) -> list[dict]:
    """Kernels of an `ncu --csv` log, in profile order: [{"id", "kernel", "metrics": {name: value}}].

    Reads both of ncu's layouts: the details page (one row per metric: "ID", "Kernel Name", ...,
    "Metric Name", "Metric Unit", "Metric Value") and the raw page (one row per kernel, a column per
    metric, units on the second row). Lines ncu adds around the table (==PROF==, the application's own
    output) are skipped.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, body = rows[0], rows[1:]
    kernels: dict[str, dict] = {}
    if "Metric Name" in header:
        col = {name: header.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
        for row in body:
            if len(row) != len(header) or row == header:
                continue
            k = kernels.setdefault(row[col["ID"]], dict(id=int(row[col["ID"]]), kernel=row[col["Kernel Name"]],
                                                        metrics={}))
            k["metrics"][row[col["Metric Name"]]] = value(row[col["Metric Value"]], row[col["Metric Unit"]])
    else:
        units = body[0] if body and not body[0][header.index("ID")].strip().isdigit() else [""] * len(header)
        for row in body:
            if row is units or len(row) != len(header):
                continue
            metrics = {name: value(v, u) for name, v, u in zip(header, row, units) if name in NCU_METRICS}
            kernels[row[header.index("ID")]] = dict(id=int(row[header.index("ID")]),
                                                    kernel=row[header.index("Kernel Name")], metrics=metrics)
    return sorted(kernels.values(), key=lambda k: k["id"])


def kernel_key(name: str) -> str:
    """"void pa::paged_attention_reduce<128, __half>(float *, ...)" -> "pa::paged_attention_reduce<128,__half>"."""
    name = re.sub(r"^\s*void\s+", "", name)
    depth = 0
    for i, ch in enumerate(name):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    return re.sub(r"\s+", "", name)


def match(profiled: list[dict], expected: list[str]) -> list[dict | None]:
    """For each expected kernel (launch order), the next profiled kernel of that name (None: not profiled)."""
    out, start = [], 0
    for name in expected:
        key = kernel_key(name)
        found = next((i for i in range(start, len(profiled)) if kernel_key(profiled[i]["kernel"]) == key), None)
        out.append(None if found is None else profiled[found])
        start = start if found is None else found + 1
    return out


def compare_lines(label: str, ours: dict, theirs: dict | None, model_us: float) -> list[str]:
    """One kernel: each metric counted here beside ncu's, and the modelled time beside the measured."""
    out = [f"-- {label}: {ours['name']}"]
    if theirs is None:
        return out + ["   not in the ncu profile"]
    for name in NCU_METRICS:
        if name == TIME:
            continue
        mine, hw = ours["metrics"].get(name, 0), theirs["metrics"].get(name)
        ratio = "" if hw is None or hw == 0 else f"{mine / hw:8.3f}"
        out.append(f"   {name:62s} {mine:>16,} {'-' if hw is None else f'{hw:>16,.0f}'} {ratio}")
    measured = theirs["metrics"].get(TIME)
    if measured:
        out.append(f"   time: model {model_us:.1f} us, measured {measured / 1e3:.1f} us (model / measured "
                   f"{model_us / (measured / 1e3):.2f})")
    return out


def _problems():
    shape = parse_shape(SHAPE)
    return {bs: problem_for(shape, bs, 0) for bs in sorted({bs for _, bs in POINTS})}


def launch_on_gpu() -> int:
    """The profiled process: every point launched once on the GPU, in POINTS order."""
    problems = _problems()
    for name, bs in POINTS:
        prepared, _ = runner.prepare(name, problems[bs], "gpu")
        prepared.launch()
        prepared.result()  # synchronises
        print(f"launched {name} block size {bs}", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.analysis.traffic.ncu", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ncu", default=os.environ.get("NCU") or shutil.which("ncu"))
    parser.add_argument("--timeout", type=float, default=100.0, help="seconds for the ncu run (default 100)")
    args = parser.parse_args(argv)
    if args.launch:
        return launch_on_gpu()
    if not args.outdir:
        parser.error("OUTDIR is needed")
    if not args.ncu:
        print("ncu-check: ncu (Nsight Compute) not found on PATH (set NCU=...): nothing was run")
        return 3
    if not gpu_present():
        print("ncu-check: no GPU: Nsight Compute reads a GPU's counters; nothing was run")
        return 3

    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    problems = _problems()
    ours = [sandbox.traffic(name, problems[bs]) for name, bs in POINTS]
    log = outdir / "ncu.csv"
    try:
        done = subprocess.run(ncu_command(args.ncu, sys.executable, log), capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"ncu-check: ncu did not finish within {args.timeout:g} s")
        return 1
    profiled = parse_csv(log.read_text(errors="replace")) if log.exists() else []
    if not profiled:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        print(f"ncu-check: could not read a profile from {log} (ncu exit {done.returncode}):\n{tail}")
        return 1
    expected = [k["name"] for r in ours for k in r["kernels"]]
    matched = iter(match(profiled, expected))
    lines = [f"ncu-check: {SHAPE}; ours counted on the CPU (H200 model), ncu measured on this GPU; "
             f"columns: metric, ours, ncu, ours / ncu"]
    for (name, bs), result in zip(POINTS, ours):
        for k in result["kernels"]:
            model_us = next(m["time_us"] for m in result["model"]["kernels"] if m["name"] == k["name"])
            lines += compare_lines(f"{name} block size {bs}", k, next(matched), model_us)
    text = "\n".join(lines)
    print(text)
    (outdir / "ncu-compare.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
