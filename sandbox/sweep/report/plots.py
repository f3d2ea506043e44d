"""PNG plots of a sweep: time and GB/s against block size (one panel per shape, one line per variant),
paging overhead, static resources, the modelled time (headed "MODEL (H200), not a measurement", its
legend ranked by the model) and the modelled device's roofline (roofline_<device>.png, sweep/report/roofline.py).
CPU runs say "CPU emulation" in every measured title.

Each variant has its own colour, marker and line style in every figure, and its points sit a few
percent off the block size (always the same side for a variant), so equal lines stay visible side by side.
Layouts are matplotlib's constrained ones: the legend below the panels and the title above them
take exactly their room.
"""
from __future__ import annotations

import math
from pathlib import Path

from ...variant.registry import labelled

from .model_summary import model_header, modelled
from .mpl import pyplot as _mpl
from .roofline import roofline_figure
from .summary import default_precision

GPU_TAG = "GPU {name}: CUDA events, L2 flushed, median (bars: IQR)"
CPU_TAG = "CPU EMULATION (simulator / executor wall clock): NOT GPU performance"


def _colors(names):
    plt = _mpl()
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {n: cmap(i % cmap.N) for i, n in enumerate(sorted(names))}


MARKERS = "osD^vP*Xh<>p"
LINESTYLES = ("-", "--", "-.", ":")
# A variant's points sit at block size x 2**(OFFSET * k), k its rank among the figure's variants centred on 0:
# lines with the same values (cupy.multi and cupy.cascade at a private-context shape) stay side by side.
OFFSET = 0.03


def _markers(names):
    return {n: MARKERS[i % len(MARKERS)] for i, n in enumerate(sorted(names))}


def _linestyles(names):
    """One line style per variant; with 10 colours and 4 styles no two of 40 variants look alike."""
    return {n: LINESTYLES[(i // 10) % len(LINESTYLES)] if len(names) <= 10 else LINESTYLES[i % len(LINESTYLES)]
            for i, n in enumerate(sorted(names))}


def _hollow(names):
    """Every other variant (by name) draws hollow markers: a marker under another still shows."""
    return {n: dict(mfc="none", mew=1.4) if i % 2 else {} for i, n in enumerate(sorted(names))}


def _offsets(names):
    order = sorted(names)
    middle = (len(order) - 1) / 2
    return {n: 2 ** (OFFSET * (i - middle)) for i, n in enumerate(order)}


def _legend(fig, handles: dict, columns: int = 4, ranked: bool = False):
    """The figure's legend below its panels, or (ranked) one column right of them, first at the top; its room
    is taken from the layout, so it is never cut off."""
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="outside right center" if ranked else
                   "outside lower center", ncol=1 if ranked else min(columns, len(handles)), fontsize=8,
                   frameon=False)


def _plain_log_labels(ax):
    """Plain numbers on a log axis; minor ticks labelled only when the axis spans under a decade."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    fmt = FuncFormatter(lambda y, _: f"{y:g}")
    ax.yaxis.set_major_formatter(fmt)
    low, high = ax.get_ylim()
    if low > 0 and high / low < 10:
        ax.yaxis.set_minor_formatter(fmt)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def _grid(n: int):
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def _log2_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel("block size (tokens per block)")
    ax.grid(True, which="major", alpha=0.3)


def _panels(rows, ylabel, title, value, ceiling=None, ceiling_label="", logy=False, yfloor=None, dense="", style=None,
            rank=None):
    """One figure: a panel per shape, a line per variant; wrong/error points marked at the panel's bottom.
    rank: a key ordering the variants (and so the legend), else their order in rows."""
    plt = _mpl()
    from matplotlib.transforms import blended_transform_factory

    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    width = max(5.6 * min(len(shapes), 3), 8.0) + (2.6 if rank is not None else 0.0)  # a ranked legend: right
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    if rank is not None:
        variants.sort(key=rank)
    colors, markers = style or (_colors(variants), _markers(variants))
    lines, offsets, hollow = _linestyles(colors), _offsets(variants), _hollow(variants)
    sizes = sorted({r["block_size"] for r in rows if r["block_size"] is not None})
    nrows, ncols = _grid(len(shapes))
    height = 4.4 * nrows + 1.2
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained")
    handles = {}
    for ax, shape in zip(axes.flat, shapes):
        here = [r for r in rows if r["shape"] == shape]
        bottom = blended_transform_factory(ax.transData, ax.transAxes)
        for variant in variants:
            mine = sorted((r for r in here if r["variant"] == variant), key=lambda r: r["block_size"] or 0)
            ok = [r for r in mine if r["status"] == "ok" and value(r) is not None]
            label = f"{labelled(variant)} [{mine[0]['backend']}]" if mine else variant
            if ok and ok[0]["block_size"] is None:  # per-shape peer: a horizontal reference line
                handles[label] = ax.axhline(value(ok[0]), color=colors[variant], ls=":", lw=1.6, label=label)
            elif ok:
                xs = [r["block_size"] * offsets[variant] for r in ok]
                ys = [value(r) for r in ok]
                line_style = dict(ls="-.", lw=2.2) if variant == dense else dict(ls=lines[variant], lw=1.6)
                handles[label], = ax.plot(xs, ys, marker=markers[variant], ms=5, color=colors[variant], label=label,
                                          **line_style, **hollow[variant])
                if value.__name__ == "time_value":
                    lo = [max(y - (r["q1_us"] or y), 0) for r, y in zip(ok, ys)]
                    hi = [max((r["q3_us"] or y) - y, 0) for r, y in zip(ok, ys)]
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=colors[variant], alpha=0.6, capsize=2)
            bad = [r for r in mine if r["status"] in ("wrong", "error") and r["block_size"] is not None]
            for r in bad:
                ax.plot(r["block_size"], 0.03, marker="X", ms=11, color="red", transform=bottom, clip_on=False)
                ax.text(r["block_size"], 0.08, f"{variant}\n{r['status'].upper()}", color="red", fontsize=7,
                        ha="center", transform=bottom)
        if ceiling:
            handles[ceiling_label] = ax.axhline(ceiling, color="black", ls="--", lw=1.2, label=ceiling_label)
        if sizes:
            _log2_axis(ax, sizes)
        if logy:
            ax.set_yscale("log")
            _plain_log_labels(ax)
        elif yfloor is not None:
            ax.set_ylim(bottom=yfloor)
        ax.set_ylabel(ylabel)
        ax.set_title(shape, fontsize=10 if len(shape) <= 48 else 8)
    for ax in list(axes.flat)[len(shapes):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    _legend(fig, handles, ranked=rank is not None)
    return fig


def time_value(r):
    return r["time_us"]


def model_value(r):
    value = r.get("model_time_us")
    return None if value in (None, "") else float(value)


def model_figure(rows, device: str = "h200", style=None):
    """Modelled time per call against block size, the legend ranked by each variant's best modelled time (or None)."""
    points = modelled(rows)
    if not points:
        return None
    best = {}
    for r in points:
        best[r["variant"]] = min(best.get(r["variant"], float("inf")), model_value(r))
    return _panels(points, "modelled time per call (us, log)",
                   f"{model_header(device)}\nmodelled time per call vs block size\n(traffic counted on the CPU; "
                   f"legend: fastest by the model first)", model_value, logy=True, style=style,
                   rank=lambda v: best[v])


def roofline_of(rows, device: str):
    """The device's roofline with each variant's best modelled point at the first shape counted (or None)."""
    points = [r for r in modelled(rows) if r.get("model_flops") not in (None, "") and r.get("dram_bytes")]
    if not points:
        return None
    shape = points[0]["shape"]
    best = {}
    for r in points:
        if r["shape"] == shape and (r["variant"] not in best or model_value(r) < model_value(best[r["variant"]])):
            best[r["variant"]] = r
    return roofline_figure([dict(label=f"{v} bs{r['block_size']}", flops=float(r["model_flops"]),
                                 dram_bytes=float(r["dram_bytes"]), time_us=model_value(r)) for v, r in best.items()],
                           device)


def gbps_value(r):
    return r["gbps"]


def overhead_value(r):
    return r["paging_overhead"]


def write_all(run_dir: Path, rows, resource_rows, copy, on_gpu: bool, gpu_info, log, dense: str = "cupy.dense",
              model_device: str = "h200") -> list[str]:
    """Write the PNGs into run_dir; returns their names. A plotting failure is logged, never fatal."""
    try:
        plt = _mpl()
    except ImportError:
        log("note: matplotlib is not installed: no plots")
        return []
    tag = GPU_TAG.format(name=(gpu_info or {}).get("name", "?")) if on_gpu else CPU_TAG
    written = []
    names = list(dict.fromkeys([r["variant"] for r in rows] + [r.get("variant") for r in resource_rows or ()
                                                                  if r.get("variant")]))
    style = (_colors(names), _markers(names))  # one colour and marker per variant in every figure

    def save(fig, name):
        fig.savefig(Path(run_dir) / name, dpi=110)
        plt.close(fig)
        written.append(name)

    try:
        if any(r["status"] in ("ok", "wrong", "error") for r in rows):
            save(_panels(rows, "time per call (us, log)", f"Decode time vs block size\n{tag}", time_value,
                         logy=True, dense=dense, style=style), "time_vs_block_size.png")
            ceiling = copy.gbps if copy else None
            label = (f"copy bandwidth (D2D, read+write) {copy.gbps:.0f} GB/s" if on_gpu else
                     f"host memcpy bandwidth {copy.gbps:.1f} GB/s") if copy else ""
            save(_panels(rows, "GB/s (bytes_moved / time)", f"Achieved bandwidth vs block size\n{tag}", gbps_value,
                         ceiling=ceiling, ceiling_label=label, logy=not on_gpu, yfloor=0, dense=dense, style=style),
                 "gbps_vs_block_size.png")
        fig = model_figure(rows, model_device, style)
        if fig is not None:
            save(fig, "model_time_vs_block_size.png")
        fig = roofline_of(rows, model_device)
        if fig is not None:
            save(fig, f"roofline_{model_device}.png")
        paged = [r for r in rows if r["paging_overhead"] is not None]
        if paged:
            save(_panels(paged, "time / dense time", f"Paging overhead vs block size\n{tag}", overhead_value,
                         ceiling=1.05 if on_gpu else 1.0, ceiling_label="goal: 1.05" if on_gpu else "dense = 1.0",
                         style=style),
                 "paging_overhead.png")
        resource_rows = [r for r in resource_rows or () if default_precision(r)]  # one line per variant: float16
        if resource_rows:
            fig = resource_figure(resource_rows, style)
            if fig is not None:
                save(fig, "resources.png")
    except Exception as exc:  # a plot must never cost the measured rows
        log(f"note: plotting failed: {type(exc).__name__}: {exc}")
    return written


# Resource columns by meaning; sandbox.analysis.resources names them, we find them by keyword.
RESOURCE_PANELS = (
    ("registers", ("registers", "regs"), "registers per thread"),
    ("shared", ("shared", "smem"), "shared memory per block (KiB, static + dynamic)"),
    ("occupancy", ("occupancy",), "theoretical occupancy"),
    ("spills", ("spill",), "spill bytes (stores + loads)"),
)


def _number(v):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _resource_columns(rows) -> dict:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    found = {}
    for panel, words, _ in RESOURCE_PANELS:
        cols = [k for k in keys if any(w in k.lower() for w in words)
                and any(_number(r.get(k)) is not None for r in rows)]
        if panel == "occupancy":
            cols = [k for k in cols if "limit" not in k.lower()][:1] or cols[:1]
        if cols:
            found[panel] = cols
    return found


def resource_figure(rows, style=None):
    """Registers, shared memory, occupancy and spills against block size, one line per variant (or None)."""
    plt = _mpl()
    name_key = next((k for k in ("variant", "name") if k in rows[0]), None)
    if name_key is None or "block_size" not in rows[0]:
        return None
    columns = _resource_columns(rows)
    if not columns:
        return None
    variants = list(dict.fromkeys(r[name_key] for r in rows))
    colors, markers = style or (_colors(variants), _markers(variants))
    lines, offsets, hollow = _linestyles(colors), _offsets(variants), _hollow(variants)
    sizes = sorted({int(r["block_size"]) for r in rows if _number(r.get("block_size")) is not None})
    panels = [p for p in RESOURCE_PANELS if p[0] in columns]
    nrows, ncols = (1, len(panels)) if len(panels) <= 2 else (2, 2)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 4.2 * nrows + 1.0), squeeze=False,
                             layout="constrained")
    handles = {}
    shared_in_bytes = any("byte" in c.lower() for c in columns.get("shared", ()))
    for ax, (panel, _, ylabel) in zip(axes.flat, panels):
        for variant in variants:
            mine = sorted((r for r in rows if r[name_key] == variant and _number(r.get("block_size")) is not None),
                          key=lambda r: float(r["block_size"]))
            xs, ys = [], []
            for r in mine:
                values = [_number(r.get(c)) for c in columns[panel]]
                values = [v for v in values if v is not None]
                if not values:
                    continue
                y = sum(values) if panel in ("spills", "shared") else values[0]  # static + dynamic shared
                if panel == "shared" and shared_in_bytes:
                    y /= 1024  # bytes -> KiB
                xs.append(int(float(r["block_size"])) * offsets[variant])
                ys.append(y)
            if xs:
                handles[variant], = ax.plot(xs, ys, marker=markers[variant], ms=5, color=colors[variant],
                                            ls=lines[variant], label=variant, **hollow[variant])
        if sizes:
            _log2_axis(ax, sizes)
        if panel == "spills":
            ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))
        ax.set_ylabel(ylabel if panel != "shared" or shared_in_bytes else "shared memory per block")
        ax.set_title(panel_title(panel, columns[panel]), fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    _legend(fig, handles, columns=5)
    fig.suptitle("Static resources per variant and block size (compiled for sm_90, head dim 128, float16; "
                 "no GPU needed)", fontsize=11)
    return fig


def panel_title(panel: str, columns) -> str:
    """The panel's name, then the resources.csv columns it plots where they say more than the name."""
    more = [c for c in columns if c != panel]
    return f"{panel} ({' + '.join(columns)})" if more else panel
