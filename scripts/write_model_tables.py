#!/usr/bin/env python3
"""Count the goal shape for every CUDA C decode variant and write the model's tables where the docs quote them:
`python scripts/write_model_tables.py` (about a minute and a half on 2 cores; `--tables-only` rewrites the tables
from the stored counts in seconds).

The goal shape (64 x 4096 tokens, 32/8 heads, head dim 128, fp16, block size 16; the blocks of one sequence counted
and scaled x64) is counted once per variant and device (the L2 size differs) into docs/model-goal-shape.json: each
kernel's counts, grid, block, census (occupancy, loads in flight read from its SASS) and FLOPs. The tables are the
model (sandbox.analysis.model.predict) applied to those counts, written between the markers

    <!-- model-table: NAME -->  ...  <!-- /model-table -->

in README.md (NAME "readme", "readme-check") and docs/performance-model.md ("goal-shape", "devices", "model-check").
"model-check" and "readme-check" model the default model-check table's rows (sandbox/analysis/model_check.csv).
tests/test_model_tables.py holds every marked table equal to the model applied to the stored counts (and the
device table, and model-check's rows), and the stored censuses equal to what the kernels compile to now, so a
change to the model or to a kernel's code shows as a failing test until this runs.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox.analysis import gpus, model, model_check as MC, sensitivity  # noqa: E402
from sandbox.analysis.traffic import metrics as M, variant as V  # noqa: E402
from sandbox.commands.model_check import model_us  # noqa: E402
from sandbox.commands.traffic import problem_for  # noqa: E402
from sandbox.sweep import shapes  # noqa: E402
from sandbox.variant import registry  # noqa: E402

COUNTS = ROOT / "docs" / "model-goal-shape.json"
SHAPE, BLOCK_SIZE, DEVICES = "64x4096x32/8x128xfp16", 16, ("h200", "h100")
CENSUS = ("registers", "blocks_per_sm", "loads_in_flight", "loads_per_wait", "loads_in_flight_source")
_MARK = re.compile(r"(<!-- model-table: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /model-table -->)", re.S)


def count() -> dict:
    """{device: {variant: stored result}} at the goal shape (sites left out)."""
    problem = problem_for(shapes.parse_any(SHAPE), BLOCK_SIZE, seed=0)
    out = {}
    for device in DEVICES:
        out[device] = {}
        for name in registry.variants("cupy"):
            r = V.traffic(name, problem, device, sample_seqs=1)
            print(f"{device} {name}: {r['model']['time_us']:.1f} us", flush=True)
            out[device][name] = dict(
                ideal_bytes=r["ideal_bytes"], metrics=r["metrics"],
                kernels=[dict(name=k["name"], grid=list(k["grid"]), block=list(k["block"]), metrics=k["metrics"],
                              flops=k["flops"], **{c: k.get(c) for c in CENSUS}) for k in r["kernels"]])
    return out


def modelled(stored: dict, device: str) -> dict:
    """The model of one stored result on `device`: predict()'s dict."""
    return model.predict(sensitivity.kernels_of(stored), device)


def rows(counts: dict, device: str) -> list[dict]:
    out = []
    for name, stored in counts[device].items():
        m = modelled(stored, device)
        dram = stored["metrics"][M.DRAM_READ] + stored["metrics"][M.DRAM_WRITE]
        main = max(m["kernels"], key=lambda k: k["time_us"])
        out.append(dict(variant=name, over_ideal=dram / stored["ideal_bytes"], time_us=m["time_us"],
                        nominal=m["fraction_of_dram_bw"], achievable=m["fraction_of_achievable"], bound=m["bound"],
                        loads=f"{main['loads_in_flight']} / {main['loads_per_wait']:.2f}"))
    return sorted(out, key=lambda r: r["time_us"])


def readme_table(counts: dict) -> str:
    h200, h100 = ({r["variant"]: r for r in rows(counts, d)} for d in DEVICES)
    lines = ["| variant | DRAM / ideal | loads (SASS) | H200 us | % nominal / achievable | H100 us | binds |",
             "|---|---|---|---|---|---|---|"]
    for name, r in h200.items():
        lines.append(f"| {name} | {r['over_ideal']:.3f} | {r['loads']} | {r['time_us']:.0f} | "
                     f"{r['nominal']:.1%} / {r['achievable']:.1%} | {h100[name]['time_us']:.0f} | {r['bound']} |")
    return "\n".join(lines) + "\n"


def goal_table(counts: dict) -> str:
    lines = ["| device | variant | DRAM / ideal | loads in flight: back to back / per wait | modelled us "
             "| % of nominal DRAM bandwidth | % of achievable (read stream) | binding level |",
             "|---|---|---|---|---|---|---|---|"]
    for device in DEVICES:
        for r in rows(counts, device):
            lines.append(f"| {gpus.get(device).name} | `{r['variant']}` | {r['over_ideal']:.3f} | {r['loads']} | "
                         f"{r['time_us']:.1f} | {r['nominal']:.1%} | {r['achievable']:.1%} | {r['bound']} |")
    return "\n".join(lines) + "\n"


def devices_table(counts: dict) -> str:
    """The device table's figures, one column per --device name (sources: each entry's `sources`)."""
    gs = [gpus.get(n) for n in gpus.NAMES]
    figures = [("architecture", lambda g: g.arch), ("SMs", lambda g: str(g.sms)),
               ("boost clock", lambda g: f"{g.clock_hz / 1e9:.3g} GHz"),
               ("DRAM nominal", lambda g: f"{g.dram_bytes_per_s / 1e12:.3g} TB/s"),
               ("read stream (measured; the model's ceiling)", lambda g: f"{g.read_bytes_per_s / 1e12:.3g} TB/s"),
               ("copy stream (measured)", lambda g: f"{g.copy_bytes_per_s / 1e12:.3g} TB/s"),
               ("L2 size, bandwidth", lambda g: f"{g.l2_bytes / gpus.MIB:.0f} MiB, {g.l2_bytes_per_s / 1e12:.1f} TB/s"),
               ("DRAM / L2 latency (pointer chase)", lambda g: f"{g.dram_latency_s * 1e9:.0f} / "
                                                               f"{g.l2_latency_s * 1e9:.0f} ns"),
               ("queueing, block overhead (fitted)", lambda g: f"{g.queue_latency_s * 1e9:.1f} ns, "
                                                               f"{g.block_overhead_s * 1e9:.0f} ns"),
               ("block launch rate", lambda g: f"{g.block_rate_per_s / 1e9:.2f} G/s"),
               ("launch, in a graph", lambda g: f"{g.launch_s * 1e6:.2f} us, {g.graph_launch_s * 1e6:.1f} us"),
               ("FP32 / tensor (fp16 dense)", lambda g: f"{g.fp32_flops_per_s / 1e12:.1f} / "
                                                        f"{g.tensor_flops_per_s / 1e12:.0f} TFLOP/s")]
    lines = ["| | " + " | ".join(f"`{n}` {g.name}" for n, g in zip(gpus.NAMES, gs)) + " |",
             "|---" * (len(gs) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(value(g) for g in gs) + " |" for label, value in figures]
    return "\n".join(lines) + "\n"


def check_rows(table=None) -> list[dict]:
    """model-check's points over the default table (sandbox/commands/model_check.py's model_us per row)."""
    out = []
    for row in MC.read_table(table or MC.DEFAULT_TABLE):
        modelled_us = model_us(row)
        out.append(dict(row.as_dict(), model_us=modelled_us, error=MC.error(modelled_us, row.measured_us)))
    return out


def check_table(points: list[dict]) -> str:
    lines = ["| variant | device | shape | bs | config | measured us | model us | error |",
             "|---|---|---|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| `{p['variant']}` | {p['device']} | {p['shape']} | {p['block_size'] or '-'} | "
                     f"{p['config'] or '-'} | {p['measured_us']:.1f} | {p['model_us']:.1f} | {p['error']:+.1%} |")
    micro = MC.median_abs_error([p for p in points if p["variant"].startswith(MC.MICRO_PREFIX)])
    every = MC.median_abs_error(points)
    lines.append(f"\nMedian |error|: {micro:.1%} over the micro rows, {every:.1%} over every row.")
    return "\n".join(lines) + "\n"


def check_line(points: list[dict]) -> str:
    micro = [p for p in points if p["variant"].startswith(MC.MICRO_PREFIX)]
    decode = [p for p in points if p not in micro]
    return (f"`python -m sandbox model-check`: median |error| {MC.median_abs_error(micro):.1%} over "
            f"{len(micro)} published stream measurements (GH200, H100 PCIe), {MC.median_abs_error(decode):.1%} "
            f"over {len(decode)} paged-decode ones of another kernel (FA2, H100).\n")


TABLES = {"readme": readme_table, "goal-shape": goal_table, "devices": devices_table}
CHECK_TABLES = {"model-check": check_table, "readme-check": check_line}
PAGES = (ROOT / "README.md", ROOT / "docs" / "performance-model.md")


def rewrite(text: str, counts: dict, points: list[dict]) -> str:
    def table(m):
        name = m.group("name")
        body = CHECK_TABLES[name](points) if name in CHECK_TABLES else TABLES[name](counts)
        return m.group(1) + body + m.group(4)
    return _MARK.sub(table, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables-only", action="store_true", help="rewrite the tables from the stored counts")
    args = parser.parse_args()
    if not args.tables_only:
        COUNTS.write_text(json.dumps(count(), indent=0, sort_keys=True) + "\n")
    counts = json.loads(COUNTS.read_text())
    points = check_rows()
    for page in PAGES:
        page.write_text(rewrite(page.read_text(), counts, points))
        print(f"wrote the tables of {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
