"""Serve one workload at every (allocator, width, rate): the points, the max rates, one run folder.

``run_serving(config)`` builds the requests once (the same requests and arrival pattern at every rate
and allocator: common random numbers), simulates each point with a fresh allocator and engine,
appends a ``points.csv`` row and the point's memory samples to ``timeline.csv`` as each point
finishes, then writes ``result.json``, ``meta.json`` and the plots (``sandbox.serving.plots``).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from sandbox.commands.kv_budget import KVBudget
from sandbox.memory import beam
from sandbox.memory.arena import RESERVE_POLICIES
from sandbox.memory.waste import CATEGORIES
from sandbox.results import CsvAppender, new_run_dir
from sandbox.serving.cost import ModelShape, make_cost_model
from sandbox.serving.engine import Engine, EngineConfig
from sandbox.serving.group import Group
from sandbox.serving.kv_contiguous import ContiguousKV
from sandbox.serving.kv_paged import PagedKV
from sandbox.serving.metrics import max_rate, summarize
from sandbox.serving.workloads import DEFAULT_LENGTHS, WorkloadSpec, build_requests, count_requests, with_rate

POINT_FIELDS = ["allocator", "name", "width", "rate", "requests", "throughput", "output_tokens_per_s",
                "normalized_latency", "normalized_latency_p50", "normalized_latency_p99", "ttft", "ttft_p50",
                "ttft_p99", *[f"{c}_share" for c in CATEGORIES], "mean_running_seqs", "peak_running_seqs",
                "preemptions", "recompute_preemptions", "swap_preemptions", "recomputed_tokens", "recompute_seconds",
                "swapped_bytes", "swap_seconds", "prefix_hit_rate", "sharing_saved", "steps", "simulated_s", "wall_s",
                "ok"]
TIMELINE_FIELDS = ["name", "rate", "t", "tokens", "reserved", "internal", "external", "running_seqs"]


@dataclass
class ServingConfig:
    workload: WorkloadSpec
    budget: KVBudget
    rates: tuple[float, ...] | None = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)   # None: a trace's own arrival times
    latency_bound: float = 0.05
    block_sizes: tuple[int, ...] = (16,)
    reserves: tuple[str, ...] = RESERVE_POLICIES
    widths: tuple[int, ...] = (1,)
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    preemption: str = "recompute"
    swap_gb: float = 4.0
    swap_gbps: float = 32.0
    prefix_cache: bool = True
    step_cost: str = "analytic"
    fixed_ms: float | None = None
    params_b: float = 13.0
    beam_survival: float = beam.SURVIVAL
    seed: int = 0
    args: dict = field(default_factory=dict)

    def shape(self) -> ModelShape:
        b = self.budget
        return ModelShape(b.num_layers, b.num_kv_heads, b.head_dim, b.dtype_bytes, self.params_b * 1e9)

    def allocators(self) -> list:
        """Factories of fresh allocators, paged block sizes first."""
        b, swap = self.budget, self.swap_blocks
        out = [lambda bs=bs: PagedKV(b.tokens, bs, prefix_cache=self.prefix_cache, swap_blocks=swap(bs))
               for bs in self.block_sizes]
        return out + [lambda p=p: ContiguousKV(b.tokens, self.workload.max_len, p) for p in self.reserves]

    def swap_blocks(self, block_size: int) -> int:
        return int(self.swap_gb * 1e9 // (block_size * self.budget.bytes_per_token))


def point_name(kv_name: str, workload: str, width: int) -> str:
    return kv_name if workload not in ("parallel", "beam") else f"{kv_name}-{'n' if workload == 'parallel' else 'k'}{width}"


def native_rate(arrivals) -> float:
    """Requests per second of a trace's own arrival times: (count - 1) / span."""
    span = float(max(arrivals) - min(arrivals))
    if not span > 0:
        raise ValueError("the trace's arrival times are all equal: give --rates to spread them")
    return (len(arrivals) - 1) / span


def check_fits(config: ServingConfig, requests, cost) -> None:
    """Refuse, before anything runs, a request no allocator could ever hold, or an unmeasured block size."""
    if hasattr(cost, "check_block_sizes"):
        cost.check_block_sizes(config.block_sizes)
    for make in config.allocators():
        kv = make()
        for r in requests:
            while r is not None:
                if not kv.fits_alone(Group(r, 0.0)):
                    raise ValueError(f"request {r.rid} ({len(r.prompt)} + {len(r.output)} tokens x {r.width}) can "
                                     f"never fit {kv.name}'s KV budget of {config.budget.tokens:,} tokens")
                r = r.follow_up


def run_serving(config: ServingConfig, results_root: Path | None = None, show_progress: bool = True) -> dict:
    from tqdm import tqdm

    from sandbox.serving.plots import plot_all

    cost = make_cost_model(config.step_cost, config.shape(), config.fixed_ms)
    base = {w: build_requests(_with_width(config.workload, w), config.seed) for w in config.widths}
    trace = config.workload.trace
    rates = config.rates or (native_rate(trace[2][:config.workload.num_requests]),)
    for requests in base.values():
        check_fits(config, requests, cost)
    run_dir = new_run_dir("serving", root=results_root)
    meta = _meta(config, cost, rates, base, run_dir)
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    engine_config = EngineConfig(config.budget.bytes_per_token, config.max_num_seqs, config.max_batched_tokens,
                                 config.preemption, config.swap_gbps, config.beam_survival, seed=config.seed)
    factories = config.allocators()
    total = len(factories) * len(rates) * len(config.widths)
    bar = tqdm(total=total, desc="serving", unit="point", disable=not show_progress, leave=False)
    allocators: dict[str, dict] = {}
    timelines: dict[tuple, list] = {}
    t_start = time.perf_counter()
    with CsvAppender(run_dir / "points.csv", POINT_FIELDS) as rows, \
            CsvAppender(run_dir / "timeline.csv", TIMELINE_FIELDS) as samples:
        for width, requests in base.items():
            for make in factories:
                for rate in rates:
                    kv = make()
                    name = point_name(kv.name, config.workload.name, width)
                    bar.set_postfix_str(f"{name} at {rate:g} req/s")
                    t0 = time.perf_counter()
                    engine = Engine(kv, cost, engine_config, with_rate(requests, rate)).run()
                    point = summarize(engine, rate, time.perf_counter() - t0)
                    point.update(name=name, width=width,
                                 ok=len(engine.done) == count_requests(requests) and not kv.leaked())
                    rows.write(point)
                    for s in engine.tally.timeline:
                        samples.write(dict(zip(TIMELINE_FIELDS, (name, rate, *s))))
                    timelines[(name, rate)] = engine.tally.timeline
                    entry = allocators.setdefault(name, dict(allocator=kv.name, width=width, points=[]))
                    entry["points"].append(point)
                    bar.update()
    bar.close()
    for entry in allocators.values():
        entry["max_rate"], entry["max_rate_interpolated"] = max_rate(entry["points"], config.latency_bound)
    meta["seconds"] = time.perf_counter() - t_start
    result = dict(meta=meta, allocators=allocators, run_dir=str(run_dir))
    result["plots"] = [str(p) for p in plot_all(result, timelines, run_dir)]
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return result


def _with_width(spec: WorkloadSpec, width: int) -> WorkloadSpec:
    return replace(spec, width=width)


def _meta(config: ServingConfig, cost, rates, base, run_dir: Path) -> dict:
    wl = config.workload
    return dict(
        workload=wl.name, lengths=("trace" if wl.trace is not None else wl.lengths or DEFAULT_LENGTHS[wl.name]),
        requests=count_requests(next(iter(base.values()))), max_len=wl.max_len, seed=config.seed,
        rates=list(rates), latency_bound=config.latency_bound, widths=list(config.widths),
        budget_tokens=config.budget.tokens, budget_note=config.budget.note,
        kv_bytes_per_token=config.budget.bytes_per_token, step_cost=cost.source, preemption=config.preemption,
        swap_gb=config.swap_gb, swap_gbps=config.swap_gbps, max_num_seqs=config.max_num_seqs,
        max_batched_tokens=config.max_batched_tokens, prefix_cache=config.prefix_cache,
        prefix_len=wl.prefix_len if wl.name == "shared-prompt" else None,
        turns=wl.turns if wl.name == "chat" else None, beam_survival=config.beam_survival,
        args=config.args, run_dir=str(run_dir))
