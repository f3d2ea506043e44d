"""Compare two sweep runs point by point: ratio = B time / A time per (variant, shape, block_size, backend, dtype,
kv_dtype, options, query_len, prefix_len, group_size); a run older than a column reads as its default (the
query's dtype for kv_dtype, no option, one query token, no shared prefix).

What decides: correctness; the modelled times (model_time_us of the traffic columns, deterministic: the
same code counts the same traffic), a rise beyond the threshold a regression; and the measured times of
GPU runs. CPU emulation times are noise on a shared machine: listed, never a regression, unless
cpu_times=True (`compare --cpu-times`). Traffic counts that changed (DRAM bytes, sectors per request,
bank conflicts) are listed beside them: the cause of a modelled change.

When both run folders hold resources.csv / sass.csv, the report also lists each kernel whose static
resources or SASS census changed (registers 96 -> 80, 16-byte loads 16 -> 8, ...): the code change
behind a time change. Those lines inform; only times and correctness decide the exit status.

A run folder is read strictly: a sweep.csv with no point, a truncated or unparsable row (first, last or
any), or an `ok` row without a time is a ValueError naming the file and the row; two runs that share
no point fail the comparison; a run that was interrupted (or never finished) is warned about.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

from ...errors import RefusedRequest
from ...problem import dtypes

INT_COLUMNS = ("block_size", "num_seqs", "context_len", "num_heads", "num_kv_heads", "head_dim", "repeats", "bytes",
               "flops", "query_len", "prefix_len", "group_size", "dram_bytes", "ideal_bytes", "bank_conflicts",
               "model_loads_in_flight")
# Point columns newer than the first sweeps, and what a run without them meant.
POINT_DEFAULTS = {"options": "", "query_len": 1, "prefix_len": 0, "group_size": 0, "problem": "decode"}
FLOAT_COLUMNS = ("max_abs_err", "time_us", "iqr_us", "q1_us", "q3_us", "min_us", "gbps", "fraction_of_copy_bw",
                 "fraction_of_read_bw", "paging_overhead", "dense_time_us", "partition_us", "point_s",
                 "bytes_over_ideal", "load_sectors_per_request", "kv_sectors_per_request", "model_time_us",
                 "model_fraction_of_bw", "model_fraction_of_achievable", "model_loads_per_wait", "model_flops",
                 "traffic_s")
# Traffic counts whose change between two runs is listed (the deterministic causes of a modelled change).
TRAFFIC_COUNTS = ("dram_bytes", "load_sectors_per_request", "kv_sectors_per_request", "bank_conflicts", "model_bound")
STATUSES = ("ok", "wrong", "error", "unsupported", "skipped")
# Columns compared as times: each must be finite and >= 0 where present.
TIME_COLUMNS = ("time_us", "model_time_us", "dense_time_us", "partition_us")


def _typed(row: dict) -> dict:
    out = dict(row)
    for key in INT_COLUMNS:
        if key in out:
            out[key] = int(float(out[key])) if out[key] not in (None, "") else None
    for key in FLOAT_COLUMNS:
        if key in out:
            out[key] = float(out[key]) if out[key] not in (None, "") else None
    if "correct" in out:
        out["correct"] = {"True": True, "False": False}.get(out["correct"])
    out["note"] = out.get("note") or ""
    for column, default in POINT_DEFAULTS.items():
        if out.get(column) in (None, ""):
            out[column] = default
    out["dtype"] = out.get("dtype") or ""
    out["kv_dtype"] = out.get("kv_dtype") or out["dtype"]  # older runs: the cache had the query's dtype
    return out


def sweep_csv(path: Path) -> Path:
    path = Path(path)
    csv_path = path / "sweep.csv" if path.is_dir() else path
    if not csv_path.is_file():
        raise RefusedRequest(f"{path} is not a sweep run folder (no sweep.csv) nor a sweep.csv")
    return csv_path


def load_rows(path: Path) -> list[dict]:
    """The rows of a run folder's sweep.csv (or of a sweep.csv), with numbers and booleans typed.

    ValueError naming the file and row for: no point at all, a row with too few or too many fields
    (truncated), a value that does not parse, an unknown status, an `ok` row without a finite time.
    """
    csv_path = sweep_csv(path)
    try:
        return _read_rows(csv_path)
    except UnicodeDecodeError as exc:
        raise RefusedRequest(f"{csv_path}: not UTF-8 text ({exc.reason} at byte {exc.start}): not a sweep.csv "
                             "this code wrote") from None


def _read_rows(csv_path: Path) -> list[dict]:
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"variant", "shape", "block_size", "backend", "status", "time_us"} - set(reader.fieldnames or ())
        if missing:
            raise RefusedRequest(f"{csv_path}: sweep.csv lacks columns {sorted(missing)}")
        rows = []
        for raw in reader:
            where = f"{csv_path} line {reader.line_num}"
            if None in raw or None in raw.values():
                got = len(raw) - (None in raw) + len(raw.get(None) or ()) - sum(v is None for v in raw.values())
                raise RefusedRequest(f"{where}: truncated or malformed row ({got} fields, the header has "
                                     f"{len(reader.fieldnames)})")
            try:
                row = _typed(raw)
            except ValueError as exc:
                raise RefusedRequest(f"{where}: unparsable value ({exc})") from None
            if row["status"] not in STATUSES:
                raise RefusedRequest(f"{where}: unknown status {row['status']!r} (expected one of {', '.join(STATUSES)})")
            if row["status"] == "ok" and (row["time_us"] is None or not math.isfinite(row["time_us"])
                                          or row["time_us"] <= 0):
                raise RefusedRequest(f"{where}: an ok point ({row['variant']} bs={row['block_size']}) without a time")
            for column in TIME_COLUMNS:  # a negative or NaN time would read as faster than anything
                value = row.get(column)
                if value is not None and not (math.isfinite(value) and value >= 0):
                    raise RefusedRequest(f"{where}: {column} = {value!r} is not a time (a finite number >= 0)")
            rows.append(row)
    if not rows:
        raise RefusedRequest(f"{csv_path}: no points (only the header): nothing to compare")
    return rows


def run_state(path: Path) -> str | None:
    """Why a run's points may be partial, from its meta.json: "interrupted", "did not finish", or None."""
    path = Path(path)
    meta_path = (path if path.is_dir() else path.parent) / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("interrupted"):
        return "interrupted"
    if "end_utc" not in meta:
        return "did not finish (no end time in meta.json: killed or crashed)"
    return None


def key(row: dict) -> tuple:
    """What makes a point the same point in two runs: (variant, shape, block_size, backend), then
    ("column", value) for each of dtype, kv_dtype, options, query_len, prefix_len, group_size that is not
    its default (float16; the query's dtype; none; 1; 0; 0), so a float16 decode point keys as it always
    did and a run older than a column reads as that column's default."""
    dtype = row.get("dtype") or "float16"
    values = dict(dtype=dtype, kv_dtype=row.get("kv_dtype") or dtype,
                  **{c: row.get(c) if row.get(c) not in (None, "") else d for c, d in POINT_DEFAULTS.items()})
    defaults = dict(POINT_DEFAULTS, dtype="float16", kv_dtype=dtype)
    extra = tuple((c, v) for c, v in values.items() if v != defaults[c])
    return (row["variant"], row["shape"], row["block_size"], row["backend"]) + extra


def _fmt_key(k) -> str:
    variant, shape, bs, backend = k[:4]
    return f"{variant} [{backend}] {shape} bs={'-' if bs is None else bs}"


@dataclasses.dataclass
class Report:
    threshold: float
    ratios: list          # (key, a_us, b_us, ratio) for points timed in both
    regressions: list     # subset of ratios above 1 + threshold
    improvements: list    # subset of ratios below 1 - threshold
    turned_wrong: list    # (key, a_status, b_status, b_note): correct in A, wrong/error in B
    still_wrong: list     # (key, a_status, b_status, b_note): wrong/error in both
    status_changes: list  # (key, a_status, b_status) other changes (ok -> unsupported, ...)
    only_a: list
    only_b: list
    cpu_emulation: bool
    static_changes: list = dataclasses.field(default_factory=list)  # "variant [kernel] bs=N: field a -> b, ..."
    warnings: list = dataclasses.field(default_factory=list)        # e.g. "run B was interrupted: ..."
    model_ratios: list = dataclasses.field(default_factory=list)    # (key, a_us, b_us, ratio): modelled in both
    model_regressions: list = dataclasses.field(default_factory=list)
    model_improvements: list = dataclasses.field(default_factory=list)
    traffic_changes: list = dataclasses.field(default_factory=list)  # (key, "column a -> b, ...")
    cpu_times: bool = False  # CPU emulation times decide too (compare --cpu-times)

    @property
    def times_decide(self) -> bool:
        """Whether measured times can be regressions: GPU runs, or CPU runs with --cpu-times."""
        return self.cpu_times or not self.cpu_emulation

    @property
    def shared(self) -> bool:
        """The runs have at least one point (variant, shape, block size, backend) in common."""
        return bool(self.ratios or self.turned_wrong or self.still_wrong or self.status_changes
                    or self.shared_unchanged)

    shared_unchanged: int = 0  # points in both runs with the same status and no time to compare

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions or self.model_regressions or self.turned_wrong or not self.shared else 0

    def render(self) -> str:
        lines = [f"warning: {w}" for w in self.warnings]
        lines.append(f"{len(self.ratios)} points timed in both runs; regression = B/A > {1 + self.threshold:.2f}")
        if self.cpu_emulation and not self.cpu_times:
            lines.append("note: CPU-emulation timings (not GPU performance) are noise on a shared machine: listed, "
                         "never a regression (--cpu-times counts them); the modelled times and traffic counts decide")
        elif self.cpu_emulation:
            lines.append("note: CPU-emulation timings (not GPU performance) count as regressions (--cpu-times); "
                         "expect noise on a busy machine")
        if self.ratios:
            lines.append(f"  {'point':<60} {'A us':>10} {'B us':>10} {'B/A':>7}")
            for k, a, b, ratio in sorted(self.ratios, key=lambda t: -t[3]):
                flag = "  faster" if ratio < 1 - self.threshold else ""
                if ratio > 1 + self.threshold:
                    flag = "  REGRESSION" if self.times_decide else "  slower (noise: CPU emulation)"
                lines.append(f"  {_fmt_key(k):<60} {a:>10.2f} {b:>10.2f} {ratio:>7.3f}{flag}")
        if self.model_ratios:
            changed = [t for t in self.model_ratios if t[3] != 1.0]
            lines.append(f"MODEL, not a measurement: {len(self.model_ratios)} points modelled in both runs, "
                         f"{len(changed)} changed; regression = B/A > {1 + self.threshold:.2f}")
            for k, a, b, ratio in sorted(changed, key=lambda t: -t[3]):
                flag = "  REGRESSION" if ratio > 1 + self.threshold else ("  faster" if ratio < 1 - self.threshold else "")
                lines.append(f"  {_fmt_key(k):<60} {a:>10.2f} {b:>10.2f} {ratio:>7.3f}{flag}")
        if self.traffic_changes:
            lines.append(f"traffic counts changed: {len(self.traffic_changes)} point(s)")
            lines += [f"  {_fmt_key(k)}: {what}" for k, what in self.traffic_changes]
        for title, items in (("TURNED WRONG (correct in A, not in B)", self.turned_wrong),
                             ("still wrong in B", self.still_wrong)):
            if items:
                lines.append(f"{title}: {len(items)}")
                lines += [f"  {_fmt_key(k)}: {sa} -> {sb}: {note[:200]}" for k, sa, sb, note in items]
        if self.status_changes:
            lines.append(f"status changed: {len(self.status_changes)}")
            lines += [f"  {_fmt_key(k)}: {sa} -> {sb}" for k, sa, sb in self.status_changes]
        for title, items in (("only in A", self.only_a), ("only in B", self.only_b)):
            if items:
                lines.append(f"{title}: {len(items)}")
                lines += [f"  {_fmt_key(k)}" for k in items]
        if self.static_changes:
            lines.append(f"static code changed (resources.csv / sass.csv, sm_90): {len(self.static_changes)} kernel(s)")
            lines += [f"  {change}" for change in self.static_changes]
        if not self.shared:
            verdict = ("FAIL: the runs share no point (variant, shape, block size, backend): nothing was compared "
                       "(a GPU run against a CPU run? different --shapes?)")
        elif self.exit_code:
            verdict = (f"FAIL: {len(self.regressions)} regression(s), {len(self.model_regressions)} modelled "
                       f"regression(s), {len(self.turned_wrong)} turned wrong")
        else:
            verdict = f"OK: no regression beyond {self.threshold:.0%}, nothing turned wrong"
        if self.improvements and self.times_decide:
            verdict += f"; {len(self.improvements)} faster beyond {self.threshold:.0%}"
        if self.model_improvements:
            verdict += f"; {len(self.model_improvements)} faster by the model beyond {self.threshold:.0%}"
        lines.append(verdict)
        return "\n".join(lines)


def _traffic_change(ra: dict, rb: dict) -> str:
    """"column a -> b, ..." for the TRAFFIC_COUNTS both rows hold and that differ ("" if none)."""
    def shown(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{c} {shown(ra[c])} -> {shown(rb[c])}" for c in TRAFFIC_COUNTS
                     if ra.get(c) not in (None, "") and rb.get(c) not in (None, "") and ra[c] != rb[c])


def compare_rows(rows_a: list[dict], rows_b: list[dict], threshold: float = 0.10, cpu_times: bool = False) -> Report:
    a = {key(r): r for r in rows_a}
    b = {key(r): r for r in rows_b}
    ratios, turned, still, changes, modelled, traffic = [], [], [], [], [], []
    unchanged = 0
    for k in a.keys() & b.keys():
        ra, rb = a[k], b[k]
        sa, sb = ra["status"], rb["status"]
        if sa == sb == "ok":
            ma, mb = ra.get("model_time_us"), rb.get("model_time_us")
            if ma and mb is not None:
                modelled.append((k, ma, mb, mb / ma))
            what = _traffic_change(ra, rb)
            if what:
                traffic.append((k, what))
        if sb in ("wrong", "error"):
            (still if sa in ("wrong", "error") else turned).append((k, sa, sb, rb["note"]))
        elif sa == sb == "ok" and ra["time_us"] and rb["time_us"] is not None:
            ratios.append((k, ra["time_us"], rb["time_us"], rb["time_us"] / ra["time_us"]))
        elif sa != sb:
            changes.append((k, sa, sb))
        else:
            unchanged += 1
    order = lambda items: sorted(items, key=lambda t: tuple("" if x is None else str(x) for x in t[0]))  # noqa: E731
    emulated = any(r.get("timing") == "cpu-emulation" for r in rows_a + rows_b)
    times_decide = cpu_times or not emulated
    return Report(
        threshold=threshold,
        ratios=order(ratios),
        regressions=order([t for t in ratios if t[3] > 1 + threshold]) if times_decide else [],
        improvements=order([t for t in ratios if t[3] < 1 - threshold]),
        model_ratios=order(modelled),
        model_regressions=order([t for t in modelled if t[3] > 1 + threshold]),
        model_improvements=order([t for t in modelled if t[3] < 1 - threshold]),
        traffic_changes=order(traffic),
        cpu_times=cpu_times,
        turned_wrong=order(turned), still_wrong=order(still), status_changes=order(changes),
        only_a=sorted(a.keys() - b.keys(), key=lambda k: tuple(map(str, k))),
        only_b=sorted(b.keys() - a.keys(), key=lambda k: tuple(map(str, k))),
        cpu_emulation=emulated,
        shared_unchanged=unchanged,
    )


def compare_runs(run_a: Path, run_b: Path, threshold: float = 0.10, cpu_times: bool = False) -> Report:
    report = compare_rows(load_rows(run_a), load_rows(run_b), threshold, cpu_times)
    report.static_changes = static_changes(Path(run_a), Path(run_b))
    for label, path in (("A", run_a), ("B", run_b)):
        state = run_state(path)
        if state:
            report.warnings.append(f"run {label} ({path}) {state}: its points are partial")
    return report


# What a kernel's static rows are matched on, and which of their columns are compared.
STATIC_FILES = {
    "resources.csv": (("variant", "block_size", "dtype", "kv_dtype"),
                      ("registers", "static_shared_bytes", "local_bytes", "spill_stores", "spill_loads", "occupancy")),
    "sass.csv": (("variant", "kernel", "block_size", "dtype", "kv_dtype"),
                 ("instructions", "vector_loads", "global_loads", "global_stores", "local", "generic", "barriers",
                  "shuffles", "calls", "fp64")),
}


def _static_rows(path: Path, keys: tuple) -> dict:
    """{key: row}; kv_dtype missing or empty (older runs) means the query's dtype."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["kv_dtype"] = row.get("kv_dtype") or row.get("dtype", "")
    return {tuple(row.get(k, "") for k in keys): row for row in rows}


def _precision(dtype: str, kv_dtype: str) -> str:
    """"" for the default float16 kernels, else "bf16" / "fp16:e4m3" (a line's label)."""
    if dtype in ("", "float16") and kv_dtype in ("", dtype):
        return ""
    try:
        q = dtypes.short(dtypes.canonical(dtype)) if dtype else "?"
        kv = dtypes.short(dtypes.canonical(kv_dtype)) if kv_dtype not in ("", dtype) else ""
    except ValueError:
        return f"{dtype}:{kv_dtype}"
    return q + (f":{kv}" if kv else "")


def static_changes(run_a: Path, run_b: Path) -> list[str]:
    """One line per kernel whose STATIC_FILES columns differ between two run folders that both have the file."""
    changes: dict = {}
    for name, (keys, fields) in STATIC_FILES.items():
        if not (run_a.is_dir() and run_b.is_dir() and (run_a / name).is_file() and (run_b / name).is_file()):
            continue
        a, b = _static_rows(run_a / name, keys), _static_rows(run_b / name, keys)
        for k in sorted(a.keys() & b.keys()):
            differ = [f"{f} {a[k][f]} -> {b[k][f]}" for f in fields
                      if f in a[k] and f in b[k] and a[k][f] != b[k][f]]
            if differ:
                key_of = dict(zip(keys, k))
                kernel = key_of.get("kernel", "")
                kernel = kernel if kernel not in ("", "main") else ""
                precision = _precision(key_of["dtype"], key_of["kv_dtype"])
                label = (f"{key_of['variant']}{f' [{kernel}]' if kernel else ''} bs={key_of['block_size']}"
                         f"{f' {precision}' if precision else ''}")
                changes.setdefault(label, []).extend(differ)
    return [f"{label}: {', '.join(fields)}" for label, fields in changes.items()]
