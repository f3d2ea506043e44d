"""python -m sandbox serving: an online serving simulation of paged against contiguous KV allocation.

Requests of a workload arrive at each rate (Poisson, or a trace's arrival column), a vLLM-like
scheduler serves them on each allocator (``sandbox.serving``), a cost model times every step; the
summary gives each allocator's highest rate under ``--latency-bound`` with its latency, memory,
preemption and cache figures, and names the step-time source. Writes ``results/<UTC>-serving/``;
``--json FILE`` also writes the result there. Every input is checked before anything runs.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from sandbox.commands.kv_budget import add_budget_arguments, budget_from_args
from sandbox.memory import beam, distributions
from sandbox.memory.arena import RESERVE_POLICIES
from sandbox.serving.run import ServingConfig
from sandbox.serving.workloads import DEFAULT_LENGTHS, WORKLOADS, WorkloadSpec

# Rates (req/s) that bracket the contiguous baselines' and paged's limits on the default H200 cost model
DEFAULT_RATES = {"sharegpt": "2,3,4,5,6,7,8", "alpaca": "10,20,40,80,160,240,320,400",
                 "parallel": "4,8,16,32,48,64,96", "beam": "4,8,16,32,48,64,96",
                 "shared-prompt": "10,20,40,80,160,240,320,400", "chat": "1,2,3,4,6,8"}
# Requests per point: about the same decode tokens per point for every workload (short Alpaca-like
# requests need more of them for the queue to reach a steady state at their higher rates).
QUICK_REQUESTS = {"sharegpt": 400, "chat": 400, "alpaca": 2000, "shared-prompt": 2000, "parallel": 800, "beam": 800}
QUICK = dict(block_sizes="16")
FULL = dict(block_sizes="8,16,32,64,128", requests_factor=5)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=WORKLOADS, default="sharegpt", help="request structure (default sharegpt)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--lengths", choices=distributions.DISTRIBUTIONS,
                        help="length distribution (default: the workload's; parallel/beam/shared-prompt Alpaca-like)")
    source.add_argument("--trace", metavar="CSV", help="requests from a CSV: prompt_len,output_len[,arrival]")
    parser.add_argument("--rates", metavar="LIST", help="request rates in req/s, comma-separated (default per "
                        "workload; with a trace's arrival column and no --rates, its own times)")
    parser.add_argument("--latency-bound", default="0.05", metavar="S",
                        help="normalized latency (s/token) a sustained rate must meet (default 0.05)")
    parser.add_argument("--block-sizes", metavar="LIST", help=f"paged block sizes (default {QUICK['block_sizes']}, "
                                                               f"--full {FULL['block_sizes']})")
    parser.add_argument("--reserve", default=",".join(RESERVE_POLICIES), metavar="LIST",
                        help="contiguous baselines: max, pow2, oracle (default all; '' for none)")
    parser.add_argument("--widths", default="2,4,6", metavar="LIST", help="parallel samples / beam widths (default 2,4,6)")
    parser.add_argument("--prefix-len", type=int, default=256, help="shared-prompt: system prompt tokens (default 256)")
    parser.add_argument("--turns", type=int, default=4, help="chat: turns per conversation (default 4)")
    parser.add_argument("--think-time", type=float, default=5.0, help="chat: mean seconds between turns (default 5)")
    parser.add_argument("--num-requests", type=int, metavar="N",
                        help=f"requests per point (default {QUICK_REQUESTS['sharegpt']} for sharegpt, "
                             f"{', '.join(f'{v} {k}' for k, v in QUICK_REQUESTS.items() if k != 'sharegpt')}; "
                             f"--full {FULL['requests_factor']}x)")
    parser.add_argument("--max-len", type=int, default=2048, help="maximum prompt + output tokens (default 2048)")
    add_budget_arguments(parser)
    parser.add_argument("--max-num-seqs", type=int, default=256, help="sequences running at once (default 256, vLLM's)")
    parser.add_argument("--max-batched-tokens", type=int, default=2048,
                        help="tokens per step, decode first, prefill chunks in the rest (default 2048)")
    parser.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                        help="what a preempted single sequence does (groups of several always swap while the CPU "
                             "pool has room, as vLLM v0)")
    parser.add_argument("--swap-gb", type=float, default=4.0, help="CPU swap pool in GB (default 4, vLLM's swap_space)")
    parser.add_argument("--swap-gbps", type=float, default=32.0,
                        help="GPU<->CPU swap bandwidth in GB/s, each way (default 32: PCIe 5.0 x16 at half its peak)")
    parser.add_argument("--no-prefix-cache", action="store_true",
                        help="allocate by count: no block shared by content, nothing kept after a free")
    parser.add_argument("--step-cost", default="analytic", metavar="SOURCE",
                        help="step-time source: analytic (H200 roofline), sweep:RUN_DIR (a GPU sweep's sweep.csv) or "
                             "model[:VARIANTS] (the performance model's time of the fastest CUDA C variant, counted "
                             "on the CPU executor; default variants: cost_model.DEFAULT_VARIANTS)")
    parser.add_argument("--fixed-ms", type=float, help="per-step time of the rest of the model in ms (default: "
                                                       "streaming the weights at the modelled bandwidth)")
    parser.add_argument("--params-b", type=float, default=13.0, help="model parameters in billions (default 13)")
    parser.add_argument("--beam-survival", type=float, default=beam.SURVIVAL,
                        help=f"beam model: probability a beam survives a step (default {beam.SURVIVAL}, calibrated)")
    parser.add_argument("--seed", type=int, default=0, help="seed of lengths, token ids, arrivals, beams (default 0)")
    parser.add_argument("--full", action="store_true", help="more requests and block sizes")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    parser.add_argument("--results-dir", metavar="DIR", help="where run folders go (default results/)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _numbers(option: str, text: str, kind=float, low=0.0, strict=True) -> tuple:
    """Comma-separated numbers, each finite and > low (>= low when not strict); ValueError naming the option."""
    try:
        values = tuple(kind(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"{option} expects comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{option} is empty")
    bad = [v for v in values if not (math.isfinite(v) and (v > low if strict else v >= low))]
    if bad:
        raise ValueError(f"{option} values must be finite and {'>' if strict else '>='} {low:g}, got {bad[0]}")
    return tuple(sorted(set(values)))


def _check(option: str, value, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"{option} must be {rule}, got {value}")


def config_from_args(args: argparse.Namespace) -> ServingConfig:
    """Every input checked (ValueError naming the option); the trace read; nothing written."""
    size = FULL if args.full else QUICK
    budget = budget_from_args(args)
    n = args.num_requests if args.num_requests is not None else \
        QUICK_REQUESTS[args.workload] * (FULL["requests_factor"] if args.full else 1)
    _check("--num-requests", n, n >= 1, ">= 1")
    _check("--seed", args.seed, args.seed >= 0, "an integer >= 0 (it seeds NumPy's generator)")
    _check("--max-len", args.max_len, args.max_len >= 2, ">= 2")
    _check("--max-num-seqs", args.max_num_seqs, args.max_num_seqs >= 1, ">= 1")
    _check("--max-batched-tokens", args.max_batched_tokens, args.max_batched_tokens >= args.max_num_seqs,
           f">= --max-num-seqs ({args.max_num_seqs}): every running sequence decodes a token per step")
    _check("--swap-gb", args.swap_gb, math.isfinite(args.swap_gb) and args.swap_gb >= 0, "a finite number >= 0")
    _check("--swap-gbps", args.swap_gbps, math.isfinite(args.swap_gbps) and args.swap_gbps > 0, "a finite number > 0")
    _check("--fixed-ms", args.fixed_ms, args.fixed_ms is None or (math.isfinite(args.fixed_ms) and args.fixed_ms >= 0),
           "a finite number >= 0")
    _check("--params-b", args.params_b, math.isfinite(args.params_b) and args.params_b > 0, "a finite number > 0")
    _check("--beam-survival", args.beam_survival, 0 < args.beam_survival <= 1, "in (0, 1]")
    _check("--turns", args.turns, args.turns >= 1, ">= 1")
    _check("--think-time", args.think_time, math.isfinite(args.think_time) and args.think_time >= 0, "finite and >= 0")
    prefix = args.prefix_len if args.workload == "shared-prompt" else 0
    _check("--prefix-len", args.prefix_len, 0 <= prefix <= args.max_len - 2, f"in 0..{args.max_len - 2} (--max-len - 2)")
    _check("--model-gb/--budget-tokens", f"{budget.tokens} tokens", budget.tokens >= args.max_len,
           f"a KV budget of at least --max-len ({args.max_len}) tokens")
    (bound,) = _numbers("--latency-bound", args.latency_bound)
    block_sizes = _numbers("--block-sizes", args.block_sizes or size["block_sizes"], int, low=1, strict=False)
    for bs in block_sizes:
        _check("--block-sizes", bs, budget.tokens // bs * bs >= args.max_len,
               f"small enough that the budget's whole blocks hold --max-len ({args.max_len}) tokens")
    reserves = tuple(r.strip() for r in args.reserve.split(",") if r.strip())
    unknown = [r for r in reserves if r not in RESERVE_POLICIES]
    _check("--reserve", unknown, not unknown, f"a list of {', '.join(RESERVE_POLICIES)}")
    widths = _numbers("--widths", args.widths, int, low=1, strict=False) if args.workload in ("parallel", "beam") else (1,)
    trace = distributions.load_trace(args.trace, args.max_len - prefix, n) if args.trace else None
    if args.rates is not None:
        rates = _numbers("--rates", args.rates)
    elif trace is not None and trace[2] is not None:
        rates = None
    else:
        rates = _numbers("--rates", DEFAULT_RATES[args.workload])
    json_path = Path(args.json) if args.json else None
    _check("--json", args.json, json_path is None or json_path.parent.is_dir(), "a file in an existing folder")
    spec = WorkloadSpec(args.workload, n, args.max_len, None if args.trace else args.lengths, 1, args.prefix_len,
                        args.turns, args.think_time, trace)
    recorded = {k: v for k, v in vars(args).items() if not k.startswith("_") and not callable(v)}
    return ServingConfig(spec, budget, rates, bound, block_sizes, reserves, widths, args.max_num_seqs,
                         args.max_batched_tokens, args.preemption, args.swap_gb, args.swap_gbps,
                         not args.no_prefix_cache, args.step_cost, args.fixed_ms, args.params_b, args.beam_survival,
                         args.seed, recorded)


def summary(result: dict) -> str:
    meta = result["meta"]
    lines = [f"Serving simulation (seed {meta['seed']}): {meta['requests']} requests of {meta['workload']}"
             f" ({meta['lengths']} lengths), KV budget {meta['budget_tokens']:,} tokens{meta['budget_note']}, "
             f"at most {meta['max_num_seqs']} sequences and {meta['max_batched_tokens']} tokens per step, "
             f"preemption by {meta['preemption']} (swap pool {meta['swap_gb']:g} GB at {meta['swap_gbps']:g} GB/s), "
             f"prefix cache {'on' if meta['prefix_cache'] else 'off'}",
             f"Step time: {meta['step_cost']}",
             f"Rates {', '.join(f'{r:g}' for r in meta['rates'])} req/s; latency bound {meta['latency_bound']:g} s/token "
             "(mean normalized latency = (finish - arrival) / output tokens)", ""]
    header = (f"{'allocator':<22}{'max rate':>9}{'~interp':>8}  at the max rate: {'norm lat':>9}{'p99':>7}{'TTFT':>7}"
              f"{'thru':>7}{'tokens%':>8}{'seqs':>6}{'preempt':>8}{'recomputed':>11}{'swapped':>9}{'hit%':>6}{'shared%':>8}")
    lines += [header, "-" * len(header)]
    for name, e in result["allocators"].items():
        pts = sorted(e["points"], key=lambda p: p["rate"])
        p = next((q for q in pts if q["rate"] == e["max_rate"]), pts[0])
        rate = "-" if e["max_rate"] is None else f"{e['max_rate']:g}"
        interp = "-" if e["max_rate_interpolated"] is None else f"{e['max_rate_interpolated']:.2f}"
        lines.append(f"{name:<22}{rate:>9}{interp:>8}  {'(at ' + format(p['rate'], 'g') + ')':>16} "
                     f"{p['normalized_latency']:>9.4f}{p['normalized_latency_p99']:>7.3f}{p['ttft']:>7.2f}"
                     f"{p['throughput']:>7.2f}{100 * p['tokens_share']:>8.1f}{p['mean_running_seqs']:>6.1f}"
                     f"{p['preemptions']:>8}{p['recomputed_tokens']:>11,}{p['swapped_bytes'] / 1e9:>8.2f}G"
                     f"{100 * p['prefix_hit_rate']:>6.1f}{100 * p['sharing_saved']:>8.1f}")
    worst = max((p for e in result["allocators"].values() for p in e["points"]), key=lambda p: p["preemptions"])
    lines += ["", "norm lat / p99 in s/token, TTFT in s, thru in req/s; tokens% = KV budget holding tokens; seqs = mean "
              "running; recomputed = tokens computed again after preemption; swapped = bytes moved to and from the CPU; "
              "hit% = prompt tokens found in the prefix cache; shared% = blocks saved by sharing.",
              f"Preemption cost, largest at {worst['name']} {worst['rate']:g} req/s: {worst['preemptions']} preemptions, "
              f"{worst['recomputed_tokens']:,} tokens recomputed (~{worst['recompute_seconds']:.2f} s of prefill), "
              f"{worst['swapped_bytes'] / 1e9:.2f} GB swapped ({worst['swap_seconds']:.2f} s)."]
    bad = [f"{p['name']}@{p['rate']:g}" for e in result["allocators"].values() for p in e["points"] if not p["ok"]]
    if bad:
        lines.append("CHECK FAILED (a request did not finish or memory leaked): " + ", ".join(bad))
    lines += ["", f"Run folder: {result['run_dir']}  ({meta['seconds']:.1f} s); plots: "
              + ", ".join(Path(p).name for p in result["plots"])]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from sandbox.serving.run import run_serving

    config = config_from_args(args)        # a ValueError here: python -m sandbox prints it, exit 2
    result = run_serving(config, results_root=args.results_dir, show_progress=not args.no_progress)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    ok = all(p["ok"] for e in result["allocators"].values() for p in e["points"])
    return 0 if ok else 1
