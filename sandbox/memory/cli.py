"""python -m sandbox memory: how much KV memory paged allocation saves over contiguous reservation.

``--example seed`` prints the worked 10-token example; otherwise the study runs (see
``sandbox.memory.study``), writes ``results/<UTC>-memory/`` and prints a summary table (or, with
``--json``, only JSON on stdout and the run folder on stderr).
"""
from __future__ import annotations

import argparse
import json
import sys

from sandbox.commands import block_size_list
from sandbox.memory import distributions, simulate
from sandbox.memory.study import DEFAULT_BLOCK_SIZES, StudyConfig

DEFAULT_MODEL_GB = 12.0
# Bytes per KV element of each cache dtype (an fp8 cache's per-tensor scales are a few bytes per layer).
KV_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1}
QUICK = dict(num_requests=300, sharing_requests=60)
DEFAULTS = dict(num_requests=2000, sharing_requests=1000)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--example", choices=("seed",), help="print a worked example instead of running the study")
    parser.add_argument("--json", action="store_true", help="print JSON only on stdout (run folder on stderr)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--distribution", choices=distributions.DISTRIBUTIONS, default="sharegpt",
                        help="request lengths (default sharegpt: mean about 161 prompt / 338 output tokens)")
    source.add_argument("--trace", metavar="PATH", help="CSV of requests with columns prompt_len,output_len")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-tokens", type=int, metavar="N", help="KV budget in tokens")
    budget.add_argument("--model-gb", type=float, metavar="GB",
                        help=f"KV budget in GB (1e9 bytes) for the model shape below (default {DEFAULT_MODEL_GB:g})")
    parser.add_argument("--num-layers", type=int, default=40, help="model layers (default 40, a 13B model)")
    parser.add_argument("--num-kv-heads", type=int, default=40, help="KV heads per layer (default 40)")
    parser.add_argument("--head-dim", type=int, default=128, help="head dimension (default 128)")
    element = parser.add_mutually_exclusive_group()
    element.add_argument("--dtype-bytes", type=int, default=None, help="bytes per KV element (default 2)")
    element.add_argument("--kv-dtype", choices=sorted(KV_DTYPE_BYTES), default=None,
                         help="KV cache dtype, sets the bytes per element: fp16/bf16 2, e4m3/e5m2 (fp8) 1, fp32 4; "
                              "an fp8 cache holds twice the tokens of float16 in the same bytes")
    parser.add_argument("--max-len", type=int, default=2048,
                        help="maximum prompt + output length; the contiguous reservation (default 2048)")
    parser.add_argument("--block-sizes", type=block_size_list, default=DEFAULT_BLOCK_SIZES, metavar="LIST",
                        help="paged block sizes, comma-separated (default 1,2,4,...,256)")
    parser.add_argument("--num-requests", type=int, default=None, metavar="N",
                        help=f"requests to serve (default {DEFAULTS['num_requests']}, --quick {QUICK['num_requests']})")
    parser.add_argument("--reserve", choices=simulate.RESERVE_POLICIES, default="max",
                        help="contiguous reservation reported as 'contiguous' (default max; the others are "
                             "reported as contiguous_variants)")
    parser.add_argument("--sharing-requests", type=int, default=None, metavar="N",
                        help=f"requests per sharing configuration (default {DEFAULTS['sharing_requests']}, "
                             f"--quick {QUICK['sharing_requests']})")
    parser.add_argument("--sharing-block-size", type=int, default=16, help="block size of the sharing study (default 16)")
    parser.add_argument("--max-steps", type=int, default=10**6, help="decode-step cap per configuration (default 1e6)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the request lengths (default 0)")
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a fast look")
    parser.add_argument("--results-dir", metavar="DIR", help="where run folders go (default results/)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def config_from_args(args: argparse.Namespace) -> StudyConfig:
    """StudyConfig from parsed arguments; ValueError on a bad combination."""
    if getattr(args, "kv_dtype", None) is not None:
        args.dtype_bytes = KV_DTYPE_BYTES[args.kv_dtype]
    elif args.dtype_bytes is None:
        args.dtype_bytes = 2
    for name in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.budget_tokens is not None:
        budget, note = args.budget_tokens, ""
    else:
        gb = DEFAULT_MODEL_GB if args.model_gb is None else args.model_gb
        if not gb > 0:
            raise ValueError(f"--model-gb must be > 0, got {gb}")
        per_token = 2 * args.num_layers * args.num_kv_heads * args.head_dim * args.dtype_bytes
        budget = simulate.budget_from_model(gb, args.num_layers, args.num_kv_heads, args.head_dim, args.dtype_bytes)
        kv = f", {args.kv_dtype} cache" if getattr(args, "kv_dtype", None) else ""
        note = f" = {gb:g} GB at {per_token:,} bytes/token{kv}"
    sizes = QUICK if args.quick else DEFAULTS
    recorded = {k: v for k, v in vars(args).items() if not k.startswith("_") and not callable(v)}
    return StudyConfig(
        distribution=args.distribution, trace=args.trace, budget_tokens=budget, budget_note=note,
        max_len=args.max_len, block_sizes=tuple(args.block_sizes),
        num_requests=args.num_requests if args.num_requests is not None else sizes["num_requests"],
        reserve=args.reserve,
        sharing_requests=args.sharing_requests if args.sharing_requests is not None else sizes["sharing_requests"],
        sharing_block_size=args.sharing_block_size, max_steps=args.max_steps, seed=args.seed,
        args=dict(recorded, block_sizes=list(args.block_sizes)))


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def summary(result: dict) -> str:
    meta = result["meta"]
    lengths = meta["lengths"]
    lines = [f"Memory-waste study (seed {meta['seed']}): {lengths['num_requests']} requests, {meta['workload']} "
             f"(prompt mean {lengths['prompt_mean']:.0f}, output mean {lengths['output_mean']:.0f}), "
             f"KV budget {meta['budget_tokens']:,} tokens{meta['budget_note']}, max length {meta['max_len']}, "
             f"{meta['arrival']}", ""]
    header = (f"{'allocator':<11}{'block':>6} {'reserve':<8}{'util%':>7}{'intern%':>8}{'extern%':>8}{'budget%':>8}"
              f"{'peak':>6}{'mean':>7}{'steps':>8}{'preempt':>8}")
    lines += [header, "-" * len(header)]
    rows = [result["contiguous"], *result["contiguous_variants"], *result["paged"]]
    for r in rows:
        lines.append(f"{r['allocator']:<11}{r['block_size'] or '-':>6} {r['reserve'] or '-':<8}"
                     f"{_pct(r['utilization']):>7}{_pct(r['internal_waste']):>8}{_pct(r['external_waste']):>8}"
                     f"{_pct(r['budget_utilization']):>8}{r['max_concurrent_requests']:>6}"
                     f"{r['mean_concurrent_requests']:>7.1f}{r['steps']:>8}{r['preemptions']:>8}"
                     + ("  (hit step cap)" if r["hit_step_cap"] else ""))
    lines += ["", "util% = slots holding tokens / slots in use; intern% = in use but empty; extern% = free but too "
              "small for the next request, of the budget; budget% = slots holding tokens / budget; "
              "peak/mean = concurrent requests", ""]
    share = result["sharing"]
    lines.append(f"Sharing ({share['distribution']}-like lengths, block size {share['block_size']}, "
                 f"{share['requests']} requests): memory saved")
    for kind, label in (("parallel", "parallel sampling"), ("beam", "beam search")):
        lines.append(f"  {label:<18}" + "   ".join(f"{'n' if kind == 'parallel' else 'width'}={r['width']}: "
                                                 f"{_pct(r['saved']).strip()}%" for r in share[kind]))
    lines += ["", f"Run folder: {result['run_dir']}  ({meta['seconds']:.1f} s)"]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.example == "seed":
        from sandbox.memory.example import render_seed_example, run_seed_example

        example = run_seed_example()
        print(json.dumps(example, indent=2) if args.json else render_seed_example(example))
        return 0
    from sandbox.memory.study import run_study

    try:
        config = config_from_args(args)
        result = run_study(config, results_root=args.results_dir,
                           show_progress=not args.no_progress)
    except ValueError as e:
        print(f"python -m sandbox memory: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        print(f"run folder: {result['run_dir']}", file=sys.stderr)
    else:
        print(summary(result))
    return 0
