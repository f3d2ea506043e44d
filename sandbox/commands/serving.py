"""python -m sandbox serving: an online serving simulation of paged against contiguous KV allocation.

Requests of a workload arrive at each rate (Poisson, or a trace's arrival column), a vLLM-like
scheduler serves them on each allocator (``sandbox.serving``), a cost model times every step; the
summary gives each allocator's highest sustained rate under ``--latency-bound`` (mean over ``--seeds``
with a 95% interval, censored rates marked) with its latency, memory, preemption and cache figures,
and names the step-time source. Writes ``results/<UTC>-serving/``; ``--json FILE`` also writes the
result there. Every input is checked before anything runs or is written.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from sandbox.commands import block_size_list, numbers, outputs
from sandbox.commands.kv_budget import add_budget_arguments, budget_from_args
from sandbox.commands.study_args import check_results_dir, check_token_memory
from sandbox.errors import RefusedRequest
from sandbox.memory import beam, distributions, paper
from sandbox.memory.arena import RESERVE_POLICIES
from sandbox.serving import search
from sandbox.serving.kernel_time import best_variant
from sandbox.serving.metrics import WARMUP
from sandbox.serving.run import ServingConfig, run_serving
from sandbox.serving.search import knee_point
from sandbox.serving.workloads import WORKLOADS, WorkloadSpec

QUICK = dict(block_sizes=(16,), seeds=3, requests_factor=1)
FULL = dict(block_sizes=(8, 16, 32, 64, 128), seeds=5, requests_factor=4)
BASELINES = (*RESERVE_POLICIES, "static")
MAX_RATE = 1e5          # req/s: beyond any GPU's prefill rate; keeps simulated times finite


def number_list(kind):
    """argparse type: comma-separated numbers, each checked by `kind` (a numbers.real / numbers.integer)."""
    def parse(text: str) -> tuple:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"must list at least one number, got {text!r}")
        return tuple(sorted({kind(t) for t in items}))

    parse.__name__ = "list"
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=WORKLOADS, default="sharegpt", help="request structure (default sharegpt)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--lengths", choices=distributions.DISTRIBUTIONS,
                        help="length distribution (default: the workload's; parallel/beam/shared-prompt Alpaca-like)")
    source.add_argument("--trace", metavar="CSV", help="requests from a CSV: prompt_len,output_len[,arrival]")
    parser.add_argument("--rates", type=number_list(numbers.real(0, MAX_RATE, low_open=True)), metavar="LIST",
                        help="the knee search's starting grid in req/s, comma-separated (default per workload; "
                             "with a trace's arrival column and no --rates, its own times, no search)")
    parser.add_argument("--latency-bound", type=numbers.real(0, 1e3, low_open=True), default=0.05, metavar="S",
                        help="normalized latency (s/token) a sustained rate must meet (default 0.05)")
    parser.add_argument("--block-sizes", type=block_size_list, metavar="LIST",
                        help=f"paged block sizes (default {','.join(map(str, QUICK['block_sizes']))}, --full "
                             f"{','.join(map(str, FULL['block_sizes']))})")
    parser.add_argument("--reserve", default=",".join(BASELINES), metavar="LIST",
                        help="contiguous baselines: max, pow2, oracle (Orca's reservations, continuous batching) and "
                             "static (static batching with max-length reservations, FasterTransformer's); default "
                             "all, '' for none")
    parser.add_argument("--widths", type=number_list(numbers.integer(1, 16)), default=(2, 4, 6), metavar="LIST",
                        help="parallel samples / beam widths (default 2,4,6)")
    parser.add_argument("--prefix-len", type=numbers.integer(0, 10**6),
                        default=paper.FIG16_PREFIX_TOKENS["five-shot"],
                        help="shared-prompt: shared prefix tokens (default 341, the paper's five-shot prefix; its "
                             f"one-shot prefix is {paper.FIG16_PREFIX_TOKENS['one-shot']})")
    parser.add_argument("--turns", type=numbers.integer(1, 100), default=4, help="chat: turns per conversation (default 4)")
    parser.add_argument("--think-time", type=numbers.real(0, 1e5), default=5.0,
                        help="chat: mean seconds between turns (default 5)")
    parser.add_argument("--num-requests", type=numbers.integer(1, 10**6), metavar="N",
                        help="requests per point and seed (default per workload: "
                             f"{', '.join(f'{w.requests} {w.name}' for w in WORKLOADS.values())}; "
                             f"--full {FULL['requests_factor']}x)")
    parser.add_argument("--seeds", type=numbers.integer(1, 100), metavar="N",
                        help=f"seeds --seed, --seed + 1, ...: the max rate is their mean with a 95%% interval "
                             f"(default {QUICK['seeds']}, --full {FULL['seeds']})")
    parser.add_argument("--warmup", type=numbers.real(0, 0.9), default=WARMUP,
                        help=f"fraction of the earliest arrivals left out of the latency figures (default {WARMUP:g})")
    parser.add_argument("--max-len", type=numbers.integer(2, 10**6), default=2048,
                        help="maximum prompt + output tokens (default 2048)")
    add_budget_arguments(parser)
    parser.add_argument("--max-num-seqs", type=numbers.integer(1, 10**5), default=256,
                        help="sequences running at once (default 256, vLLM's)")
    parser.add_argument("--max-batched-tokens", type=numbers.integer(1, 10**7), default=2048,
                        help="tokens per step, decode first, prefill chunks in the rest (default 2048)")
    parser.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                        help="what a preempted single sequence does (groups of several always swap while the CPU "
                             "pool has room, as vLLM v0)")
    parser.add_argument("--swap-gb", type=numbers.real(0, 1e5), default=4.0,
                        help="CPU swap pool in GB (default 4, vLLM's swap_space)")
    parser.add_argument("--swap-gbps", type=numbers.real(0, 1e4, low_open=True), default=32.0,
                        help="GPU<->CPU swap bandwidth in GB/s, each way (default 32: PCIe 5.0 x16 at half its "
                             "64 GB/s peak)")
    parser.add_argument("--swap-latency-us", type=numbers.real(0, 1e6), metavar="US",
                        help="latency of one swap copy in us; a block is 2 x layers copies (default: the device "
                             "table's launch cost)")
    parser.add_argument("--no-prefix-cache", action="store_true",
                        help="allocate by count: no block shared by content, nothing kept after a free")
    parser.add_argument("--step-cost", default="analytic", metavar="SOURCE",
                        help="step-time source: analytic (H200 roofline), sweep:RUN_DIR (a GPU sweep's sweep.csv) or "
                             "model[:VARIANTS] (the performance model's time of the fastest CUDA C variant, counted "
                             "on the CPU executor; default variants: cost_model.DEFAULT_VARIANTS)")
    parser.add_argument("--kernel", metavar="VARIANTS", action="append",
                        help="attention time by block size from the traffic model of these variants (comma-separated; "
                             "the fastest at each block size; 'best': the paged variant the model makes fastest at "
                             "the run's shape): the roofline scaled by the modelled time over block size 16 (with "
                             "--step-cost analytic). Repeated: one more block-size curve per --kernel, paged "
                             "allocators only")
    parser.add_argument("--fixed-ms", type=numbers.real(0, 1e6), help="per-step time of the rest of the model in ms "
                                                                      "(default: streaming the weights)")
    parser.add_argument("--step-overhead-ms", type=numbers.real(0, 1e6), default=0.0,
                        help="fixed scheduling cost per step in ms, added to every step (default 0: overlapped)")
    parser.add_argument("--params-b", type=numbers.real(0, 1e5, low_open=True),
                        help="model parameters in billions (default 13, or --model's)")
    parser.add_argument("--beam-survival", type=numbers.real(0, 1, low_open=True), default=beam.SURVIVAL,
                        help=f"beam model: probability a beam survives a step (default {beam.SURVIVAL}, calibrated)")
    parser.add_argument("--seed", type=numbers.integer(0, 2**32 - 1), default=0,
                        help="first seed of lengths, token ids, arrivals, beams (default 0)")
    parser.add_argument("--full", action="store_true", help="more requests, seeds and block sizes")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    parser.add_argument("--results-dir", metavar="DIR", help="where run folders go (default results/)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _check(option: str, value, ok: bool, rule: str) -> None:
    if not ok:
        raise RefusedRequest(f"{option} must be {rule}, got {value}")


def config_from_args(args: argparse.Namespace) -> ServingConfig:
    """Every input checked (RefusedRequest naming the option); the trace read; nothing written."""
    size = FULL if args.full else QUICK
    budget = budget_from_args(args)
    workload = WORKLOADS[args.workload]
    n = args.num_requests if args.num_requests is not None else workload.requests * size["requests_factor"]
    seeds = args.seeds if args.seeds is not None else size["seeds"]
    _check("--max-batched-tokens", args.max_batched_tokens, args.max_batched_tokens >= args.max_num_seqs,
           f">= --max-num-seqs ({args.max_num_seqs}): every running sequence decodes a token per step")
    prefix = args.prefix_len if args.workload == "shared-prompt" else 0
    _check("--prefix-len", args.prefix_len, 0 <= prefix <= args.max_len - 2, f"in 0..{args.max_len - 2} (--max-len - 2)")
    _check("--model-gb/--budget-tokens", f"{budget.tokens} tokens", budget.tokens >= args.max_len,
           f"a KV budget of at least --max-len ({args.max_len}) tokens")
    block_sizes = args.block_sizes or size["block_sizes"]
    for bs in block_sizes:
        _check("--block-sizes", bs, budget.tokens // bs * bs >= args.max_len,
               f"small enough that the budget's whole blocks hold --max-len ({args.max_len}) tokens")
    reserves = tuple(r.strip() for r in args.reserve.split(",") if r.strip())
    unknown = [r for r in reserves if r not in BASELINES]
    _check("--reserve", unknown, not unknown, f"a list of {', '.join(BASELINES)}")
    widths = args.widths if workload.mode != "single" else (1,)
    check_token_memory(n, args.max_len, seeds * sum(widths) * (1 + (args.workload == "chat")),
                       "--num-requests x --seeds x --max-len")
    curves = [tuple(k.strip() for k in given.split(",") if k.strip()) for given in args.kernel or ()]
    for given, curve in zip(args.kernel or (), curves):
        _check("--kernel", repr(given), curve, "a comma-separated list of variant names")
    _check("--kernel", f"--step-cost {args.step_cost}", not curves or args.step_cost == "analytic",
           "used with --step-cost analytic (it scales the roofline's attention)")
    if any("best" in curve for curve in curves):
        best = best_variant(budget.shape(None if args.params_b is None else args.params_b * 1e9))
        curves = [tuple(best if k == "best" else k for k in curve) for curve in curves]
    _check("--kernel", ", ".join(map(repr, args.kernel or ())), len(set(curves)) == len(curves),
           "a different curve each time it is given")
    kernel = curves[0] if curves else ()
    trace = distributions.load_trace(args.trace, args.max_len - prefix, n) if args.trace else None
    rates = args.rates
    if rates is None and not (trace is not None and trace[2] is not None):
        rates = workload.rates
    json_path = Path(args.json) if args.json else None
    _check("--json", args.json, json_path is None or (json_path.parent.is_dir() and not json_path.is_dir()),
           "a file in an existing folder")
    check_results_dir(args.results_dir)
    spec = WorkloadSpec(args.workload, n, args.max_len, None if args.trace else args.lengths, 1, args.prefix_len,
                        args.turns, args.think_time, trace)
    recorded = {k: v for k, v in vars(args).items() if not k.startswith("_") and not callable(v)}
    return ServingConfig(spec, budget, rates, args.latency_bound, tuple(block_sizes), reserves, tuple(widths),
                         args.max_num_seqs, args.max_batched_tokens, args.preemption, args.swap_gb, args.swap_gbps,
                         args.swap_latency_us, not args.no_prefix_cache, args.step_cost, kernel, tuple(curves[1:]), args.fixed_ms,
                         args.step_overhead_ms, args.params_b, args.beam_survival, args.seed, seeds, args.warmup,
                         search.REL_TOL, recorded)


def rate_text(entry: dict) -> tuple[str, str]:
    """(max rate, its 95% interval) as the summary prints them: '>= X' when censored, '-' when none."""
    if entry["max_rate"] is None:
        return "none", "-"
    rate = (">=" if entry["max_rate_censored"] else "") + f"{entry['max_rate']:.2f}"
    ci = entry.get("max_rate_ci")
    return rate, "-" if ci is None else f"{ci[0]:.2f}-{ci[1]:.2f}"


def summary(result: dict) -> str:
    meta = result["meta"]
    seeds = f"seeds {meta['seed']}..{meta['seed'] + meta['seeds'] - 1}" if meta["seeds"] > 1 else f"seed {meta['seed']}"
    lines = [f"Serving simulation ({seeds}): {meta['requests']} requests of {meta['workload']}"
             f" ({meta['lengths']} lengths) per point, first {100 * meta['warmup']:g}% of arrivals left out as "
             f"warm-up; KV budget {meta['budget_tokens']:,} tokens{meta['budget_note']}, at most "
             f"{meta['max_num_seqs']} sequences and {meta['max_batched_tokens']} tokens per step, preemption by "
             f"{meta['preemption']} (swap pool {meta['swap_gb']:g} GB, {meta['swap']}), prefix cache "
             f"{'on' if meta['prefix_cache'] else 'off'}",
             f"Step time: {meta['step_cost']}",
             ("Rates: the trace's own arrival times" if meta["rates"] is None else
              f"Knee search from {', '.join(f'{r:g}' for r in meta['rates'])} req/s (extended past the top, "
              f"bisected to {100 * meta['rel_tol']:g}%)") + f"; latency bound {meta['latency_bound']:g} s/token "
             "(mean normalized latency = (finish - arrival) / output tokens)", ""]
    header = (f"{'allocator':<22}{'max rate':>10}{'95% CI':>16}  at seed {meta['seed']}'s knee: {'rate':>6}"
              f"{'norm lat':>9}{'p99':>7}{'TTFT':>7}{'thru':>7}{'tokens%':>8}{'seqs':>6}{'preempt':>8}"
              f"{'recomputed':>11}{'swapped':>9}{'hit%':>6}{'shared%':>8}")
    lines += [header, "-" * len(header)]
    for name, e in result["allocators"].items():
        p = knee_point(e, meta["seed"])
        rate, ci = rate_text(e)
        lines.append(f"{name:<22}{rate:>10}{ci:>16}  {'':>18}{p['rate']:>6.2f}"
                     f"{p['normalized_latency']:>9.4f}{p['normalized_latency_p99']:>7.3f}{p['ttft']:>7.2f}"
                     f"{p['throughput']:>7.2f}{100 * p['tokens_share']:>8.1f}{p['mean_running_seqs']:>6.1f}"
                     f"{p['preemptions']:>8}{p['recomputed_tokens']:>11,}{p['swapped_bytes'] / 1e9:>8.2f}G"
                     f"{100 * p['prefix_hit_rate']:>6.1f}{100 * p['sharing_saved']:>8.1f}")
    if result.get("ratios"):
        lines += ["", "Paged over each baseline, the knees' ratio seed by seed (same requests; mean, 95% interval):"]
        for r in result["ratios"]:
            ci = r["ratio_ci"]
            lines.append(f"  {r['paged']} / {r['baseline']}: {r['ratio']:.2f}x"
                         + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
                         + ("  (a censored rate: bound, not measurement)" if r["censored"] else ""))
    worst = max((p for e in result["allocators"].values() for p in e["points"]), key=lambda p: p["preemptions"])
    lines += ["", "max rate: mean over seeds of the highest rate meeting the bound (>=: censored, the search's "
              "extended top still met it: a lower bound); norm lat / p99 in s/token, TTFT in s, thru in req/s; "
              "tokens% = KV budget holding tokens; seqs = mean running; recomputed = tokens computed again after "
              "preemption; swapped = bytes moved to and from the CPU; hit% = prompt tokens found in the prefix cache; "
              "shared% = blocks saved by sharing.",
              f"Preemption cost, largest at {worst['name']} {worst['rate']:.3g} req/s (seed {worst['seed']}): "
              f"{worst['preemptions']} preemptions, {worst['recomputed_tokens']:,} tokens recomputed "
              f"(~{worst['recompute_seconds']:.2f} s of prefill), {worst['swapped_bytes'] / 1e9:.2f} GB swapped "
              f"({worst['swap_seconds']:.2f} s)."]
    bad = [f"{p['name']}@{p['rate']:.3g}" for e in result["allocators"].values() for p in e["points"] if not p["ok"]]
    if bad:
        lines.append("CHECK FAILED (a request did not finish or memory leaked): " + ", ".join(bad))
    lines += ["", f"Run folder: {result['run_dir']}  ({meta['seconds']:.1f} s); plots: "
              + ", ".join(Path(p).name for p in result["plots"])]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    config = config_from_args(args)        # a RefusedRequest here: python -m sandbox prints it, exit 2
    result = run_serving(config, results_root=args.results_dir, show_progress=not args.no_progress)
    if args.json:
        outputs.write_output("--json", args.json, json.dumps(result, indent=2) + "\n")
    print(summary(result))
    ok = all(p["ok"] for e in result["allocators"].values() for p in e["points"])
    return 0 if ok else 1
