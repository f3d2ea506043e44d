"""The summary printed at the end of a sweep (and saved as summary.txt): who wins where, what broke, the goals.

On the CPU the variants are ranked by the model (MODEL (H200), not a measurement: sweep/report/model_summary.py) and
the emulation times follow under their own banner; on a GPU the measured times lead, then the measured
time beside the modelled one per point, then the model's ranking."""
from __future__ import annotations

from ...problem import dtypes
from ...variant.registry import labelled
from . import goals as goals_mod
from .mla_summary import mla_table
from .model_summary import measured_vs_model, model_tables
from .text_table import table

CPU_BANNER = "CPU EMULATION: wall-clock times of the Numba simulator / CUDA C executor / NumPy, NOT GPU performance"


def fmt_us(value) -> str:
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f}"
    if value < 1000:
        return f"{value:.1f}"
    return f"{value:.0f}"


def _cell(row, best_key) -> str:
    if row is None:
        return ""
    status = row["status"]
    if status == "ok":
        return fmt_us(row["time_us"]) + ("*" if best_key else "")
    return {"wrong": "WRONG", "error": "ERROR", "unsupported": "-", "skipped": "skip"}[status]


def _shapes(rows):
    return list(dict.fromkeys(r["shape"] for r in rows))


def _block_sizes(rows):
    return sorted({r["block_size"] for r in rows if r["block_size"] is not None})


TWO_KERNEL_NOTE = ("A time is one call of launch(): for two-kernel variants (split-KV partition + reduce) it holds "
                   "both launches and the host gap between them; parts_us / partition_us in sweep.csv hold each "
                   "kernel alone where the variant exposes launch_parts()")


def time_tables(rows) -> list[str]:
    lines = ["Time per call (us, median; * = fastest at that block size; - = unsupported)", TWO_KERNEL_NOTE]
    for shape in _shapes(rows):
        here = [r for r in rows if r["shape"] == shape]
        sizes = _block_sizes(here)
        fastest = {}
        for r in here:
            if r["status"] == "ok" and r["block_size"] is not None:
                b = r["block_size"]
                if b not in fastest or r["time_us"] < fastest[b]["time_us"]:
                    fastest[b] = r
        body = []
        for variant in dict.fromkeys(r["variant"] for r in here):
            mine = [r for r in here if r["variant"] == variant]
            if all(r["status"] == "unsupported" for r in mine) and len(mine) > 1:
                continue  # refused at every block size (q > 1 for a decode-only variant): listed once below
            if mine[0]["block_size"] is None:  # per-shape peer (torch.sdpa): one time for every block size
                body.append([variant, mine[0]["backend"], *[_cell(mine[0], False)] * len(sizes)])
                continue
            by_bs = {r["block_size"]: r for r in mine}
            body.append([labelled(variant), mine[0]["backend"],
                         *[_cell(by_bs.get(b), by_bs.get(b) is not None and fastest.get(b) is by_bs.get(b)) for b in sizes]])
        lines.append(f" shape {shape}")
        lines += table(["variant", "backend", *[f"bs{b}" for b in sizes]], body)
    return lines


def best_table(rows, dense_name: str) -> list[str]:
    body = []
    for shape in _shapes(rows):
        for b in _block_sizes(rows):
            ok = [r for r in rows if r["shape"] == shape and r["block_size"] == b and r["status"] == "ok"]
            if not ok:
                continue
            best = min(ok, key=lambda r: r["time_us"])
            paged = [r for r in ok if r["variant"] != dense_name]
            best_paged = min(paged, key=lambda r: r["time_us"]) if paged else None
            overhead = best_paged["paging_overhead"] if best_paged else None
            frac = best["fraction_of_copy_bw"]
            read = best.get("fraction_of_read_bw")
            body.append([shape, b, best["variant"], fmt_us(best["time_us"]), f"{best['gbps']:.3g}",
                         "-" if frac is None else f"{frac:.1%}", "-" if read is None else f"{read:.1%}",
                         best_paged["variant"] if best_paged else "-",
                         "-" if overhead is None else f"{overhead:.3f}"])
    if not body:
        return ["Best per shape and block size: no correct timed point"]
    return ["Best per shape and block size (GB/s = bytes_moved / time; % of copy and of read bandwidth)",
            *table(["shape", "bs", "fastest", "time_us", "GB/s", "% copy", "% read", "fastest paged",
                    f"paged/{dense_name}"], body)]


def parts_table(rows) -> list[str]:
    """Per-kernel medians of the variants that expose launch_parts(), beside their time per call."""
    with_parts = [r for r in rows if r["status"] == "ok" and r.get("parts_us")]
    if not with_parts:
        return []
    body = [[r["variant"], r["shape"], r["block_size"], fmt_us(r["time_us"]), r["parts_us"]] for r in with_parts]
    return ["Kernels alone (launch_parts; us, median; time/call includes the launch gap)",
            *table(["variant", "shape", "bs", "time/call", "parts (us)"], body)]


def overhead_tables(rows, dense_name: str) -> list[str]:
    with_overhead = [r for r in rows if r["paging_overhead"] is not None]
    if not with_overhead:
        return [f"Paging overhead: not measured ({dense_name} not registered or has no correct point on this backend)"]
    lines = [f"Paging overhead (time / {dense_name} time at the same shape, block size and backend)"]
    for shape in _shapes(with_overhead):
        here = [r for r in with_overhead if r["shape"] == shape]
        sizes = _block_sizes(here)
        body = []
        for variant in dict.fromkeys(r["variant"] for r in here):
            by_bs = {r["block_size"]: r for r in here if r["variant"] == variant}
            body.append([variant, *[f"{by_bs[b]['paging_overhead']:.3f}" if b in by_bs else "" for b in sizes]])
        lines.append(f" shape {shape}")
        lines += table(["variant", *[f"bs{b}" for b in sizes]], body)
    return lines


# (cascade variant, the variant it is measured against): the same kernel family without the shared-prefix pass.
CASCADE_PAIRS = (("cupy.cascade", "cupy.multi"),)


def _int(value, default: int = 0) -> int:
    return default if value in (None, "") else int(value)


def _mb(nbytes) -> str:
    return "-" if nbytes in (None, "") else f"{nbytes / 1e6:.4g}"


def cascade_table(rows, pairs=CASCADE_PAIRS) -> list[str]:
    """For every shared-prefix point: the cascade's time against its non-cascade twin at the same shape, block
    size and backend (speed-up = twin time / cascade time), and the bytes each counts (a prepared object's
    bytes_moved(): the cascade reads each group's shared prefix once)."""
    shared = [r for r in rows if _int(r.get("group_size")) > 0 and r["block_size"] is not None]
    lines = []
    for cascade, twin in pairs:
        points = {}
        for r in shared:
            if r["variant"] in (cascade, twin):
                points.setdefault((r["shape"], r["block_size"], r["backend"]), {})[r["variant"]] = r
        body = []
        for (shape, bs, backend), pair in points.items():
            c, t = pair.get(cascade), pair.get(twin)
            c_ok, t_ok = (x is not None and x["status"] == "ok" for x in (c, t))
            speedup = f"{t['time_us'] / c['time_us']:.2f}x" if c_ok and t_ok else "-"
            read = f"{c['bytes'] / t['bytes']:.2f}" if c_ok and t_ok and t["bytes"] else "-"
            body.append([shape, bs, backend, fmt_us(t["time_us"]) if t_ok else (_cell(t, False) or "absent"),
                         fmt_us(c["time_us"]) if c_ok else (_cell(c, False) or "absent"), speedup,
                         _mb(t["bytes"]) if t_ok else "-", _mb(c["bytes"]) if c_ok else "-", read])
        if body:
            lines += [f"Cascade on shared prompts: {cascade} vs {twin} at the same point (speed-up = {twin} time / "
                      f"{cascade} time; MB = the bytes each counts: the cascade reads each group's prompt once)",
                      *table(["shape", "bs", "backend", f"{twin} us", f"{cascade} us", "speed-up", f"{twin} MB",
                              f"{cascade} MB", "bytes ratio"], body)]
    return lines


def failure_lines(rows) -> list[str]:
    bad = [r for r in rows if r["status"] in ("wrong", "error")]
    if not bad:
        return ["Correctness: every timed point matched the reference (wrong points: 0)"]
    lines = ["!" * 78, f"!!! {len(bad)} POINT(S) WRONG OR FAILED: their times are not recorded", "!" * 78]
    for r in bad:
        lines.append(f"  {r['status'].upper():5} {r['variant']} [{r['backend']}] {r['shape']} bs={r['block_size']}: "
                     f"{(r['note'] or '')[:300]}")
    return lines


def unsupported_lines(rows) -> list[str]:
    reasons = {}
    for r in rows:
        if r["status"] == "unsupported":
            reasons.setdefault((r["variant"], r["note"]), []).append(r["block_size"])
    if not reasons:
        return []
    lines = ["Unsupported points (declared limits, or not runnable here)"]
    for (variant, note), sizes in reasons.items():
        shown = sorted({s for s in sizes if s is not None})
        lines.append(f"  {variant} x{len(sizes)}{' at bs ' + ','.join(map(str, shown)) if shown else ''}: {note[:160]}")
    return lines


def default_precision(row) -> bool:
    """A resources.csv row of the float16 kernels (rows without dtype columns are: older runs)."""
    dtype = row.get("dtype") or "float16"
    return dtype == "float16" and (row.get("kv_dtype") or dtype) == dtype


def _resource_cell(r) -> str:
    if r.get("registers") in (None, ""):
        return "-" if r.get("skipped") else ("ERR" if r.get("error") else "")
    spills = int(r.get("spill_stores") or 0) + int(r.get("spill_loads") or 0)
    occupancy = r.get("occupancy")
    cell = f"{int(r['registers'])}r"
    if occupancy not in (None, ""):
        cell += f"/{float(occupancy):.0%}"
    return cell + (f" spill{spills}B" if spills else "")


def resource_table(resource_rows) -> list[str]:
    """registers / theoretical occupancy per variant and block size (+ spill bytes when any), float16; then the
    other precisions compiled (bfloat16, an e4m3 cache) beside float16 at the block sizes they were compiled at."""
    every = [r for r in resource_rows if r.get("registers") not in (None, "")]
    rows = [r for r in every if default_precision(r)]
    if not rows:
        return [f"Static resources: {len(resource_rows)} rows in resources.csv, none with float16 register counts"]
    sizes = sorted({int(r["block_size"]) for r in rows})
    body = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        cells = {int(r["block_size"]): _resource_cell(r) for r in rows if r["variant"] == variant}
        body.append([variant, *[cells.get(b, "") for b in sizes]])
    lines = ["Static resources (sm_90, head dim 128, float16): registers/theoretical occupancy; resources.csv",
             *table(["variant", *[f"bs{b}" for b in sizes]], body)]
    others = [r for r in resource_rows if not default_precision(r)]
    if others:
        def label(r):
            dtype = r.get("dtype") or "float16"
            kv = r.get("kv_dtype") or dtype
            return dtypes.short(dtype) + (f":{dtypes.short(kv)}" if kv != dtype else "")

        points = list(dict.fromkeys((label(r), int(r["block_size"])) for r in others))
        by = {(r["variant"], label(r), int(r["block_size"])): r for r in resource_rows}
        body = []
        for variant in dict.fromkeys(r["variant"] for r in others):
            cells = [_resource_cell(by[(variant, p, b)]) if (variant, p, b) in by else "" for p, b in points]
            base = {b for _, b in points}
            body.append([variant, *[_resource_cell(by[(variant, "fp16", b)]) if (variant, "fp16", b) in by else ""
                                    for b in sorted(base)], *cells])
        lines += ["Other precisions (sm_90, head dim 128; - = not supported or not reported)",
                  *table(["variant", *[f"fp16 bs{b}" for b in sorted({b for _, b in points})],
                          *[f"{p} bs{b}" for p, b in points]], body)]
    return lines


def without_ok_lines(without_ok) -> list[str]:
    if not without_ok:
        return []
    return [f"!!! NO CORRECT POINT for {len(without_ok)} selected variant(s) (every point unsupported; "
            f"the run fails): {', '.join(without_ok)}"]


INTERRUPTED = "INTERRUPTED: the run was stopped (Ctrl-C / SIGINT) before every point ran; the rows above are partial"


EMULATION_HEADING = ("CPU emulation times (wall clock of the simulator / executor / NumPy: they check and order nothing "
                     "about a GPU; the ranking above is the model's)")


def render(rows, copy, on_gpu: bool, gpu_info, goal_report, dense_name: str, resource_rows=(), read=None,
           interrupted: bool = False, without_ok=(), model_device: str = "h200") -> str:
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "wrong", "error", "unsupported", "skipped")}
    if on_gpu:
        head = f"Sweep summary: GPU {(gpu_info or {}).get('name', '?')} (CUDA events, L2 flushed before each call, median)"
    else:
        head = f"Sweep summary: {CPU_BANNER}"
    lines = ["=" * len(head), head, "=" * len(head)]
    if interrupted:
        lines.append(INTERRUPTED)
    if copy is not None:
        where = "device-to-device" if on_gpu else "host memory (CPU)"
        lines.append(f"Copy bandwidth ({where}, read+write): {copy.gbps:.1f} GB/s")
    if read is not None:
        where = "streaming-read kernel" if on_gpu else "host memory (CPU)"
        lines.append(f"Read bandwidth ({where}): {read.gbps:.1f} GB/s")
    lines.append("Points: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    model = model_tables(rows, model_device)
    timed = [time_tables(rows), parts_table(rows), best_table(rows, dense_name), mla_table(rows), cascade_table(rows),
             overhead_tables(rows, dense_name)]
    if on_gpu:
        ordered = [*timed, measured_vs_model(rows), model]
    else:  # the model ranks; the emulation times stay, after it
        ordered = [model, [EMULATION_HEADING] if model else [], *timed]
    for section in (*ordered, unsupported_lines(rows), failure_lines(rows), without_ok_lines(without_ok),
                    goals_mod.render(goal_report)):
        if section:
            lines += ["", *section]
    if resource_rows:
        lines += ["", *resource_table(resource_rows)]
    if not on_gpu:
        lines += ["", CPU_BANNER]
    if interrupted:
        lines += ["", INTERRUPTED]
    return "\n".join(lines)
