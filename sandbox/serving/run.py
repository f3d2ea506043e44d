"""Serve one workload on every (allocator, width) and find each one's highest sustained rate; one run folder.

``run_serving(config)`` builds each seed's requests once (the same requests and arrival pattern at every
rate and allocator: common random numbers), then per allocator, width and seed searches for the knee
(``sandbox.serving.search``: a scan of the rate grid, the search extended past its top, bisection),
simulating each rate it tries with a fresh allocator and engine. Every simulated point is appended to
``points.csv`` as it finishes (seed 0's memory samples to ``timeline.csv``); then ``result.json``
(per allocator: ``max_rate``, ``max_rate_ci``, ``max_rate_censored``, the knee of each seed and every
point), ``meta.json`` and the plots (``sandbox.serving.plots``).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from sandbox.memory import beam
from sandbox.memory.arena import RESERVE_POLICIES
from sandbox.memory.budget import KVBudget, ModelShape
from sandbox.memory.waste import CATEGORIES
from tqdm import tqdm

from sandbox.results import CsvAppender, new_run_dir
from sandbox.serving import search
from sandbox.serving.swap_study import swap_vs_recompute
from sandbox.serving.cost import SwapCost, default_swap_latency_s
from sandbox.serving.cost_sources import make_cost_model
from sandbox.serving.engine import Engine, EngineConfig
from sandbox.serving.group import Group
from sandbox.serving.kernel_time import KernelTable, KernelTimeCost
from sandbox.serving.kv_contiguous import ContiguousKV
from sandbox.serving.kv_paged import PagedKV
from sandbox.serving.plots import plot_all
from sandbox.serving.metrics import WARMUP, summarize
from sandbox.serving.workloads import WORKLOADS, WorkloadSpec, build_requests, count_requests, with_rate
from sandbox.errors import RefusedRequest

POINT_FIELDS = ["allocator", "name", "width", "seed", "rate", "requests", "measured_requests", "throughput",
                "output_tokens_per_s", "normalized_latency", "normalized_latency_p50", "normalized_latency_p99",
                "ttft", "ttft_p50", "ttft_p99", *[f"{c}_share" for c in CATEGORIES], "mean_running_seqs",
                "peak_running_seqs", "preemptions", "recompute_preemptions", "swap_preemptions", "recomputed_tokens",
                "recompute_seconds", "swapped_bytes", "swap_seconds", "prefix_hit_rate", "sharing_saved", "steps",
                "simulated_s", "wall_s", "ok"]
TIMELINE_FIELDS = ["name", "rate", "t", "tokens", "reserved", "internal", "external", "running_seqs"]


@dataclass
class ServingConfig:
    workload: WorkloadSpec
    budget: KVBudget
    rates: tuple[float, ...] | None = WORKLOADS["sharegpt"].rates   # the search's grid; None: a trace's own times
    latency_bound: float = 0.05
    block_sizes: tuple[int, ...] = (16,)
    reserves: tuple[str, ...] = RESERVE_POLICIES     # and "static": static batching with max-length reservations
    widths: tuple[int, ...] = (1,)
    max_num_seqs: int = 256
    max_batched_tokens: int = 2048
    preemption: str = "recompute"
    swap_gb: float = 4.0
    swap_gbps: float = 32.0
    swap_latency_us: float | None = None     # None: the device table's launch cost
    prefix_cache: bool = True
    step_cost: str = "analytic"
    kernel: tuple[str, ...] = ()             # variants whose traffic model sets the block-size ratio
    kernel_curves: tuple[tuple[str, ...], ...] = ()   # more --kernel curves: paged allocators only, beside `kernel`
    fixed_ms: float | None = None
    overhead_ms: float = 0.0
    params_b: float | None = None           # None: 13, or the budget's model preset
    beam_survival: float = beam.SURVIVAL
    seed: int = 0
    seeds: int = 1
    warmup: float = WARMUP
    rel_tol: float = search.REL_TOL
    args: dict = field(default_factory=dict)

    def shape(self) -> ModelShape:
        return self.budget.shape(None if self.params_b is None else self.params_b * 1e9)

    def allocators(self) -> list:
        """Factories of fresh allocators, paged block sizes first."""
        b, swap = self.budget, self.swap_blocks
        out = [lambda bs=bs: PagedKV(b.tokens, bs, prefix_cache=self.prefix_cache, swap_blocks=swap(bs))
               for bs in self.block_sizes]
        return out + [lambda p=p: ContiguousKV(b.tokens, self.workload.max_len, "max" if p == "static" else p,
                                               static=p == "static") for p in self.reserves]

    def swap_blocks(self, block_size: int) -> int:
        return int(self.swap_gb * 1e9 // (block_size * self.budget.bytes_per_token))

    def swap_cost(self) -> SwapCost:
        latency = default_swap_latency_s() if self.swap_latency_us is None else self.swap_latency_us * 1e-6
        return SwapCost(self.budget.bytes_per_token, self.swap_gbps * 1e9, latency, 2 * self.budget.num_layers)


def point_name(kv_name: str, workload: str, width: int) -> str:
    mode = WORKLOADS[workload].mode
    return kv_name if mode == "single" else f"{kv_name}-{'n' if mode == 'parallel' else 'k'}{width}"


def native_rate(arrivals) -> float:
    """Requests per second of a trace's own arrival times: (count - 1) / span."""
    span = float(max(arrivals) - min(arrivals))
    if not span > 0:
        raise RefusedRequest("the trace's arrival times are all equal: give --rates to spread them")
    return (len(arrivals) - 1) / span


def curve_label(variants: tuple[str, ...]) -> str:
    """The name of a --kernel curve: its variants joined by '+'."""
    return "+".join(variants)


def curve_name(kv_name: str, workload: str, width: int, kernel: str | None) -> str:
    """A point's name: its allocator's (point_name), and the kernel curve's label for an extra curve."""
    name = point_name(kv_name, workload, width)
    return name if kernel is None else f"{name} [{kernel}]"


def make_cost(config: ServingConfig, kernel: tuple[str, ...] | None = None):
    """The step-time source: --step-cost, or with --kernel the roofline scaled by the traffic model's ratio
    (``kernel`` given: that curve's variants instead of ``config.kernel``)."""
    kernel = kernel or config.kernel
    if kernel:
        table = KernelTable(kernel, config.shape(), config.block_sizes, config.workload.max_len)
        return KernelTimeCost(table, config.shape(), config.fixed_ms, config.overhead_ms)
    return make_cost_model(config.step_cost, config.shape(), config.fixed_ms, config.overhead_ms)


def check_fits(config: ServingConfig, requests, cost) -> None:
    """Refuse, before anything runs, a request no allocator could ever hold, or an unmeasured block size."""
    if hasattr(cost, "check_block_sizes"):
        cost.check_block_sizes(config.block_sizes)
    for make in config.allocators():
        kv = make()
        for r in requests:
            while r is not None:
                if not kv.fits_alone(Group(r, 0.0)):
                    raise RefusedRequest(f"request {r.rid} ({len(r.prompt)} + {len(r.output)} tokens x {r.width}) can "
                                         f"never fit {kv.name}'s KV budget of {config.budget.tokens:,} tokens")
                r = r.follow_up


def run_serving(config: ServingConfig, results_root: Path | None = None, show_progress: bool = True) -> dict:
    cost = make_cost(config)
    paged_count = len(config.block_sizes)
    # (allocator factory, its step cost, the kernel curve's label or None): every allocator at config.kernel,
    # then the paged ones again at each further kernel curve
    jobs = [(make, cost, None) for make in config.allocators()]
    for variants in config.kernel_curves:
        curve_cost = make_cost(config, variants)
        jobs += [(make, curve_cost, curve_label(variants)) for make in config.allocators()[:paged_count]]
    seeds = range(config.seed, config.seed + config.seeds)
    base = {(s, w): build_requests(replace(config.workload, width=w), s) for s in seeds for w in config.widths}
    trace = config.workload.trace
    own_rate = None if config.rates else native_rate(trace[2][:config.workload.num_requests])
    for requests in base.values():
        check_fits(config, requests, cost)
    run_dir = new_run_dir("serving", root=results_root)
    meta = _meta(config, cost, base, run_dir)
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    bar = tqdm(desc="serving", unit="point", disable=not show_progress, leave=False)
    allocators: dict[str, dict] = {}
    timelines: dict[tuple, list] = {}
    t_start = time.perf_counter()
    with CsvAppender(run_dir / "points.csv", POINT_FIELDS) as rows, \
            CsvAppender(run_dir / "timeline.csv", TIMELINE_FIELDS) as samples:
        for width in config.widths:
            for make, cost, kernel in jobs:
                knees = []
                for s in seeds:
                    engine_config = EngineConfig(config.budget.bytes_per_token, config.max_num_seqs,
                                                 config.max_batched_tokens, config.preemption, config.swap_cost(),
                                                 config.beam_survival, seed=s)

                    def latency(rate, s=s, engine_config=engine_config, make=make, cost=cost, kernel=kernel):
                        kv = make()
                        name = curve_name(kv.name, config.workload.name, width, kernel)
                        bar.set_postfix_str(f"{name} seed {s} at {rate:.3g} req/s")
                        t0 = time.perf_counter()
                        requests = base[(s, width)]
                        engine = Engine(kv, cost, engine_config, with_rate(requests, rate)).run()
                        point = summarize(engine, rate, time.perf_counter() - t0, config.warmup)
                        point.update(name=name, width=width, seed=s,
                                     ok=len(engine.done) == count_requests(requests) and not kv.leaked())
                        rows.write(point)
                        if s == config.seed:
                            for sample in engine.tally.timeline:
                                samples.write(dict(zip(TIMELINE_FIELDS, (name, rate, *sample))))
                            timelines[(name, rate)] = engine.tally.timeline
                        entry = allocators.setdefault(name, dict(allocator=kv.name, width=width, kernel=kernel,
                                                                 points=[]))
                        entry["points"].append(point)
                        bar.update()
                        return point["normalized_latency"]

                    if own_rate is not None:       # a trace's own times: that one rate, not a search
                        met = latency(own_rate) <= config.latency_bound
                        knees.append(search.Knee(own_rate if met else None, met))
                    else:
                        knees.append(search.find_knee(latency, config.rates, config.latency_bound, config.rel_tol))
                allocators[curve_name(make().name, config.workload.name, width, kernel)].update(search.combine(knees))
    bar.close()
    meta["seconds"] = time.perf_counter() - t_start
    main_cost = jobs[0][1]
    result = dict(meta=meta, allocators=allocators, run_dir=str(run_dir), ratios=paired_ratios(allocators),
                  swap_vs_recompute=swap_vs_recompute(config.swap_cost(), main_cost))
    result["plots"] = [str(p) for p in plot_all(result, timelines, run_dir)]
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return result


def paired_ratios(allocators: dict) -> list[dict]:
    """Every paged allocator's max rate over every baseline's of the same width, seed by seed."""
    out = []
    for name, top in allocators.items():
        if not top["allocator"].startswith("paged"):
            continue
        for base_name, base in allocators.items():
            if base["allocator"].startswith("paged") or base["width"] != top["width"]:
                continue
            ratio = search.paired_ratio(top, base)
            if ratio is not None:
                out.append(dict(paged=name, baseline=base_name, **ratio))
    return out


def _meta(config: ServingConfig, cost, base, run_dir: Path) -> dict:
    wl = config.workload
    return dict(
        workload=wl.name, lengths=("trace" if wl.trace is not None else wl.lengths or WORKLOADS[wl.name].lengths),
        requests=count_requests(next(iter(base.values()))), max_len=wl.max_len, seed=config.seed,
        seeds=config.seeds, warmup=config.warmup, rel_tol=config.rel_tol,
        rates=list(config.rates) if config.rates else None, latency_bound=config.latency_bound,
        widths=list(config.widths), block_sizes=list(config.block_sizes),
        budget_tokens=config.budget.tokens, budget_note=config.budget.note,
        kv_bytes_per_token=config.budget.bytes_per_token, step_cost=cost.source,
        kernel_table=cost.table.rows() if hasattr(cost, "table") else None,
        kernel=curve_label(config.kernel) if config.kernel else None,
        kernel_curves=[curve_label(v) for v in config.kernel_curves], preemption=config.preemption,
        swap_gb=config.swap_gb, swap_gbps=config.swap_gbps, swap=config.swap_cost().describe(),
        max_num_seqs=config.max_num_seqs, max_batched_tokens=config.max_batched_tokens,
        prefix_cache=config.prefix_cache, prefix_len=wl.prefix_len if wl.name == "shared-prompt" else None,
        turns=wl.turns if wl.name == "chat" else None, beam_survival=config.beam_survival,
        args=config.args, run_dir=str(run_dir))
