"""python -m sandbox sweep: every variant x block size x shape, checked then timed; results/<UTC>-sweep/.

Exit status: 0 when every point ran correct (or was unsupported/skipped), 1 when any point was
wrong or raised, 130 when interrupted (the rows measured so far are kept).
"""
from __future__ import annotations

from pathlib import Path

from ..analysis import gpus
from ..devices import backends
from ..problem.option_tokens import known_tokens, parse_option_tokens
from ..variant import registry
from ..sweep import shapes as shapes_mod
from ..sweep.measure import timing, traffic_columns
from ..sweep.measure.run import DENSE_BASELINE, SweepConfig, run_sweep
from . import add_config_argument, block_size_list, numbers, select_names
from ..errors import RefusedRequest


# Bounds of the numeric flags (checked by the parser, before anything is written): generous, but finite.
MAX_SEED = 10**9
MAX_TOKENS = 10**7              # a shared prompt longer than any model's context is a typo
MAX_GROUP = 4096
MAX_SECONDS = 7 * 24 * 3600.0   # a week
MAX_MS = 3600 * 1e3             # an hour per point
MAX_REPEATS = 10**6


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:g}"


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="variants to race: names, families (numba, cupy, wrong) or globs (numba.*), space or comma "
                             "separated; default: every registered variant (negative controls only when named)")
    parser.add_argument("--variants", metavar="LIST", help="the same as the positional names, comma-separated")
    parser.add_argument("--block-sizes", type=block_size_list, metavar="LIST",
                        help=f"comma-separated block sizes (default {','.join(map(str, shapes_mod.DEFAULT_BLOCK_SIZES))}; "
                             f"--quick on the CPU: {','.join(map(str, shapes_mod.QUICK_CPU_BLOCK_SIZES))})")
    parser.add_argument("--shapes", metavar="LIST",
                        help="comma-separated SEQSxTOKENSxHEADS/KVHEADSxHEADDIMxDTYPE[:KVDTYPE] (e.g. "
                             "64x4096x32/8x128xfp16, 64x4096x32/8x128xbf16:e4m3; dtypes fp32, fp16, bf16; cache e4m3, "
                             "e5m2), optionally followed by ' q=Q' and/or ' shared=G'; MLA shapes "
                             "mla:SEQSxTOKENSxHEADS[xDTYPE[:fp8]] [topk=K] [q=Q] (e.g. 'mla:128x4096x128xbf16', "
                             "'mla:64x8192x128xbf16:fp8 topk=2048'); or presets "
                             f"{', '.join(shapes_mod.PRESETS)}; default: gpu or cpu (gpu-quick/cpu-quick with --quick)")
    parser.add_argument("--options", metavar="LIST",
                        help=f"attention options for every shape, from the option table: {known_tokens()} "
                             "(window: tokens before the query position still read; alibi: the paper's slopes); e.g. "
                             "window=1024,softcap=30,alibi")
    parser.add_argument("--query-lens", metavar="LIST",
                        help="also run each shape with these query tokens per sequence (e.g. 1,4,16; the last positions, "
                             "causal); decode-only variants record them unsupported")
    parser.add_argument("--shared-prefix", type=numbers.integer(1, MAX_TOKENS), metavar="N",
                        help="also run each shape as groups of --group-size sequences forked from one N-token prompt "
                             f"(each then with 1..{shapes_mod.SUFFIX_MAX} tokens of its own); decode, and each "
                             "--query-lens")
    parser.add_argument("--group-size", type=numbers.integer(2, MAX_GROUP), metavar="G",
                        help="sequences per shared prompt with --shared-prefix (default 8: parallel sampling n = 8)")
    parser.add_argument("--quick", action="store_true",
                        help="small shapes and short timing (CPU: under a minute; GPU: a few seconds per shape)")
    parser.add_argument("--backend", default="auto", choices=backends.BACKENDS,
                        help="auto: the GPU when present, else the CPU; cpu forces emulation (default auto)")
    parser.add_argument("--seed", type=numbers.integer(0, MAX_SEED), default=0,
                        help="seed of the generated K/V and paging (default 0)")
    parser.add_argument("--max-seconds", type=numbers.real(0, MAX_SECONDS, low_open=True), metavar="S",
                        help="time budget: points not started after S seconds are recorded as skipped")
    parser.add_argument("--results-dir", type=Path, metavar="DIR",
                        help="root of the run folders (default: $SANDBOX_RESULTS or results/)")
    parser.add_argument("--dense", default=DENSE_BASELINE, metavar="NAME",
                        help=f"no-paging baseline for paging_overhead (default {DENSE_BASELINE}; empty if not registered)")
    parser.add_argument("--warmup-ms", type=numbers.real(0, MAX_MS), metavar="MS",
                        help=f"GPU warm-up per point, by time (default {_ms(timing.GPU_TIMING.warmup_s)}; "
                             f"--quick {_ms(timing.GPU_QUICK_TIMING.warmup_s)})")
    parser.add_argument("--budget-ms", type=numbers.real(0, MAX_MS, low_open=True), metavar="MS",
                        help=f"repeat timed calls until they add up to MS (default GPU {_ms(timing.GPU_TIMING.budget_s)}, "
                             f"CPU {_ms(timing.CPU_TIMING.budget_s)}; --quick {_ms(timing.GPU_QUICK_TIMING.budget_s)} / "
                             f"{_ms(timing.CPU_QUICK_TIMING.budget_s)})")
    parser.add_argument("--max-repeats", type=numbers.integer(1, MAX_REPEATS), metavar="N",
                        help=f"most timed calls per point (default GPU {timing.GPU_TIMING.max_repeats}, CPU "
                             f"{timing.CPU_TIMING.max_repeats}; --quick {timing.GPU_QUICK_TIMING.max_repeats} / "
                             f"{timing.CPU_QUICK_TIMING.max_repeats})")
    parser.add_argument("--traffic", default="auto", choices=traffic_columns.MODES,
                        help="which points get the traffic columns (counted on the CPU, modelled on --model-device): "
                             "auto = every point on the CPU, on a GPU the first shape at block size 16; all = every "
                             "point; none (default auto)")
    parser.add_argument("--model-device", default=gpus.DEFAULT, metavar="GPU",
                        help=f"the GPU the traffic columns model: {', '.join(gpus.NAMES)} (default {gpus.DEFAULT})")
    parser.add_argument("--no-torch", action="store_true", help="leave torch.sdpa out even where torch is importable")
    parser.add_argument("--no-resources", action="store_true", help="skip the static resources (resources.csv)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--list-shapes", action="store_true", help="print the shape presets and exit")
    tuning = parser.add_argument_group("tunables (sandbox/sweep/measure/tune.py; one of these)")
    tuning.add_argument("--tune", action="store_true",
                        help="try each variant's grid of tunables at every point (ranked by GPU time on a GPU, by the "
                             "traffic model's time on the CPU); the best per (shape, block size) runs and goes to "
                             "tuned.json")
    tuning.add_argument("--tuned", type=Path, metavar="RUN",
                        help="run each point with the configuration a --tune run recorded (RUN/tuned.json)")
    add_config_argument(tuning)
    parser.add_argument("--force", action="store_true",
                        help="run shapes estimated past the hard bound on the CPU too (sandbox/devices/cost.py)")


def select_variants(text: str | None) -> list[str]:
    """Registered names matching the comma-separated names, families or globs (unknown names raise ValueError)."""
    if not text:
        return registry.variants(problem=None)
    return select_names(text, registry.variants(problem=None) + registry.variants("wrong", problem=None),
                        lambda family: registry.variants(family, problem=None))


def build_config(args) -> SweepConfig:
    on_gpu = args.backend != "cpu" and backends.gpu_present()
    shapes = shapes_mod.parse_shapes(args.shapes) if args.shapes else shapes_mod.default_shapes(on_gpu, args.quick)
    shapes = shapes_mod.expand(shapes, query_lens=query_len_list(args.query_lens),
                               shared_prefix=_at_least("--shared-prefix", args.shared_prefix, 1),
                               group_size=_at_least("--group-size", args.group_size, 2),
                               options=parse_option_tokens(args.options) if args.options is not None else None)
    if args.block_sizes:
        block_sizes = args.block_sizes
    elif args.quick and not on_gpu:
        block_sizes = shapes_mod.QUICK_CPU_BLOCK_SIZES
    else:
        block_sizes = shapes_mod.DEFAULT_BLOCK_SIZES
    gpu = timing.GPU_QUICK_TIMING if args.quick else timing.GPU_TIMING
    cpu = timing.CPU_QUICK_TIMING if args.quick else timing.CPU_TIMING
    overrides = {}
    if args.warmup_ms is not None:
        overrides["warmup_s"] = args.warmup_ms / 1e3
    if args.budget_ms is not None:
        overrides["budget_s"] = args.budget_ms / 1e3
    if args.max_repeats is not None:
        overrides["max_repeats"] = args.max_repeats
    gpu = _replace(gpu, **overrides)
    cpu = _replace(cpu, **{k: v for k, v in overrides.items() if k != "warmup_s"})
    given = list(args.names or []) + ([args.variants] if args.variants is not None else [])
    named = ",".join(given)
    if given and not named.replace(",", "").strip():
        raise RefusedRequest(f"--variants {named!r} names no variant (leave it out to race every registered one)")
    if args.dense and args.dense not in registry.variants(problem=None):
        raise RefusedRequest(f"--dense {args.dense!r}: not a registered variant; valid names: "
                             f"{', '.join(registry.variants(problem=None))} (or '' for no baseline)")
    return SweepConfig(variants=select_variants(named or None), block_sizes=tuple(block_sizes), shapes=shapes,
                       backend=args.backend, seed=args.seed, quick=args.quick, max_seconds=args.max_seconds,
                       gpu_timing=gpu, cpu_timing=cpu, dense_baseline=args.dense, torch=not args.no_torch,
                       resources=not args.no_resources, plots=not args.no_plots, progress=not args.no_progress,
                       results_dir=args.results_dir, traffic=args.traffic, model_device=args.model_device,
                       tune=args.tune, tuned=args.tuned, config=args.config, force=args.force)


def query_len_list(text: str | None) -> tuple[int, ...]:
    """"1,4,16" -> (1, 4, 16); ValueError (one line) for anything but whole numbers >= 1."""
    if text is None:
        return ()
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items or not all(t.isdigit() and int(t) >= 1 for t in items):
        raise RefusedRequest(f"--query-lens {text!r}: query tokens per sequence must be whole numbers >= 1, e.g. 1,4,16")
    return tuple(dict.fromkeys(int(t) for t in items))


def _at_least(flag: str, value: int | None, least: int) -> int | None:
    if value is not None and value < least:
        what = "a group must have >= 2 sequences to share a prompt" if flag == "--group-size" else "tokens"
        raise RefusedRequest(f"{flag} must be >= {least} ({what}), got {value}")
    return value


def _replace(config: timing.TimingConfig, **changes) -> timing.TimingConfig:
    import dataclasses
    new = dataclasses.replace(config, **changes)
    return dataclasses.replace(new, min_repeats=min(new.min_repeats, new.max_repeats))


def main(args) -> int:
    if args.list_shapes:
        for name, specs in shapes_mod.PRESETS.items():
            print(f"{name:10} {', '.join(specs)}")
        return 0
    config = build_config(args)
    outcome = run_sweep(config)
    print(outcome.summary)
    print(f"\nresults: {outcome.run_dir}")
    return outcome.exit_code
