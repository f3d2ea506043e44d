"""sweep --tune / --tuned RUN / --config: which tunables (sandbox.variant.tunables) each point runs with.

    Tuning.fixed(variants, config)        every point of the named variants with one configuration (--config)
    Tuning.explore(run_dir, on_gpu)       --tune: each variant's whole grid tried per (shape, block size)
    Tuning.read(run, variants)            --tuned RUN: the best configuration RUN/tuned.json recorded per point
    tuning.candidate(c, data, bs, ...)    the candidate of one point, its configuration bound; tuning.record(row)

--tune ranks the configurations of a variant's grid (the default first) at each (shape, block size): on a GPU by
the median GPU time of prepare + timed launches (a wrong output disqualifies a configuration), on the CPU by the
modelled GPU time of its memory traffic (sandbox.traffic(name, problem, config=)["model"]["time_us"], with each
configuration's compile census: its occupancy and its loads in flight; the CPU's emulation times say nothing about a
GPU). The winner is printed as each point is tuned. The sweep's row for the point then runs the best one, and tuned.json
(rewritten as each point finishes) records it with every configuration's score, or why it was refused. A
variant without tunables is not explored (one configuration).

tuned.json: {"objective": "gpu_time_us" | "model_time_us", "points": [{"variant", "shape", "block_size",
"config": {...}, "ranked": [{"config": {...}, "score": float} | {"config": {...}, "refused": "why"}]}]}.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ...variant import registry, tunables
from ...variant.limits import Unsupported
from ...analysis.traffic.variant import traffic
from ...errors import RefusedRequest
from . import timing

TUNED_FILE = "tuned.json"


@dataclasses.dataclass
class Tuning:
    mode: str                                   # "fixed", "explore" or "read"
    configs: dict = dataclasses.field(default_factory=dict)   # fixed: {variant: config}
    tuned: dict = dataclasses.field(default_factory=dict)     # read: {(variant, shape, block_size): config}
    path: Path | None = None                    # explore: where tuned.json is written
    objective: str = ""
    points: list = dataclasses.field(default_factory=list)
    _pending: dict = dataclasses.field(default_factory=dict)  # explore: the point being run

    @classmethod
    def fixed(cls, variants, config: dict) -> "Tuning":
        """--config for every selected variant (resolved now: a bad one is a ValueError before the run)."""
        return cls("fixed", configs={name: tunables.resolve(name, registry.get(name).module, config)
                                     for name in variants})

    @classmethod
    def explore(cls, run_dir: Path, on_gpu: bool) -> "Tuning":
        tuning = cls("explore", path=Path(run_dir) / TUNED_FILE, objective="gpu_time_us" if on_gpu else "model_time_us")
        tuning._write()
        return tuning

    @classmethod
    def read(cls, run, variants) -> "Tuning":
        """--tuned RUN (a run folder or its tuned.json): ValueError naming the file when it cannot be used."""
        path = Path(run)
        path = path / TUNED_FILE if path.is_dir() else path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            points = data["points"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RefusedRequest(f"--tuned {run}: no readable {TUNED_FILE} ({type(exc).__name__}: {exc}); "
                                 "a `sweep --tune` run folder has one") from None
        if not isinstance(points, list):
            raise RefusedRequest(f"{path}: \"points\" must be a list of points, got {type(points).__name__}")
        tuned = {}
        for i, point in enumerate(points):
            name, shape, block_size, config = _tuned_point(path, i, point)
            if name not in variants:
                continue
            tunables.resolve(name, registry.get(name).module, config)  # a value the variant does not declare: refused
            tuned[(name, shape, block_size)] = config
        return cls("read", tuned=tuned, objective=data.get("objective", "") if isinstance(data, dict) else "")

    def config_of(self, name: str, shape: str, block_size: int) -> tuple[dict | None, str]:
        """(configuration, note) of a point that is not explored."""
        if self.mode == "fixed":
            return self.configs.get(name), ""
        config = self.tuned.get((name, shape, block_size))
        if config is None:
            return None, "no tuned configuration for this point: defaults"
        return config, ""

    def candidate(self, c, data, block_size: int, resolved: str, env, timing_config):
        """The candidate of one point with its configuration bound (and, exploring, the grid ranked first)."""
        if c.per_shape or c.family == "torch":
            return c
        module = registry.get(c.name).module
        if self.mode == "explore":
            config, ranked, note = explore_point(c, module, data, block_size, resolved, env, timing_config)
            if ranked:  # the winner, said as each point is tuned
                print(f"tune: {c.name} at {data.shape.name} block size {block_size}: {note}", flush=True)
            self._pending = dict(variant=c.name, shape=data.shape.name, block_size=block_size, config=config,
                                 ranked=ranked)
        else:
            config, note = self.config_of(c.name, data.shape.name, block_size)
        resolved_config = tunables.resolve(c.name, module, config)
        base = c.prepare_with

        def prepare(problem, backend):
            return base(problem, backend, resolved_config)

        label = tunables.describe(resolved_config)
        return dataclasses.replace(c, prepare=prepare, config=label,
                                   note=(lambda: note) if note else c.note)

    def record(self, row: dict) -> None:
        """After a point: its configuration into the row, and (exploring) into tuned.json."""
        if self.mode != "explore" or not self._pending:
            return
        if self._pending["variant"] == row["variant"]:
            self.points.append(self._pending)
            self._write()
        self._pending = {}

    def _write(self) -> None:
        self.path.write_text(json.dumps(dict(objective=self.objective, points=self.points), indent=1, default=str))


def _tuned_point(path: Path, i: int, point) -> tuple[str, str, int, dict]:
    """(variant, shape, block_size, config) of tuned.json's point i; RefusedRequest naming the file and field."""
    where = f"{path}: points[{i}]"
    if not isinstance(point, dict):
        raise RefusedRequest(f"{where} must be an object with variant, shape, block_size and config, got {point!r}")
    for field in ("variant", "shape", "block_size"):
        if field not in point:
            raise RefusedRequest(f"{where} has no {field!r}")
    name, shape, block_size, config = point["variant"], point["shape"], point["block_size"], point.get("config") or {}
    if not isinstance(name, str) or not isinstance(shape, str):
        raise RefusedRequest(f"{where}: variant and shape must be strings, got {name!r} and {shape!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise RefusedRequest(f"{where}.block_size must be an integer >= 1, got {block_size!r}")
    if not isinstance(config, dict):
        raise RefusedRequest(f"{where}.config must be an object NAME: VALUE, got {config!r}")
    return name, shape, block_size, config


def prepare(config) -> "Tuning | None":
    """The sweep's Tuning before its run folder exists (a bad --config or --tuned is a ValueError now), or None
    (every point with its defaults). Exploring, run_sweep makes it with explore() once the folder exists."""
    chosen = [flag for flag, value in (("--tune", config.tune), ("--tuned", config.tuned),
                                       ("--config", config.config)) if value]
    if len(chosen) > 1:
        raise RefusedRequest(f"{' and '.join(chosen)}: give one of --tune, --tuned RUN and --config")
    if config.tuned:
        return Tuning.read(config.tuned, config.variants)
    if config.config:
        return Tuning.fixed(config.variants, config.config)
    return None


def explore_point(c, module, data, block_size: int, resolved: str, env, timing_config):
    """(best configuration, ranked list, note) over the variant's grid at one point."""
    grid = tunables.grid(module)
    if len(grid) == 1:
        return grid[0], [], ""
    problem = data.problem(block_size)
    on_gpu = resolved == "gpu"
    ranked = []
    for config in grid:
        try:
            c.limits.check(c.name, problem, resolved)
            score = (_gpu_time_us(c, problem, data, block_size, resolved, env, timing_config, config) if on_gpu
                     else _model_time_us(c.name, problem, config))
            ranked.append(dict(config=config, score=score))
        except Unsupported as exc:
            ranked.append(dict(config=config, refused=str(exc)[:300]))
        except Exception as exc:  # one configuration failing must not stop the others; the row reruns the best
            ranked.append(dict(config=config, refused=f"{type(exc).__name__}: {exc}"[:300]))
    scored = [r for r in ranked if "score" in r]
    if not scored:
        return grid[0], ranked, "no configuration of the grid ran: defaults"
    best = min(scored, key=lambda r: r["score"])
    unit = "us GPU" if on_gpu else "us modelled"
    winner = (f"tuned over {len(grid)} configurations: {tunables.describe(best['config'])} wins at "
              f"{best['score']:.2f} {unit}")
    return best["config"], ranked, winner


def _model_time_us(name: str, problem, config: dict) -> float:
    # With the census: each configuration's own compile gives its occupancy and the loads its warps keep in
    # flight (read from its SASS), so a tunable that changes either is seen.
    return float(traffic(name, problem, census=True, config=config)["model"]["time_us"])


def _gpu_time_us(c, problem, data, block_size, resolved, env, timing_config, config) -> float:
    prepared = c.prepare_with(problem, resolved, config)
    prepared.launch()
    verdict = data.verdict(prepared, prepared.result(), block_size)
    if not verdict.ok:
        raise RuntimeError(f"wrong output with {tunables.describe(config)}: {verdict.report.splitlines()[0]}")
    stats = timing.measure(prepared.launch, env.timer_for(c.family, resolved), timing_config, flush=env.flush)
    return stats.median * 1e6
