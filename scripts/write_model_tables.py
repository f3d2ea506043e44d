#!/usr/bin/env python3
"""Count the goal shape for every CUDA C decode variant and write the model's tables where the docs quote them:
`python scripts/write_model_tables.py` (about a minute and a half on 2 cores; `--tables-only` rewrites the tables
from the stored counts in seconds).

The goal shape (64 x 4096 tokens, 32/8 heads, head dim 128, fp16, block size 16; the blocks of one sequence counted
and scaled x64) is counted once per variant and device (the L2 size differs) into docs/model-goal-shape.json: each
kernel's counts, grid, block, census (occupancy, loads in flight read from its SASS) and FLOPs. The tables are the
model (sandbox.analysis.model.predict) applied to those counts, written between the markers

    <!-- model-table: NAME -->  ...  <!-- /model-table -->

in README.md (NAME "readme", "readme-check"), docs/performance-model.md ("goal-shape", "devices", "model-check") and
docs/peers.md ("peers-goal-shape", "peers-published").
"model-check" and "readme-check" model the default model-check table's rows (sandbox/analysis/model_check.csv).
The peer families' variants (Family.peer: flashinfer.decode) are counted into docs/peers-goal-shape.json, at the
goal shape on the H200 and at the shapes of their project's published measurements (published(): the peers' rows
of model_check.csv) on its device;
without the peer's wheel (or nvcc for its census) the stored peer counts stay as they are, and the script says so.
tests/analysis/test_model_tables.py holds every marked table equal to the model applied to the stored counts (and the
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
PEER_COUNTS = ROOT / "docs" / "peers-goal-shape.json"
# FlashInfer's published batch-decode utilisation (https://flashinfer.ai/2024/02/02/introduce-flashinfer.html, H100
# SXM, CUDA-core path; read from its plots): shape -> share of DRAM bandwidth. docs/peers.md sets the model beside it.
PUBLISHED_DEVICE = "h100"  # the device of the peers' published rows in model_check.csv (FlashInfer's blog: H100 SXM)
PEER_COMPARED = ("cupy.rows", "cupy.gqa", "cupy.v2")  # our variants docs/peers.md sets beside the peer
SHAPE, BLOCK_SIZE, DEVICES = "64x4096x32/8x128xfp16", 16, ("h200", "h100")
CENSUS = ("registers", "blocks_per_sm", "loads_in_flight", "loads_per_wait", "loads_in_flight_source")
_MARK = re.compile(r"(<!-- model-table: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /model-table -->)", re.S)


def _stored(name: str, problem, device: str) -> dict:
    """One count of `name` (one sequence counted and scaled), as the stores keep it (sites left out)."""
    r = V.traffic(name, problem, device, sample_seqs=1)
    print(f"{device} {name} {problem.num_seqs} seqs: {r['model']['time_us']:.1f} us", flush=True)
    return dict(ideal_bytes=r["ideal_bytes"], metrics=r["metrics"],
                kernels=[dict(name=k["name"], grid=list(k["grid"]), block=list(k["block"]), metrics=k["metrics"],
                              flops=k["flops"], **{c: k.get(c) for c in CENSUS}) for k in r["kernels"]])


def count() -> dict:
    """{device: {variant: stored result}} at the goal shape."""
    problem = problem_for(shapes.parse_any(SHAPE), BLOCK_SIZE, seed=0)
    return {device: {name: _stored(name, problem, device) for name in registry.variants("cupy")}
            for device in DEVICES}


def peer_variants() -> list[str]:
    """The variants of the peer families (Family.peer), in registry order."""
    return [n for f in registry.FAMILIES if registry.family(f).peer is not None for n in registry.variants(f)]


def peers_missing() -> str | None:
    """Why the peers cannot be counted here (a wheel missing), or None."""
    for f in registry.FAMILIES:
        missing = registry.family(f).why_unavailable()
        if missing:
            return f"{f}: {missing}"
    return None


def published() -> list:
    """The default model-check table's rows of peer variants on PUBLISHED_DEVICE (a peer project's own figures)."""
    peers = set(peer_variants())
    return [r for r in MC.read_table() if r.variant in peers and r.device == PUBLISHED_DEVICE]


def count_peers() -> dict:
    """{"goal": {variant: stored} on the H200 at the goal shape, "published": {variant: {shape: stored}} on
    PUBLISHED_DEVICE}."""
    goal = problem_for(shapes.parse_any(SHAPE), BLOCK_SIZE, seed=0)
    published_ = {r.shape: problem_for(shapes.parse_any(r.shape), r.block_size, seed=0) for r in published()}
    return dict(goal={name: _stored(name, goal, "h200") for name in peer_variants()},
                published={name: {shape: _stored(name, p, PUBLISHED_DEVICE) for shape, p in published_.items()}
                           for name in peer_variants()})


def modelled(stored: dict, device: str) -> dict:
    """The model of one stored result on `device`: predict()'s dict."""
    return model.predict(sensitivity.kernels_of(stored), device)


def row(name: str, stored: dict, device: str) -> dict:
    """One stored count modelled on `device`: the figures the tables quote."""
    m = modelled(stored, device)
    dram = stored["metrics"][M.DRAM_READ] + stored["metrics"][M.DRAM_WRITE]
    main = max(m["kernels"], key=lambda k: k["time_us"])
    return dict(variant=name, over_ideal=dram / stored["ideal_bytes"], time_us=m["time_us"],
                nominal=m["fraction_of_dram_bw"], achievable=m["fraction_of_achievable"], bound=m["bound"],
                loads=f"{main['loads_in_flight']} / {main['loads_per_wait']:.2f}",
                registers=" / ".join(f"{k['registers']} ({k['blocks_per_sm']}/SM)" for k in stored["kernels"]),
                grids=" + ".join("x".join(str(g) for g in k["grid"] if g > 1) or "1" for k in stored["kernels"]))


def rows(counts: dict, device: str) -> list[dict]:
    return sorted((row(name, stored, device) for name, stored in counts[device].items()), key=lambda r: r["time_us"])


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


def peers_goal_table(counts: dict, peer_counts: dict) -> str:
    """docs/peers.md: the peers beside PEER_COMPARED at the goal shape on the H200."""
    found = [row(n, st, "h200") for n, st in peer_counts["goal"].items()]
    found += [row(n, counts["h200"][n], "h200") for n in PEER_COMPARED]
    lines = ["| variant | DRAM / ideal | loads in flight (SASS): back to back / per wait | registers (blocks/SM) "
             "per kernel | grid per kernel | modelled us | % nominal / achievable | binding level |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(found, key=lambda r: r["time_us"]):
        lines.append(f"| `{r['variant']}` | {r['over_ideal']:.3f} | {r['loads']} | {r['registers']} | {r['grids']} | "
                     f"{r['time_us']:.1f} | {r['nominal']:.1%} / {r['achievable']:.1%} | {r['bound']} |")
    return "\n".join(lines) + "\n"


def peers_published_table(counts: dict, peer_counts: dict) -> str:
    """docs/peers.md: the model of each peer at the shapes of its project's published measurements."""
    device = gpus.get(PUBLISHED_DEVICE).name
    lines = [f"| variant | shape ({device}) | published us | modelled us | error | % nominal / achievable | "
             "binding level | grid per kernel | registers (blocks/SM) per kernel | DRAM / ideal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in published():
        if p.variant in peer_counts["published"]:
            r = row(p.variant, peer_counts["published"][p.variant][p.shape], PUBLISHED_DEVICE)
            lines.append(f"| `{p.variant}` | {p.shape} | {p.measured_us:.1f} | {r['time_us']:.1f} | "
                         f"{MC.error(r['time_us'], p.measured_us):+.1%} | {r['nominal']:.1%} / "
                         f"{r['achievable']:.1%} | {r['bound']} | {r['grids']} | {r['registers']} | "
                         f"{r['over_ideal']:.3f} |")
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
    decode = [p for p in points if "nearest variant" in p["source"]]   # FlashInfer's own rows: docs/peers.md
    return (f"`python -m sandbox model-check`: median |error| {MC.median_abs_error(micro):.1%} over "
            f"{len(micro)} published stream measurements (GH200, H100 PCIe), {MC.median_abs_error(decode):.1%} "
            f"over {len(decode)} paged-decode ones of another kernel (FA2, H100).\n")


TABLES = {"readme": readme_table, "goal-shape": goal_table, "devices": devices_table}
CHECK_TABLES = {"model-check": check_table, "readme-check": check_line}
PEER_TABLES = {"peers-goal-shape": peers_goal_table, "peers-published": peers_published_table}
PAGES = (ROOT / "README.md", ROOT / "docs" / "performance-model.md", ROOT / "docs" / "peers.md")


def rewrite(text: str, counts: dict, points: list[dict], peer_counts: dict) -> str:
    def table(m):
        name = m.group("name")
        if name in CHECK_TABLES:
            body = CHECK_TABLES[name](points)
        elif name in PEER_TABLES:
            body = PEER_TABLES[name](counts, peer_counts)
        else:
            body = TABLES[name](counts)
        return m.group(1) + body + m.group(4)
    return _MARK.sub(table, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables-only", action="store_true", help="rewrite the tables from the stored counts")
    parser.add_argument("--peers-only", action="store_true", help="count the peers only (the stored goal-shape "
                        "counts of our variants stay), then rewrite the tables")
    args = parser.parse_args()
    if not args.tables_only and not args.peers_only:
        COUNTS.write_text(json.dumps(count(), indent=0, sort_keys=True) + "\n")
    if not args.tables_only:
        missing = peers_missing()
        if missing:
            print(f"peers not counted ({missing}): {PEER_COUNTS.relative_to(ROOT)} kept as stored")
        else:
            PEER_COUNTS.write_text(json.dumps(count_peers(), indent=0, sort_keys=True) + "\n")
    counts, peer_counts = json.loads(COUNTS.read_text()), json.loads(PEER_COUNTS.read_text())
    points = check_rows()
    for page in PAGES:
        page.write_text(rewrite(page.read_text(), counts, points, peer_counts))
        print(f"wrote the tables of {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
