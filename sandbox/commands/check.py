"""python -m sandbox check [NAME...]: each variant on edge-case and random problems; non-zero exit on failure.

Decode variants run DecodeProblems, MLA variants MLAProblems (sandbox/checking/mla_check.py: out and lse,
the worst error reported per query dtype and cache format, e.g. bfloat16:fp8_record).

Exit status: 0 when every problem of every variant matches the reference, 1 when any fails, 2 for a
request that cannot run here (--backend gpu without a GPU, a bad --random, an unknown name), 130
on Ctrl-C. A failing problem is printed as the call that rebuilds it (`DecodeProblem.random(...)`).

--asan / --reverse / --racecheck / --poison finite run the CPU executor's checking modes for the CUDA C
variants (they set SANDBOX_CPUCUDA_ASAN=1, SANDBOX_CPUCUDA_ORDER=reverse, SANDBOX_CPUCUDA_RACECHECK=1,
SANDBOX_CPUCUDA_POISON=finite for this process and its children); the CUDA C variants then run on the
CPU executor whatever --backend says (auto), and the output names each mode that ran.

--config NAME=VALUE,... runs every named variant with those tunables (sandbox.tunables(name); a parameter or
value a variant does not declare is refused, exit 2, before anything runs); the PASS/FAIL line names the
configuration. A progress bar per variant counts its problems on stderr (--no-progress: none). A problem
estimated to take long on the CPU is announced with its estimate before it starts, and refused past the hard bound
unless --force (sandbox/devices/cost.py).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from .. import progress
from ..devices import backends, cost
from ..variant import registry, tunables
from ..variant.limits import ANY_BLOCK_SIZES
from ..checking.check import check_problem, edge_block_sizes, edge_case_problems, option_edge_cases
from ..checking import mla_check  # noqa: F401  (attaches the MLA kind's check parts)
from ..problem.option_schema import Context
from ..problem.options import OPTIONS
from ..problem import kinds
from ..problem.decode import DecodeProblem
from . import add_config_argument, numbers, resolve_configs
from ..errors import RefusedRequest

# flag -> (environment variable, value, what the output calls it)
MODES = {
    "asan": ("SANDBOX_CPUCUDA_ASAN", "1", "AddressSanitizer (--asan)"),
    "reverse": ("SANDBOX_CPUCUDA_ORDER", "reverse", "threads in reverse order (--reverse)"),
    "racecheck": ("SANDBOX_CPUCUDA_RACECHECK", "1", "shared-memory race check (--racecheck)"),
    "poison": ("SANDBOX_CPUCUDA_POISON", None, "shared memory poisoned with finite values (--poison finite)"),
}


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="variants to check (default: all registered)")
    parser.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--random", type=numbers.integer(0, 10**6), default=4, metavar="N",
                        help="random problems per variant (default 4)")
    parser.add_argument("--seed", type=numbers.integer(0, 10**9), default=0,
                        help="seed of the random problems (default 0)")
    add_config_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--force", action="store_true",
                        help="run problems estimated past the hard bound too (sandbox/devices/cost.py)")
    modes = parser.add_argument_group("CPU-executor modes (CUDA C variants; see sandbox/cpucuda/README.md)")
    modes.add_argument("--asan", action="store_true", help="run every launch under AddressSanitizer")
    modes.add_argument("--reverse", action="store_true", help="run each block's threads in reverse order")
    modes.add_argument("--racecheck", action="store_true", help="report shared-memory races between barriers")
    modes.add_argument("--poison", choices=("finite",), metavar="finite",
                       help="poison shared memory with finite values (default poison: NaN)")


def problems_for(variant, seed: int, num_random: int):
    """Edge cases and random problems inside the variant's declared limits: [(label, problem)]."""
    limits = variant.limits
    head_dim = 64 if limits.head_dims is None or 64 in limits.head_dims else limits.head_dims[0]
    block_sizes = edge_block_sizes(limits)
    out = []
    for dtype in limits.dtypes:
        out += [(f"{label}/{dtype}", p) for label, p in edge_case_problems(head_dim, dtype, block_sizes)]
    out += list(option_edge_cases(limits, head_dim))
    rng = np.random.default_rng(seed)
    kv_choices = (None,) + tuple(limits.kv_dtypes)
    for i in range(num_random):
        pool = limits.block_sizes or ANY_BLOCK_SIZES
        kv_dtype = kv_choices[(i // len(limits.dtypes)) % len(kv_choices)]
        options = random_options(rng, limits, kv_dtype)
        if limits.max_query_len != 1 and i % 2:
            options["query_lens"] = int(rng.integers(2, 9))
        problem = DecodeProblem.random(int(rng.integers(2**31)), num_seqs=3, num_heads=4, num_kv_heads=2,
                                       head_dim=head_dim, block_size=int(rng.choice(pool)), max_context_len=300,
                                       dtype=limits.dtypes[i % len(limits.dtypes)], extreme_logits=bool(i % 2),
                                       kv_dtype=kv_dtype, **options)
        out.append((f"random#{i} seed={problem.seed}", problem))
    return [(label, p) for label, p in out if limits.supports(p)]  # fixed edge cases may step outside them


def random_options(rng: np.random.Generator, limits, kv_dtype) -> dict:
    """Each option the variant declares (and that applies beside kv_dtype), switched on with probability 1/2
    unless one already on excludes it, and drawn by its row of the option table (DecodeProblem.random keywords)."""
    context = Context(kv_format=kv_dtype or limits.dtypes[0])
    options, on = {}, set()
    for option in OPTIONS:  # as the strategy draws them: a row is skipped only when one already on excludes it
        if (option.feature in limits.options and option.applies(context) and option.random is not None
                and not on & set(option.excludes) and rng.random() < 0.5):
            on.add(option.feature)
            options.update(option.random(rng, context))
    return options


def error_key(problem) -> str:
    """'bfloat16', 'float16:float8_e4m3fn', 'float16:float8_e4m3fn/token' (per-token scales) or
    'bfloat16:nvfp4': what the worst error is reported per."""
    kv = "" if problem.kv_dtype == problem.dtype else f":{problem.kv_format}"
    per_token = "/token" if problem.options.k_scales is not None else ""
    return f"{problem.dtype.name}{kv}{per_token}"


def selected_modes(args) -> list[str]:
    return [m for m in MODES if (getattr(args, m, None) if m != "poison" else args.poison)]


def apply_modes(args) -> list[str]:
    """Set the environment of each requested mode for this process (children inherit it); their labels."""
    labels = []
    for mode in selected_modes(args):
        variable, value, label = MODES[mode]
        os.environ[variable] = args.poison if mode == "poison" else value
        labels.append(label)
    return labels


def backend_for(name: str, family: str, backend: str, modes: list[str]) -> str:
    """The backend a variant is checked on; ValueError (one line) when it cannot run here."""
    if modes and registry.family(family).executor_modes:
        if backend == "gpu":
            raise RefusedRequest(f"{', '.join(modes)}: CPU-executor modes run CUDA C on the CPU; drop --backend gpu")
        return "cpu"
    return registry.family(family).resolve(backend)


def main(args) -> int:
    backends.require_gpu_if_asked(args.backend)
    explicit = bool(args.names)
    names = args.names or registry.variants(problem=None)
    variants = {name: registry.get(name) for name in names}  # unknown name: ValueError listing the valid ones
    configs = resolve_configs(names, args.config)  # a bad --config: ValueError before anything runs
    modes = selected_modes(args)
    plan = {}
    for name, variant in variants.items():
        try:
            plan[name] = backend_for(name, variant.family, args.backend, modes)
        except ValueError as exc:
            if explicit:
                raise RefusedRequest(f"{name}: {exc}") from None
            plan[name] = exc  # e.g. numpy.* with --backend gpu: said below, not a failure
    labels = apply_modes(args)
    if labels:
        print(f"modes: {'; '.join(labels)} (CUDA C variants on the CPU executor; other families run as usual)")
    failures = 0
    for name, variant in variants.items():
        backend = plan[name]
        if isinstance(backend, ValueError):
            print(f"SKIP  {name:<28} {backend}")
            continue
        missing = variant.family_plugin.why_unavailable()  # a peer without its wheel
        if missing:
            print(f"SKIP  {name:<28} unavailable: {missing}")
            continue
        config = configs[name] if args.config else None
        results = run_checks(name, variant, backend, args, config)
        bad = [(label, p, r) for label, p, r in results if not r.ok]
        worst: dict[str, float] = {}
        for _, p, r in results:
            if r.comparison is not None:
                key = variant.kind.error_key(p)
                worst[key] = max(worst.get(key, 0.0), r.comparison.max_abs_err)
        peer = variant.family_plugin.peer_label()  # another project's kernel: its failures are findings
        status = "PASS" if not bad else "FAIL"
        ran = f" [{', '.join(m for m in modes)}]" if modes and variant.family_plugin.executor_modes else ""
        per_dtype = ", ".join(f"{k} {v:.2g}" for k, v in sorted(worst.items())) or "none"
        shown = f" [{tunables.describe(configs[name])}]" if args.config else ""
        found = f" ({peer}: findings about it, not failures of the sandbox)" if peer and bad else ""
        print(f"{status}  {name:<28} {len(results) - len(bad)}/{len(results)} problems; worst max abs err: "
              f"{per_dtype}{ran}{shown}{found}", flush=True)
        for label, problem, r in bad[:5]:
            print(f"      {label}: problem={problem!r}")
            print("      " + (r.error or r.comparison.report).replace("\n", "\n      "))
        failures += bool(bad) and not peer
    return 1 if failures else 0


def run_checks(name: str, variant, backend: str, args, config: dict | None) -> list:
    """[(label, problem, CheckResult)] of the variant's problems, a progress bar counting them."""
    problems = variant.kind.check_problems(variant, args.seed, args.random)
    check = variant.kind.check
    results = []
    with progress.bar(len(problems), name, enabled=not args.no_progress) as bar:
        for label, problem in problems:
            bar.set_postfix_str(label, refresh=False)
            cost.guard(f"{name} {label}", problem.multiply_adds(), variant.family, backend, args.force,
                       warn=lambda line: bar.write(line, file=sys.stderr))
            results.append((label, problem, check(name, problem, backend, config)))
            bar.update()
    return results


# The check command's part of the decode kind (sandbox/problem/kinds.py): its problems, how one is checked, and
# the label the worst error is reported per (the MLA kind's: sandbox/checking/mla_check.py).
kinds.DECODE.attach(check_problems=problems_for, check=check_problem, error_key=error_key)
