"""The sweep summary's model sections: variants ranked by the time the model gives them on a GPU, from the
traffic counted on the CPU (sweep/measure/traffic_columns.py), and on a GPU the measured time beside the modelled.

    model_tables(rows, device)  modelled time per variant and block size, the fastest per block size starred;
                                then the best by the model per shape and block size with its counts
    measured_vs_model(rows)     GPU points: measured and modelled time, the model's error per point
    model_header(device)        "MODEL (H200), not a measurement"
"""
from __future__ import annotations

import statistics

from sandbox.analysis import gpus
from sandbox.variant.registry import labelled

from .text_table import table


def model_header(device: str = gpus.DEFAULT) -> str:
    return f"MODEL ({str(device).upper()}), not a measurement"


def _us(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def modelled(rows) -> list[dict]:
    """Correct points with a modelled time, in row order."""
    return [r for r in rows if r["status"] == "ok" and r.get("model_time_us") not in (None, "")
            and r["block_size"] is not None]


def _best(rows) -> dict:
    """{(shape, block_size): the row with the lowest modelled time}."""
    best = {}
    for r in rows:
        key = (r["shape"], r["block_size"])
        if key not in best or r["model_time_us"] < best[key]["model_time_us"]:
            best[key] = r
    return best


def model_tables(rows, device: str = gpus.DEFAULT) -> list[str]:
    """Modelled time per call (us) per shape, variants ranked by their best modelled time, * the fastest by
    the model at each block size; then the best point's counts per shape and block size."""
    points = modelled(rows)
    if not points:
        return []
    lines = [f"{model_header(device)}: modelled time per call (us; traffic counted on the CPU; * = fastest by the "
             f"model at that block size; - = not counted), variants ranked by their best"]
    best = _best(points)
    for shape in dict.fromkeys(r["shape"] for r in points):
        here = [r for r in points if r["shape"] == shape]
        sizes = sorted({r["block_size"] for r in here})
        by = {(r["variant"], r["block_size"]): r for r in here}
        variants = sorted(dict.fromkeys(r["variant"] for r in here),
                          key=lambda v: min(r["model_time_us"] for r in here if r["variant"] == v))
        body = []
        for v in variants:
            cells = []
            for b in sizes:
                r = by.get((v, b))
                cells.append("-" if r is None else _us(r["model_time_us"]) + ("*" if best[(shape, b)] is r else ""))
            body.append([labelled(v), *cells])
        lines.append(f" shape {shape}")
        lines += table(["variant", *[f"bs{b}" for b in sizes]], body)
    body = [[shape, b, labelled(r["variant"]), _us(r["model_time_us"]), f"{r['model_fraction_of_bw']:.1%}",
             _fraction(r.get("model_fraction_of_achievable")), r["model_bound"], _loads(r),
             f"{r['bytes_over_ideal']:.3f}", f"{r['kv_sectors_per_request']:.2f}", f"{int(r['bank_conflicts']):,}"]
            for (shape, b), r in best.items()]
    lines += [f"Best by the model per shape and block size ({model_header(device)}; % nominal = DRAM bytes / "
              "modelled time / datasheet bandwidth; % achievable = the same over the measured read stream; loads = "
              "global loads back to back / per wait, read from the SASS)",
              *table(["shape", "bs", "fastest (model)", "model us", "% nominal", "% achievable", "bound", "loads",
                       "DRAM/ideal", "K/V sect/req", "bank confl"], body)]
    return lines


def _fraction(value) -> str:
    return "-" if value in (None, "") else f"{float(value):.1%}"


def _loads(row) -> str:
    if row.get("model_loads_in_flight") in (None, ""):
        return "-"
    source = "" if row.get("model_loads_source") in (None, "", "sass") else " (assumed)"
    return f"{row['model_loads_in_flight']}/{float(row['model_loads_per_wait']):.2f}{source}"


def measured_vs_model(rows) -> list[str]:
    """GPU points with both times: measured (CUDA events) beside modelled, error = model / measured - 1."""
    both = [r for r in modelled(rows) if r["backend"] == "gpu" and r.get("time_us")]
    if not both:
        return []
    errors = [r["model_time_us"] / r["time_us"] - 1 for r in both]
    body = [[r["variant"], r["shape"], r["block_size"], _us(r["time_us"]), _us(r["model_time_us"]), f"{e:+.1%}",
             r["model_bound"]] for r, e in zip(both, errors)]
    return [f"Measured vs modelled (GPU points with traffic counted; error = model / measured - 1; median |error| "
            f"{statistics.median(abs(e) for e in errors):.1%})",
            *table(["variant", "shape", "bs", "measured us", "model us", "error", "bound"], body)]
