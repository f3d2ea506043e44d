"""python -m sandbox memory: how much KV memory paged allocation saves over contiguous reservation.

``--example seed`` prints the worked 10-token example; ``--calibrate-beam`` prints the beam model's
calibration table; ``--validate-beam`` fits each beam model on one workload and prints its error on the other; otherwise the study runs (see ``sandbox.memory.study``), writes
``results/<UTC>-memory/`` and prints a summary table (or, with ``--json``, only JSON on stdout and the
run folder on stderr).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from sandbox.commands import block_size_list, numbers
from sandbox.commands.kv_budget import add_budget_arguments, budget_from_args
from sandbox.commands.study_args import check_results_dir, check_token_memory
from sandbox.errors import RefusedRequest
from sandbox.memory import beam, distributions, paper, sharing
from sandbox.memory.arena import RESERVE_POLICIES
from sandbox.memory.example import render_seed_example, run_seed_example
from sandbox.memory.simulate import DEFAULT_MAX_NUM_SEQS
from sandbox.memory.study import DEFAULT_BLOCK_SIZES, StudyConfig, request_lengths, run_study, validate

QUICK = dict(num_requests=300, sharing_requests=60)
DEFAULTS = dict(num_requests=2000, sharing_requests=500)
CALIBRATION_GRID = (0.9, 0.93, 0.95, 0.96, 0.965, 0.97, 0.975, 0.98, 0.99)
REPLACEMENTS_GRID = (4.0, 6.0, 8.0, 9.0, 10.0, 11.0, 12.0, 15.0, 20.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--example", choices=("seed",), help="print a worked example instead of running the study")
    parser.add_argument("--calibrate-beam", action="store_true",
                        help="print beam savings at widths 2/4/6 over a grid of beam survival probabilities against "
                             "the paper's Fig. 15 range for --distribution (alpaca or sharegpt), and the best one")
    parser.add_argument("--validate-beam", action="store_true",
                        help="fit each beam model (constant survival; replacements per output) on Alpaca-like lengths "
                             "and predict ShareGPT-like ones, and the reverse; print the out-of-sample errors against "
                             "the paper's Fig. 15 ranges")
    parser.add_argument("--json", action="store_true", help="print JSON only on stdout (run folder on stderr)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--distribution", choices=distributions.DISTRIBUTIONS, default="sharegpt",
                        help="request lengths (default sharegpt: mean about 161 prompt / 338 output tokens)")
    source.add_argument("--trace", metavar="PATH",
                        help="CSV of requests with columns prompt_len,output_len[,arrival] (arrival orders the queue)")
    add_budget_arguments(parser)
    parser.add_argument("--max-len", type=numbers.integer(2, 10**6), default=2048,
                        help="maximum prompt + output length; the contiguous reservation (default 2048)")
    parser.add_argument("--block-sizes", type=block_size_list, default=DEFAULT_BLOCK_SIZES, metavar="LIST",
                        help="paged block sizes, comma-separated (default 1,2,4,...,256)")
    parser.add_argument("--num-requests", type=numbers.integer(1, 10**6), default=None, metavar="N",
                        help=f"requests to serve (default {DEFAULTS['num_requests']}, --quick {QUICK['num_requests']})")
    parser.add_argument("--reserve", choices=RESERVE_POLICIES, default="max",
                        help="contiguous reservation reported as 'contiguous' (default max; the others are "
                             "reported as contiguous_variants)")
    parser.add_argument("--max-num-seqs", type=numbers.integer(1, 10**5), default=DEFAULT_MAX_NUM_SEQS,
                        help=f"most requests running at once (default {DEFAULT_MAX_NUM_SEQS}, vLLM's)")
    parser.add_argument("--sharing-requests", type=numbers.integer(1, 10**6), default=None, metavar="N",
                        help=f"requests of the sharing study, the study's first N (default {DEFAULTS['sharing_requests']}, "
                             f"--quick {QUICK['sharing_requests']})")
    parser.add_argument("--sharing-block-size", type=numbers.integer(1, 4096), default=16, help="block size of the sharing study (default 16)")
    parser.add_argument("--beam-survival", type=numbers.real(0, 1, low_open=True), default=None,
                        help=f"constant beam model: probability a beam survives a step (Alpaca fit {beam.SURVIVAL}); "
                             "default: the per-output model")
    parser.add_argument("--beam-replacements", type=numbers.real(0, 1e6, low_open=True), default=beam.REPLACEMENTS,
                        help=f"per-output beam model: a beam's expected replacements over the output (default "
                             f"{beam.REPLACEMENTS}, fitted on Alpaca, validated on ShareGPT)")
    parser.add_argument("--max-steps", type=numbers.integer(1, 10**8), default=10**6, help="decode-step cap per configuration (default 1e6)")
    parser.add_argument("--seed", type=numbers.integer(0, 2**32 - 1), default=0, help="seed of the request lengths (default 0)")
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a fast look")
    parser.add_argument("--results-dir", metavar="DIR", help="where run folders go (default results/)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def config_from_args(args: argparse.Namespace) -> StudyConfig:
    """StudyConfig from parsed arguments; RefusedRequest on a bad combination, before anything is written."""
    budget = budget_from_args(args)
    sizes = QUICK if args.quick else DEFAULTS
    num_requests = args.num_requests if args.num_requests is not None else sizes["num_requests"]
    check_token_memory(num_requests, args.max_len, 1, "--num-requests x --max-len")
    check_results_dir(args.results_dir)
    recorded = {k: v for k, v in vars(args).items() if not k.startswith("_") and not callable(v)}
    return StudyConfig(
        distribution=args.distribution, trace=args.trace, budget_tokens=budget.tokens, budget_note=budget.note,
        max_len=args.max_len, block_sizes=tuple(args.block_sizes),
        num_requests=num_requests,
        reserve=args.reserve, max_num_seqs=args.max_num_seqs,
        sharing_requests=args.sharing_requests if args.sharing_requests is not None else sizes["sharing_requests"],
        sharing_block_size=args.sharing_block_size, beam_survival=args.beam_survival,
        beam_replacements=args.beam_replacements, max_steps=args.max_steps,
        seed=args.seed, args=dict(recorded, block_sizes=list(args.block_sizes)))


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def _range(pair) -> str:
    return f"{100 * pair[0]:.1f}-{100 * pair[1]:.1f}%"


def summary(result: dict) -> str:
    meta = result["meta"]
    lengths = meta["lengths"]
    lines = [f"Memory-waste study (seed {meta['seed']}): {lengths['num_requests']} requests, {meta['workload']} "
             f"(prompt mean {lengths['prompt_mean']:.0f}, output mean {lengths['output_mean']:.0f}), "
             f"KV budget {meta['budget_tokens']:,} tokens{meta['budget_note']}, max length {meta['max_len']}, "
             f"at most {meta['max_num_seqs']} running; {meta['arrival']}", ""]
    header = (f"{'allocator':<11}{'block':>6} {'reserve':<8}{'tokens%':>8}{'reserv%':>8}{'intern%':>8}{'extern%':>8}"
              f"{'free%':>7}{'util%':>7}{'peak':>6}{'mean':>7}{'steps':>8}{'preempt':>8}{'recomputed':>11}")
    lines += [header, "-" * len(header)]
    for r in [result["contiguous"], *result["contiguous_variants"], *result["paged"]]:
        lines.append(f"{r['allocator']:<11}{r['block_size'] or '-':>6} {r['reserve'] or '-':<8}"
                     f"{_pct(r['tokens']):>8}{_pct(r['reserved']):>8}{_pct(r['internal']):>8}{_pct(r['external']):>8}"
                     f"{_pct(r['free']):>7}{_pct(r['utilization']):>7}{r['max_concurrent_requests']:>6}"
                     f"{r['mean_concurrent_requests']:>7.1f}{r['steps']:>8}{r['preemptions']:>8}"
                     f"{r['recomputed_tokens']:>11,}" + ("  (hit step cap)" if r["hit_step_cap"] else ""))
    lines += ["", "Shares of the whole KV budget, averaged over steps (the paper's Fig. 2 split): tokens = holding KV; "
              "reserv = allocated for future tokens; intern = allocated, never filled; extern = free but unusable "
              "(holes too small for the queue's head; paged: the budget below one block); util = tokens / allocated; "
              "peak/mean = concurrent requests; recomputed = tokens re-prefilled after preemption.",
              f"Paper: token states are {_range(paper.TOKEN_STATES_PRIOR)} of KV memory in prior systems; vLLM "
              f"wastes under {100 * paper.VLLM_WASTE_BELOW:.0f}%.", ""]
    share = result["sharing"]
    ranges = share.get("paper")
    lines.append(f"Sharing ({share['workload']}, first {share['requests']} requests, block size {share['block_size']}, "
                 + (f"beam survival {share['beam_survival']}" if share["beam_survival"] is not None
                    else f"beam replacements {share['beam_replacements']} per output") + "): memory saved"
                 + ("" if ranges else " (no paper figure for these lengths)"))
    for kind, label in (("parallel", "parallel sampling"), ("beam", "beam search")):
        cells = "   ".join(f"{'n' if kind == 'parallel' else 'width'}={r['width']}: {_pct(r['saved']).strip()}%"
                           for r in share[kind])
        lines.append(f"  {label:<18}{cells}" + (f"   (paper, widths 2-6: {_range(ranges[kind])})" if ranges else ""))
    lines += ["", f"Run folder: {result['run_dir']}  ({meta['seconds']:.1f} s)"]
    return "\n".join(lines)


def calibration(args: argparse.Namespace, config: StudyConfig) -> str:
    """The beam model's calibration table on the study's first sharing_requests requests."""
    validate(config)
    target = paper.FIG15.get(config.distribution) if not config.trace else None
    if target is None:
        raise RefusedRequest("--calibrate-beam needs --distribution alpaca or sharegpt (the paper's Fig. 15 datasets)")
    prompts, outputs, _ = request_lengths(config)
    n = config.sharing_requests
    best, rows = sharing.calibrate_survival(prompts[:n], outputs[:n], config.sharing_block_size, CALIBRATION_GRID,
                                            paper.FIG15_WIDTHS, target["beam"], seed=config.seed)
    lines = [f"Beam model calibration: {config.distribution}-like lengths, first {n} requests, block size "
             f"{config.sharing_block_size}, seed {config.seed}; paper (Fig. 15) {_range(target['beam'])} at widths 2-6",
             f"{'survival':>9}" + "".join(f"{'k=' + str(w):>8}" for w in paper.FIG15_WIDTHS) + f"{'error':>10}"]
    for r in rows:
        lines.append(f"{r['survival']:>9}" + "".join(f"{_pct(v):>8}" for v in r["saved"].values())
                     + f"{r['error']:>10.5f}" + ("  <- best" if r["survival"] == best else ""))
    stats = [beam.lineage_stats(w, best, 400, seed=config.seed) for w in paper.FIG15_WIDTHS]
    lines.append(f"at survival {best}: " + "; ".join(
        f"k={s['width']}: {s['replaced_per_step']:.2f} beams replaced/step, common ancestor {s['mrca_depth']:.1f} "
        "tokens back" for s in stats))
    return "\n".join(lines)


def validation(config: StudyConfig) -> str:
    """Each beam model fitted on one of the paper's two workloads, its savings and error on the other."""
    workloads = {}
    for name in paper.FIG15:
        prompts, outputs, _ = request_lengths(replace(config, distribution=name, trace=None))
        workloads[name] = (prompts[:config.sharing_requests], outputs[:config.sharing_requests])
    targets = {name: paper.FIG15[name]["beam"] for name in workloads}
    widths = paper.FIG15_WIDTHS
    lines = [f"Beam model validation: first {config.sharing_requests} requests of each workload's lengths, block size "
             f"{config.sharing_block_size}, seed {config.seed}; fitted on one workload (widths {widths[0]} and "
             f"{widths[-1]} against the paper's range ends), predicted on the other",
             f"{'model':<13}{'fit on':<10}{'value':>7}  {'tested on':<10}" + "".join(f"{'k=' + str(w):>8}" for w in widths)
             + f"{'paper':>14}{'error':>8}"]
    for model, grid in (("survival", CALIBRATION_GRID), ("replacements", REPLACEMENTS_GRID)):
        for r in sharing.cross_validate(workloads, config.sharing_block_size, model, grid, widths, targets, config.seed):
            lines.append(f"{model:<13}{r['fit']:<10}{r['value']:>7g}  {r['test']:<10}"
                         + "".join(f"{_pct(r['saved'][w]):>8}" for w in widths)
                         + f"{_range(r['paper']):>14}{100 * r['out_of_sample_error']:>7.1f}pt")
    lines.append("error: the larger distance, in percentage points, of widths 2 and 6 to the ends of the paper's range "
                 "for the workload the model was not fitted to")
    return "\n".join(lines)


# Flags that choose the study's requests or budget: meaningless beside --example, so refused there.
_STUDY_FLAGS = ("trace", "calibrate_beam", "validate_beam", "budget_tokens", "model_gb", "num_requests", "sharing_requests")


def main(args: argparse.Namespace) -> int:
    if args.example == "seed":
        given = [f"--{f.replace('_', '-')}" for f in _STUDY_FLAGS if getattr(args, f) not in (None, False)]
        if given:
            raise RefusedRequest(f"--example seed prints a fixed worked example; it takes no {', '.join(given)}")
        example = run_seed_example()
        print(json.dumps(example, indent=2) if args.json else render_seed_example(example))
        return 0

    try:                                   # every refusal before anything is written: exit 2
        config = config_from_args(args)
        validate(config)
        request_lengths(config)            # a trace's errors name its line
        if args.calibrate_beam:
            print(calibration(args, config))
            return 0
        if args.validate_beam:
            if config.trace:
                raise RefusedRequest("--validate-beam uses the alpaca and sharegpt distributions; it takes no --trace")
            print(validation(config))
            return 0
    except RefusedRequest as e:            # one line (python -m sandbox prints the same); any other error is an
        print(f"error: {e}", file=sys.stderr)  # internal one (exit 1, docs/exit-codes.md)
        return 2
    result = run_study(config, results_root=args.results_dir, show_progress=not args.no_progress)
    if args.json:
        print(json.dumps(result, indent=2))
        print(f"run folder: {result['run_dir']}", file=sys.stderr)
    else:
        print(summary(result))
    return 0
