"""The sweep: every variant x shape x block size, checked against the reference, then timed, then recorded.

Decode variants race the decode shapes, MLA variants the MLA shapes (mla:..., sweep/mla_shapes.py): a point
exists only where the shape's kind is the variant's (registry problem kinds).

One point, top to bottom (`run_point`): declared limits -> prepare (untimed) -> one launch whose
output is compared with the expected output (MLA: out and lse) -> only if correct, timed repeats (CUDA events and
an L2 flush on a GPU; wall clock on the CPU) -> its traffic counted on the CPU and modelled on an H200
(sweep/measure/traffic_columns.py: every point on the CPU, on a GPU the first shape's block size 16; --traffic) -> one row
appended to sweep.csv at once.

A time is one call of `launch()` as a user makes it: for a two-kernel variant (split-KV partition +
reduce) both launches and the host gap between them are inside the timed region. Where the prepared
object also has `launch_parts()` (see sandbox/variant/limits.py), each kernel is timed alone as well
(`parts_us`; the first, the partition kernel, also in `partition_us`).

Exit status (SweepOutcome.exit_code): 1 when any point of our variants is wrong or raised (`error`),
or when a selected variant has no `ok` point at all (everything unsupported); 130 when interrupted.
A refusal is `sandbox.Unsupported` (from the declared limits or a prepare); any other exception,
a bare ValueError included, is an `error`.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ...analysis import gpus
from ...checking.check import expected_output
from ...checking.compare import compare
from ...devices import backends, cost
from ...problem import kinds
from ...problem.validate import MAX_BLOCK_SIZE
from ...results import CsvAppender, new_run_dir
from ...variant import registry
from ...variant.limits import Unsupported
from .. import shapes as shapes_mod
from ..report import goals as goals_mod, plots, summary as summary_mod
from . import bandwidth, device, meta as meta_mod, peers, static_resources, timing, traffic_columns
from . import tune as tune_mod
from ...errors import RefusedRequest

DENSE_BASELINE = "cupy.dense"

COLUMNS = [
    "variant", "family", "problem", "backend", "timing", "shape", "num_seqs", "context_len", "num_heads", "num_kv_heads",
    "head_dim", "dtype", "kv_dtype", "options", "query_len", "prefix_len", "group_size", "block_size", "status", "correct", "max_abs_err", "time_us", "iqr_us", "q1_us", "q3_us",
    "min_us", "repeats", "bytes", "flops", "gbps", "fraction_of_copy_bw", "fraction_of_read_bw", "paging_overhead",
    "dense_time_us", "partition_us", "parts_us", *traffic_columns.COLUMNS, "point_s", "note", "config",
]
# ok: correct and timed | wrong: output differs from the reference (never timed) | error: raised while
# preparing or running (anything but sandbox.Unsupported) | unsupported: outside the variant's limits, a
# prepare that raised sandbox.Unsupported, or not runnable here | skipped: --max-seconds spent
STATUSES = ("ok", "wrong", "error", "unsupported", "skipped")
FAILED = ("wrong", "error")
# Outside implementations raced for reference (sweep/measure/peers.py): a wrong torch.sdpa point is recorded
# and shown like any other, but only the sandbox's own variants decide the exit status; so do the registry's
# peer families (Family.peer: flashinfer.*), is_peer().
PEER_FAMILIES = ("torch",)


def shape_kind(shape) -> str:
    """"decode" (sandbox/sweep/shapes.py) or "mla" (sandbox/sweep/mla_shapes.py): the variants it races."""
    return shape.kind


def backend_label(family: str, resolved: str) -> str:
    """What a point ran on: gpu, or the CPU stand-in of its family (never mistaken for a GPU time)."""
    if family in registry.FAMILIES:
        return registry.family(family).label(resolved)
    return "gpu" if resolved == "gpu" else "cpu"  # a peer (torch)


def is_peer(family: str) -> bool:
    """Another project's implementation: a sweep-internal peer (PEER_FAMILIES) or a registry family declared a
    peer (Family.peer). Its wrong or failed points are recorded and shown, never the sweep's exit status."""
    return family in PEER_FAMILIES or (family in registry.FAMILIES and registry.family(family).peer is not None)


@dataclasses.dataclass
class Candidate:
    """What a point runs: a registry variant or a sweep-internal peer (torch.sdpa)."""

    name: str
    family: str
    limits: object
    prepare: Callable  # (problem, resolved_backend) -> prepared with launch()/result()
    per_shape: bool = False  # no block table: measured once per shape
    note: Callable[[], str] = lambda: ""
    problem: str = "decode"  # the kind of problem it solves: it runs at the shapes of that kind only
    config: str = ""  # the tunables it runs with ("threads=64"; sweep/measure/tune.py), "" for the defaults
    prepare_with: Callable | None = None  # (problem, resolved_backend, config) -> prepared: a registry variant's

    @classmethod
    def from_registry(cls, name: str) -> "Candidate":
        v = registry.get(name)
        prepare = v.kind.part("prepare")

        def prepare_with(problem, backend, config=None):
            return prepare(name, problem, backend, config)[0]

        return cls(name, v.family, v.limits, lambda problem, backend: prepare_with(problem, backend),
                   problem=v.problem, prepare_with=prepare_with)

    @classmethod
    def from_peer(cls, peer) -> "Candidate":
        return cls(peer.name, peer.family, peer.limits, peer.prepare, per_shape=getattr(peer, "per_shape", True),
                   note=lambda: peer.note)


@dataclasses.dataclass
class SweepConfig:
    variants: list[str]
    block_sizes: tuple[int, ...]
    shapes: list  # [shapes_mod.Shape]
    backend: str = "auto"
    seed: int = 0
    quick: bool = False
    max_seconds: float | None = None
    gpu_timing: timing.TimingConfig = timing.GPU_TIMING
    cpu_timing: timing.TimingConfig = timing.CPU_TIMING
    dense_baseline: str = DENSE_BASELINE
    torch: bool = True
    resources: bool = True
    plots: bool = True
    progress: bool = True
    results_dir: Path | None = None
    traffic: str = "auto"          # traffic_columns.MODES: which points get the traffic columns
    model_device: str = "h200"     # the GPU the traffic columns model
    tune: bool = False            # --tune: explore each variant's tunables per point (sweep/measure/tune.py)
    tuned: Path | None = None     # --tuned RUN: the configurations a --tune run recorded
    config: dict = dataclasses.field(default_factory=dict)  # --config: one configuration for every variant
    force: bool = False           # --force: run points estimated past the hard bound (sandbox/devices/cost.py)

    def describe(self) -> dict:
        d = dataclasses.asdict(self)
        d["shapes"] = [s.name for s in self.shapes]
        d["results_dir"] = str(self.results_dir) if self.results_dir else None
        d["tuned"] = str(self.tuned) if self.tuned else None
        return d


@dataclasses.dataclass
class Environment:
    """Where points run and what times them; made once per sweep."""

    on_gpu: bool
    copy: bandwidth.CopyBandwidth | None = None
    read: bandwidth.CopyBandwidth | None = None
    flush: Callable[[], None] | None = None
    _gpu_timer: object = None

    def timer_for(self, family: str, resolved: str):
        if resolved != "gpu":
            return timing.WallClockTimer(lambda: backends.synchronize(resolved))
        if family == "torch":
            return timing.TorchEventTimer()
        if self._gpu_timer is None:
            self._gpu_timer = timing.gpu_timer()
        return self._gpu_timer

    @classmethod
    def create(cls, on_gpu: bool, quick: bool, log: Callable[[str], None]) -> "Environment":
        env = cls(on_gpu)
        if on_gpu:
            try:
                env.flush = device.L2Flusher(device.device_info().get("l2_cache_bytes"))
            except Exception as exc:  # timed anyway, but say so: repeats may then hit a warm L2
                log(f"note: no L2 flush between repeats: {type(exc).__name__}: {exc}")
        try:
            env.copy = (bandwidth.gpu_copy_bandwidth() if on_gpu else bandwidth.host_copy_bandwidth(
                bandwidth.CPU_QUICK_COPY_BYTES if quick else bandwidth.CPU_COPY_BYTES))
        except Exception as exc:  # the sweep still runs; fraction_of_copy_bw stays empty
            log(f"note: copy bandwidth not measured: {type(exc).__name__}: {exc}")
        try:
            env.read = (bandwidth.gpu_read_bandwidth() if on_gpu else bandwidth.host_read_bandwidth(
                bandwidth.CPU_QUICK_COPY_BYTES if quick else bandwidth.CPU_COPY_BYTES))
        except Exception as exc:  # the sweep still runs; fraction_of_read_bw stays empty
            log(f"note: read bandwidth not measured: {type(exc).__name__}: {exc}")
        if on_gpu:
            device.free_device_memory()  # the 1 GiB buffers of both measurements
        return env


class _ShapeData:
    """Lazily built problems (one block size at a time) and expected outputs of one shape.

    A private-context shape pages the same tokens at every block size, so one expected output (from
    the contiguous tokens, through no block table) serves them all. A shared-prefix shape is built per
    block size (BlockManager's tables) and checked against the reference per block size.
    """

    def __init__(self, shape, seed: int):
        self.shape, self.seed = shape, seed
        self._tokens = None
        self._expected = (None, None)
        self._problem = (None, None)

    @property
    def tokens(self):
        if self._tokens is None:
            self._tokens = shapes_mod.make_tokens(self.shape, self.seed)
        return self._tokens

    def problem(self, block_size: int):
        if self._problem[0] != block_size:
            self._problem = (None, None)  # free the last block size's caches before paging the next
            if self.shape.group_size:
                self._expected = (None, None)
                problem = shapes_mod.shared_problem(self.shape, block_size, self.seed)
            else:
                problem = shapes_mod.paged_problem(self.tokens, block_size)
            self._problem = (block_size, problem)
        return self._problem[1]

    def verdict(self, prepared, got, block_size: int):
        """out (and with return_lse, prepared.lse()) against the truth."""
        if self.problem(block_size).options.return_lse:
            got = (got, prepared.lse())
        return compare(got, self.expected(block_size), self.shape.dtype)

    def expected(self, block_size: int):
        key = block_size if self.shape.group_size else "every block size"
        if self._expected[0] != key:
            if self.shape.group_size:
                truth = expected_output(self.problem(block_size))
            else:
                truth = shapes_mod.expected_output(self.tokens)
            self._expected = (key, truth)
        return self._expected[1]


# The sweep's part of the decode kind (sandbox/problem/kinds.py): the arrays it builds once per shape (the MLA
# kind's: sandbox/sweep/mla_shapes.py).
kinds.DECODE.attach(shape_data=_ShapeData)


def _blank_row(candidate: Candidate, shape, block_size, label: str, on_gpu: bool) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(variant=candidate.name, family=candidate.family, problem=candidate.problem, backend=label,
               timing="cuda-events" if label == "gpu" else "cpu-emulation", block_size=block_size, note="")
    row.update(shape.columns())
    return row


def run_point(candidate: Candidate, resolved: str, data: _ShapeData, block_size: int, env: Environment,
              config: timing.TimingConfig, traffic_device: str | None = None) -> dict:
    """Check, then time, one (candidate, shape, block size): one sweep.csv row. Never raises for the variant's faults.

    traffic_device: count a correct point's traffic and model it on this GPU (sweep/measure/traffic_columns.py)."""
    started = time.perf_counter()
    label = backend_label(candidate.family, resolved)
    row = _blank_row(candidate, data.shape, None if candidate.per_shape else block_size, label, env.on_gpu)

    def done(status, note="", **values):
        if status == "error" and candidate.per_shape:  # an outside peer (torch) failing is not our kernel failing
            status, note = "unsupported", f"{candidate.name} could not run here: {note}"
        row.update(status=status, note=note.strip(), point_s=round(time.perf_counter() - started, 3), **values)
        return row

    problem = data.problem(block_size)
    try:
        candidate.limits.check(candidate.name, problem, resolved)
        prepared = candidate.prepare(problem, resolved)
    except Unsupported as exc:  # a refusal; a bare ValueError is a bug in prepare, below
        return done("unsupported", str(exc))
    except Exception as exc:
        return done("error", f"prepare raised {type(exc).__name__}: {exc}")
    timer = env.timer_for(candidate.family, resolved)
    reuse = first_launch_is_a_sample(candidate.family, resolved)
    try:
        first = timer.time(prepared.launch)
        got = prepared.result()
    except Exception as exc:
        return done("error", f"launch/result raised {type(exc).__name__}: {exc}")
    verdict = data.verdict(prepared, got, block_size)
    row.update(correct=verdict.ok, max_abs_err=verdict.max_abs_err)
    if not verdict.ok:
        return done("wrong", verdict.report.replace("\n", " | "))
    try:
        parts = launch_parts(prepared)
    except Exception as exc:
        return done("error", f"launch_parts raised {type(exc).__name__}: {exc}")
    part_first = []
    if parts:  # the parts in order must compute what launch() computes
        try:
            part_first = [timer.time(part) for _, part in parts]
            parts_verdict = data.verdict(prepared, prepared.result(), block_size)
        except Exception as exc:
            return done("error", f"launch_parts()'s launches raised {type(exc).__name__}: {exc}")
        if not parts_verdict.ok:
            return done("wrong", "launch_parts() run in order differs from the reference: "
                        + parts_verdict.report.replace("\n", " | "))
    flush = env.flush if resolved == "gpu" else None
    try:
        stats = timing.measure(prepared.launch, timer, config, flush=flush, prior=(first,) if reuse else ())
        part_stats = [(name, timing.measure(part, timer, config, flush=flush, prior=(seconds,) if reuse else ()))
                      for (name, part), seconds in zip(parts, part_first)]
    except Exception as exc:
        return done("error", f"timing raised {type(exc).__name__}: {exc}")
    try:
        nbytes = point_bytes(prepared, problem)
    except Exception as exc:
        return done("error", f"bytes_moved() raised {type(exc).__name__}: {exc}")
    gbps = bandwidth.kernel_gbps(nbytes, stats.median)
    if traffic_device is not None and not candidate.per_shape:
        traffic_columns.record(row, candidate.name, problem, traffic_device, getattr(candidate, "config", None))
    flops = problem.flops() if hasattr(problem, "flops") else None  # MLA: exact FLOPs, for memory- vs compute-bound
    return done("ok", candidate.note(), time_us=stats.median * 1e6, flops=flops, iqr_us=stats.iqr * 1e6, q1_us=stats.q1 * 1e6,
                q3_us=stats.q3 * 1e6, min_us=stats.min * 1e6, repeats=stats.repeats, bytes=nbytes, gbps=gbps,
                fraction_of_copy_bw=(gbps / env.copy.gbps) if env.copy else None,
                fraction_of_read_bw=(gbps / env.read.gbps) if env.read else None,
                partition_us=part_stats[0][1].median * 1e6 if part_stats else None,
                parts_us=" ".join(f"{name}={s.median * 1e6:.3f}" for name, s in part_stats) or None)


def first_launch_is_a_sample(family: str, resolved: str) -> bool:
    """Whether a point's correctness launch is also its first timed call: on the CPU where nothing compiles in
    a launch (the Numba simulator, NumPy, Triton's interpreter; the executor builds a CUDA C kernel at its first
    launch, and a GPU compiles and warms up), so a simulated point that takes longer than the budget runs once,
    not twice."""
    return not is_peer(family) and not registry.family(family).first_launch_compiles(resolved)


def point_bytes(prepared, problem) -> int:
    """The bytes a point's GB/s counts: the prepared object's own bytes_moved() where it has one (a cascade
    reads each group's shared prefix once), else problem.bytes_moved() (every token read once per sequence)."""
    method = getattr(prepared, "bytes_moved", None)
    if not callable(method):
        return problem.bytes_moved()
    nbytes = method()
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
        raise TypeError(f"bytes_moved() must return a positive int, got {nbytes!r}")
    return int(nbytes)


def launch_parts(prepared) -> list:
    """[(name, callable)] from prepared.launch_parts() (sandbox/variant/limits.py's protocol), or [] without it."""
    method = getattr(prepared, "launch_parts", None)
    if method is None:
        return []
    parts = [(str(name), fn) for name, fn in method()]
    if not all(callable(fn) for _, fn in parts):
        raise TypeError("launch_parts() must return (name, callable) pairs")
    return parts


def add_paging_overhead(row: dict, dense_times: dict, dense_name: str) -> None:
    """time / dense time at the same shape, backend and block size (else the same shape at any block size)."""
    if row["status"] != "ok" or row["block_size"] is None:
        return
    key = (row["shape"], row["backend"])
    if row["variant"] == dense_name:
        dense_times.setdefault(key, {})[row["block_size"]] = row["time_us"]
        return
    same_shape = dense_times.get(key)
    if not same_shape:
        return
    dense = same_shape.get(row["block_size"])
    if dense is None:
        dense = next(iter(same_shape.values()))
        row["note"] = (row["note"] + "; " if row["note"] else "") + "dense baseline from another block size"
    row["dense_time_us"] = dense
    row["paging_overhead"] = row["time_us"] / dense


def ordered_candidates(names: list[str], dense_name: str) -> list[Candidate]:
    """Registry candidates with the dense baseline first (so paged rows find its time at once)."""
    names = sorted(names, key=lambda n: n != dense_name)
    return [Candidate.from_registry(n) for n in names]


@dataclasses.dataclass
class SweepOutcome:
    run_dir: Path
    rows: list[dict]
    interrupted: bool
    goals: dict
    summary: str
    without_ok: list = dataclasses.field(default_factory=list)  # selected variants with no ok point

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.rows if r["status"] in FAILED and not is_peer(r["family"])]

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failed or self.without_ok else 0


def variants_without_ok(rows: list[dict], variants: list[str], not_raced: set = frozenset()) -> list[str]:
    """Selected variants none of whose points is ok while none was skipped for time: nothing measured them
    (every point unsupported: a block size or head dim nobody supports, a backend missing here). A variant
    left out on purpose (`not_raced`: CPU-only variants in a GPU sweep) does not count."""
    out = []
    for name in variants:
        mine = [r for r in rows if r["variant"] == name]
        if name in not_raced or any(r["status"] in ("ok", "skipped") for r in mine):
            continue
        if mine and all(is_peer(r["family"]) for r in mine):  # a peer without its wheel: said, not failed
            continue
        out.append(name)
    return out


def validate(config: "SweepConfig") -> None:
    """Refuse what cannot be run, before a run folder exists (ValueError, one line)."""
    traffic_columns.wanted(config.traffic, False)  # ValueError naming --traffic
    try:
        gpus.get(config.model_device)
    except ValueError as exc:
        raise RefusedRequest(f"--model-device {config.model_device}: {exc}") from None
    bad = [b for b in config.block_sizes if not 1 <= b <= MAX_BLOCK_SIZE]
    if bad:
        raise RefusedRequest(f"--block-sizes {','.join(map(str, bad))}: block sizes must be integers in "
                             f"1..{MAX_BLOCK_SIZE} (got {','.join(map(str, config.block_sizes))})")
    if not config.block_sizes:
        raise RefusedRequest("--block-sizes: no block size given")
    backends.require_gpu_if_asked(config.backend)


def estimate_points(config: "SweepConfig") -> None:
    """Each shape's cost per CPU family (sandbox/devices/cost.py), before anything is created: announced past
    the warning bound, refused (ValueError) past the hard one unless config.force."""
    families = {}
    for name in config.variants:
        variant = registry.get(name)
        families.setdefault((variant.family, variant.problem), name)
    for shape in config.shapes:
        for (family, kind), name in families.items():
            if kind != shape_kind(shape):
                continue
            try:
                backend = registry.family(family).resolve(config.backend)
            except ValueError:
                continue  # not runnable here: the point says so
            cost.guard(f"sweep shape {shape.name} ({family} variants, per block size)", cost.shape_multiply_adds(shape),
                       family, backend, config.force, warn=lambda line: print(line, file=sys.stderr, flush=True))


def _progress(total: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="pt", file=sys.stderr, disable=not enabled, dynamic_ncols=True,
                desc="sweep", leave=True)


def _log_via(bar) -> Callable[[str], None]:
    if bar is not None:
        return lambda msg: bar.write(msg, file=sys.stderr)
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def run_sweep(config: SweepConfig, argv: list[str] | None = None, point_hook: Callable[[dict], None] | None = None
              ) -> SweepOutcome:
    """Run the whole sweep into a new results/<UTC>-sweep/ folder; see the module docstring.

    ValueError (before any folder is created) for a request that cannot run: see validate().
    """
    validate(config)
    tuning = tune_mod.prepare(config)  # a bad --config / --tuned: ValueError before any folder exists
    estimate_points(config)  # a point estimated past the hard bound: ValueError, unless --force
    on_gpu = config.backend != "cpu" and backends.gpu_present()
    try:
        run_dir = new_run_dir("sweep", root=config.results_dir)
    except OSError as exc:
        where = config.results_dir if config.results_dir is not None else "the results folder"
        raise RefusedRequest(f"--results-dir {where}: cannot create a run folder there "
                             f"({exc.strerror or type(exc).__name__}: {exc.filename or ''})") from None
    meta = meta_mod.collect(argv, config.seed, on_gpu)
    meta["config"] = config.describe()
    meta_mod.write(run_dir / "meta.json", meta)

    candidates = ordered_candidates(config.variants, config.dense_baseline)
    candidates += [Candidate.from_peer(p) for p in peers.peers(on_gpu, config.torch)]
    total = sum(1 if c.per_shape else len(config.block_sizes)
                for shape in config.shapes for c in candidates if c.problem == shape_kind(shape))
    bar = _progress(total, config.progress)
    log = _log_via(bar)
    log(f"sweep: {len(candidates)} variants x {len(config.block_sizes)} block sizes x {len(config.shapes)} shapes "
        f"on {'the GPU' if on_gpu else 'the CPU (emulation: times are not GPU performance)'} -> {run_dir}")
    for line in peers.unavailable(on_gpu, config.torch):
        log(line)
    env = Environment.create(on_gpu, config.quick, log)
    if config.tune:
        tuning = tune_mod.Tuning.explore(run_dir, on_gpu)
    meta["copy_bandwidth"] = env.copy.as_dict() if env.copy else None
    meta["read_bandwidth"] = env.read.as_dict() if env.read else None
    meta["l2_flush_bytes"] = getattr(env.flush, "nbytes", None)
    meta_mod.write(run_dir / "meta.json", meta)

    resolved = {}
    not_raced = set()
    for c in candidates:
        try:
            resolved[c.name] = (registry.family(c.family).resolve(config.backend) if c.family != "torch" else "gpu", None)
        except ValueError as exc:
            resolved[c.name] = (None, str(exc))
        if on_gpu and resolved[c.name][0] == "cpu":
            resolved[c.name] = (None, "runs on the CPU only: not raced in a GPU sweep (--backend cpu runs it)")
            not_raced.add(c.name)

    deadline = time.monotonic() + config.max_seconds if config.max_seconds else None
    rows: list[dict] = []
    dense_times: dict = {}
    interrupted = False
    csv = CsvAppender(run_dir / "sweep.csv", COLUMNS)
    try:
        for shape in config.shapes:
            kind = shape_kind(shape)
            data = kinds.named(kind).part("shape_data")(shape, config.seed)
            for index, block_size in enumerate(config.block_sizes):
                for c in candidates:
                    if (c.per_shape and index > 0) or c.problem != kind:  # a decode variant at an MLA shape: no row
                        continue
                    backend, why_not = resolved[c.name]
                    if bar is not None:
                        bar.set_postfix_str(f"{shape.name} bs={block_size} {c.name}", refresh=False)
                    if deadline is not None and time.monotonic() > deadline:
                        row = _blank_row(c, shape, None if c.per_shape else block_size,
                                         backend_label(c.family, backend or "cpu"), on_gpu)
                        row.update(status="skipped", note=f"time budget (--max-seconds {config.max_seconds:g}) spent")
                    elif backend is None:
                        row = _blank_row(c, shape, None if c.per_shape else block_size,
                                         backend_label(c.family, "cpu"), on_gpu)
                        row.update(status="unsupported", note=why_not)
                    else:
                        timing_config = config.gpu_timing if backend == "gpu" else config.cpu_timing
                        counted = traffic_columns.wanted(config.traffic, shape is config.shapes[0], on_gpu, block_size)
                        point = (tuning.candidate(c, data, block_size, backend, env, timing_config)
                                 if tuning is not None else c)
                        row = run_point(point, backend, data, block_size, env, timing_config,
                                        config.model_device if counted else None)
                        row["config"] = point.config
                        if not counted and row["status"] == "ok" and not c.per_shape:
                            row["traffic_note"] = traffic_columns.skipped_note(config.traffic, c.name)
                        if tuning is not None:
                            tuning.record(row)
                        add_paging_overhead(row, dense_times, config.dense_baseline)
                    csv.write(row)
                    rows.append(row)
                    if row["status"] in FAILED:
                        log(f"!!! {row['status'].upper()}: {row['variant']} at {shape.name} block_size={block_size}: "
                            f"{row['note'][:400]}")
                    if bar is not None:
                        bar.update()
                    if point_hook is not None:
                        point_hook(row)
                if on_gpu:
                    device.free_device_memory()
            del data
    except KeyboardInterrupt:
        interrupted = True
        log(f"interrupted: {len(rows)} points kept in {run_dir / 'sweep.csv'}")
    finally:
        csv.close()
        if bar is not None:
            bar.close()
    return finish(config, run_dir, rows, meta, env, on_gpu, interrupted, log, not_raced)


def finish(config, run_dir: Path, rows: list[dict], meta: dict, env: Environment, on_gpu: bool,
           interrupted: bool, log, not_raced: set = frozenset()) -> SweepOutcome:
    """Resources, goals, plots, summary and the final meta.json (also after an interruption)."""
    resource_rows = []
    goal_report = goals_mod.evaluate(rows, on_gpu, config.dense_baseline)
    try:  # the slow, optional parts: a (second) Ctrl-C skips them, and summary.txt is still written below
        if config.resources and not interrupted:
            # --quick: float16 only (each other precision is one more compilation and census of every kernel)
            resource_rows, note = static_resources.collect_into(
                run_dir, config.variants, config.block_sizes,
                extra=() if config.quick else static_resources.EXTRA_PRECISIONS, progress=config.progress)
            meta["resources"] = note
            if note:
                log(note)
        (run_dir / "goals.json").write_text(goals_mod.to_json(goal_report))
        if config.plots:
            meta["plots"] = plots.write_all(run_dir, rows, resource_rows, env.copy, on_gpu, meta.get("gpu"), log,
                                            config.dense_baseline, config.model_device)
    except KeyboardInterrupt:
        interrupted = True
        log(f"interrupted during clean-up: resources and plots skipped; writing {run_dir / 'summary.txt'}")
    shape_kinds = {shape_kind(shape) for shape in config.shapes}  # a variant whose kind has no shape here: not raced
    raced = [n for n in config.variants if registry.get(n).problem in shape_kinds]
    without_ok = [] if interrupted else variants_without_ok(rows, raced, not_raced)
    text = summary_mod.render(rows, env.copy, on_gpu, meta.get("gpu"), goal_report, config.dense_baseline,
                              resource_rows, read=env.read, interrupted=interrupted, without_ok=without_ok,
                              model_device=config.model_device)
    (run_dir / "summary.txt").write_text(text + "\n")
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    meta.update(end_utc=meta_mod.utc_now(), interrupted=interrupted, points=counts, goals=goal_report,
                variants_without_ok=without_ok)
    meta_mod.write(run_dir / "meta.json", meta)
    return SweepOutcome(run_dir, rows, interrupted, goal_report, text, without_ok)
