"""The three H200 goals, checked from a sweep's rows (only GPU points count; on the CPU: not measured).

1. copy_bw_fraction: the best paged variant at 64x4096x32/8x128xfp16, block size 16, reaches >= 85%
   of the measured device bandwidth: the stricter (lower fraction) of the copy and the streaming-read
   ceilings measured in the same run.
2. paging_overhead: at every block size >= 16 of every GPU decode shape, best paged time / dense time <= 1.05.
3. block_size_8_vs_128: at every GPU decode shape, best paged time at block size 8 <= 1.10 x at block size 128.
"Decode shape": one query token per sequence over private contexts (any dtype, cache dtype or option); a
shared-prefix shape is left out (a cascade reads less than the dense baseline: not a paging overhead),
so is a multi-query one (the dense baseline is decode-only).
"Paged" means a registry variant other than the dense baseline (and not torch.sdpa).

Every goal also gets a modelled status beside the measured one (modelled_status, modelled, modelled_passed,
modelled_detail), from the traffic columns of the correct points of any backend (sweep/measure/traffic_columns.py):
the same three checks on modelled times, the first against the model's fraction of the device's achievable
DRAM bandwidth (its measured read stream, sandbox.analysis.gpus), as the measured goal is stated against the
bandwidth measured in the same run; the fraction of the nominal (datasheet) bandwidth is given beside it. A model is not a measurement: "not measured (no GPU)" stays until a GPU measures the goal.
"""
from __future__ import annotations

import json

from ..shapes import GOAL_SHAPE

COPY_BW_FRACTION = 0.85
PAGING_OVERHEAD = 1.05
BS8_VS_128 = 1.10

TEXT = {
    "copy_bw_fraction": f"best paged variant at {GOAL_SHAPE}, block size 16: >= {COPY_BW_FRACTION:.0%} of the copy "
                        f"and the read bandwidth (the stricter)",
    "paging_overhead": f"paging overhead (best paged / dense) at block size >= 16, decode shapes: "
                       f"<= {PAGING_OVERHEAD - 1:.0%}",
    "block_size_8_vs_128": f"best paged at block size 8 within {BS8_VS_128 - 1:.0%} of block size 128, decode shapes",
}


def _check(goal_id, threshold, measured=None, passed=None, detail="", status=None) -> dict:
    if status is None:
        status = "PASS" if passed else "FAIL"
    return dict(id=goal_id, goal=TEXT[goal_id], threshold=threshold, measured=measured, passed=passed,
                status=status, detail=detail)


def decode_shape(row) -> bool:
    """One query token per sequence, private contexts, not MLA (rows of runs older than these columns: yes)."""
    return (row.get("query_len") in (None, "", 1, "1") and row.get("group_size") in (None, "", 0, "0")
            and row.get("problem") in (None, "", "decode"))


def best_paged(rows, dense_name: str) -> dict:
    """{(shape, block_size): fastest correct paged GPU row}."""
    best = {}
    for r in rows:
        if (r["status"] != "ok" or r["backend"] != "gpu" or r["block_size"] is None or r["variant"] == dense_name
                or r["family"] == "torch" or r["variant"].startswith("wrong.")):
            continue
        key = (r["shape"], r["block_size"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    return best


def evaluate(rows, on_gpu: bool, dense_name: str) -> dict:
    """{"on_gpu", "goal_shape", "checks": [{id, goal, threshold, measured, passed, status, detail,
    modelled, modelled_passed, modelled_status, modelled_detail}]}."""
    report = _measured(rows, on_gpu, dense_name)
    for check, model in zip(report["checks"], _modelled(rows, dense_name)):
        check.update({"modelled" if k == "measured" else f"modelled_{k}": model[k]
                      for k in ("measured", "passed", "status", "detail")})
    return report


def _measured(rows, on_gpu: bool, dense_name: str) -> dict:
    if not on_gpu:
        return {"on_gpu": False, "goal_shape": GOAL_SHAPE,
                "checks": [_check(g, t, status="not measured (no GPU)")
                           for g, t in (("copy_bw_fraction", COPY_BW_FRACTION), ("paging_overhead", PAGING_OVERHEAD),
                                        ("block_size_8_vs_128", BS8_VS_128))]}
    best = best_paged(rows, dense_name)
    dense = {(r["shape"], r["block_size"]): r for r in rows
             if r["variant"] == dense_name and r["status"] == "ok" and r["backend"] == "gpu"}
    shapes = list(dict.fromkeys(r["shape"] for r in rows if r["backend"] == "gpu" and decode_shape(r)))
    return {"on_gpu": True, "goal_shape": GOAL_SHAPE,
            "checks": [_copy_fraction(best), _overhead(best, dense, shapes, dense_name), _bs8(best, shapes)]}


def _copy_fraction(best) -> dict:
    row = best.get((GOAL_SHAPE, 16))
    if row is None:
        return _check("copy_bw_fraction", COPY_BW_FRACTION, status=f"not measured (no correct paged GPU point at {GOAL_SHAPE}, block size 16)")
    fractions = {name: row.get(f"fraction_of_{name}_bw") for name in ("copy", "read")}
    known = {name: f for name, f in fractions.items() if f is not None}
    if not known:
        return _check("copy_bw_fraction", COPY_BW_FRACTION, status="not measured (copy and read bandwidth unknown)")
    stricter = min(known, key=known.get)
    fraction = known[stricter]
    shown = ", ".join(f"{f:.1%} of {name}" for name, f in known.items())
    missing = "; read bandwidth not measured" if "read" not in known else ""
    return _check("copy_bw_fraction", COPY_BW_FRACTION, round(fraction, 4), fraction >= COPY_BW_FRACTION,
                  f"{row['variant']}: {row['time_us']:.1f} us, {row['gbps']:.0f} GB/s = {shown} "
                  f"(stricter: {stricter}){missing}")


def _overhead(best, dense, shapes, dense_name) -> dict:
    ratios = []
    for shape in shapes:
        for (s, bs), row in sorted(best.items(), key=lambda kv: kv[0][1]):
            if s == shape and bs >= 16 and (s, bs) in dense:
                ratios.append((row["time_us"] / dense[(s, bs)]["time_us"], shape, bs, row["variant"]))
    if not ratios:
        return _check("paging_overhead", PAGING_OVERHEAD,
                      status=f"not measured (no {dense_name} and paged GPU points at block size >= 16)")
    worst = max(ratios)
    detail = "; ".join(f"{shape} bs{bs} {name} {ratio:.3f}" for ratio, shape, bs, name in ratios)
    return _check("paging_overhead", PAGING_OVERHEAD, round(worst[0], 4), worst[0] <= PAGING_OVERHEAD,
                  f"worst {worst[0]:.3f} at {worst[1]} bs{worst[2]} ({worst[3]}); all: {detail}")


def _bs8(best, shapes) -> dict:
    ratios = []
    for shape in shapes:
        if (shape, 8) in best and (shape, 128) in best:
            a, b = best[(shape, 8)], best[(shape, 128)]
            ratios.append((a["time_us"] / b["time_us"], shape, a["variant"], b["variant"]))
    if not ratios:
        return _check("block_size_8_vs_128", BS8_VS_128,
                      status="not measured (no correct paged GPU points at both block sizes 8 and 128)")
    worst = max(ratios)
    detail = "; ".join(f"{shape}: {v8} / {v128} = {ratio:.3f}" for ratio, shape, v8, v128 in ratios)
    return _check("block_size_8_vs_128", BS8_VS_128, round(worst[0], 4), worst[0] <= BS8_VS_128, detail)


# ---------------------------------------------------------------- the same goals, modelled

def _model_rows(rows, dense_name: str):
    """(best paged by modelled time per (shape, block size), the dense baseline's modelled rows, decode shapes)."""
    ok = [r for r in rows if r["status"] == "ok" and r.get("model_time_us") not in (None, "")
          and r["block_size"] is not None]
    best, dense = {}, {}
    for r in ok:
        key = (r["shape"], r["block_size"])
        if r["variant"] == dense_name:
            dense[key] = r
        elif r["family"] != "torch" and not r["variant"].startswith("wrong."):
            if key not in best or r["model_time_us"] < best[key]["model_time_us"]:
                best[key] = r
    shapes = list(dict.fromkeys(r["shape"] for r in ok if decode_shape(r)))
    return best, dense, shapes


def _achievable(row) -> float:
    """The modelled fraction of achievable bandwidth (rows of runs older than that column: the nominal one)."""
    value = row.get("model_fraction_of_achievable")
    return float(value) if value not in (None, "") else float(row["model_fraction_of_bw"])


def _modelled(rows, dense_name: str) -> list[dict]:
    """The three checks of evaluate() on modelled times (their "measured" is the modelled value)."""
    best, dense, shapes = _model_rows(rows, dense_name)
    none = "not modelled (no correct point with traffic counted"
    row = best.get((GOAL_SHAPE, 16))
    if row is None:
        copy = _check("copy_bw_fraction", COPY_BW_FRACTION,
                      status=f"{none} for a paged variant at {GOAL_SHAPE}, block size 16: python -m sandbox traffic "
                             f"cupy --shape {GOAL_SHAPE} models it)")
    else:
        f = _achievable(row)
        copy = _check("copy_bw_fraction", COPY_BW_FRACTION, round(f, 4), f >= COPY_BW_FRACTION,
                      f"{row['variant']}: {row['model_time_us']:.1f} us modelled = {f:.1%} of the device's achievable "
                      f"DRAM bandwidth (measured read stream), {row['model_fraction_of_bw']:.1%} of nominal, bound by "
                      f"{row['model_bound']}")
    ratios = [(r["model_time_us"] / dense[key]["model_time_us"], key[0], key[1], r["variant"])
              for key, r in sorted(best.items(), key=lambda kv: kv[0][1])
              if key[0] in shapes and key[1] >= 16 and key in dense]
    if not ratios:
        overhead = _check("paging_overhead", PAGING_OVERHEAD,
                          status=f"{none} for {dense_name} and a paged variant at block size >= 16)")
    else:
        worst = max(ratios)
        overhead = _check("paging_overhead", PAGING_OVERHEAD, round(worst[0], 4), worst[0] <= PAGING_OVERHEAD,
                          f"worst {worst[0]:.3f} at {worst[1]} bs{worst[2]} ({worst[3]}); all: "
                          + "; ".join(f"{s} bs{b} {v} {x:.3f}" for x, s, b, v in ratios))
    pairs = [(best[(s, 8)]["model_time_us"] / best[(s, 128)]["model_time_us"], s, best[(s, 8)]["variant"],
              best[(s, 128)]["variant"]) for s in shapes if (s, 8) in best and (s, 128) in best]
    if not pairs:
        bs8 = _check("block_size_8_vs_128", BS8_VS_128, status=f"{none} for paged variants at block sizes 8 and 128)")
    else:
        worst = max(pairs)
        bs8 = _check("block_size_8_vs_128", BS8_VS_128, round(worst[0], 4), worst[0] <= BS8_VS_128,
                     "; ".join(f"{s}: {a} / {b} = {x:.3f}" for x, s, a, b in pairs))
    return [copy, overhead, bs8]


def to_json(report: dict) -> str:
    return json.dumps(report, indent=2) + "\n"


def render(report: dict) -> list[str]:
    lines = ["Goals (H200):"]
    for c in report["checks"]:
        measured = "" if c["measured"] is None else f" measured {c['measured']:g} (threshold {c['threshold']:g})"
        lines.append(f"  [{c['status']}] {c['goal']}{measured}")
        if c["detail"]:
            lines.append(f"         {c['detail']}")
        if "modelled_status" in c:
            value = "" if c["modelled"] is None else f" {c['modelled']:g} (threshold {c['threshold']:g})"
            lines.append(f"         MODEL, not a measurement: [{c['modelled_status']}]{value}")
            if c["modelled_detail"]:
                lines.append(f"         {c['modelled_detail']}")
    return lines
