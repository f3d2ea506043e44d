"""python -m sandbox check [NAME...]: each variant on edge-case and random problems; non-zero exit on failure."""
from __future__ import annotations

import numpy as np

from .. import registry
from ..check import check_problem, edge_case_problems
from ..problem import DecodeProblem


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="variants to check (default: all registered)")
    parser.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu"))
    parser.add_argument("--random", type=int, default=4, metavar="N", help="random problems per variant (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems (default 0)")


def problems_for(variant, seed: int, num_random: int):
    """Edge cases and random problems inside the variant's declared limits: [(label, problem)]."""
    limits = variant.limits
    head_dim = 64 if limits.head_dims is None or 64 in limits.head_dims else limits.head_dims[0]
    block_sizes = tuple(b for b in (1, 16, 256) if limits.block_sizes is None or b in limits.block_sizes)
    out = []
    for dtype in limits.dtypes:
        out += [(f"{label}/{dtype}", p) for label, p in edge_case_problems(head_dim, dtype, block_sizes)]
    rng = np.random.default_rng(seed)
    for i in range(num_random):
        pool = limits.block_sizes or (1, 2, 4, 8, 16, 32, 64, 128, 256)
        problem = DecodeProblem.random(int(rng.integers(2**31)), num_seqs=3, num_heads=4, num_kv_heads=2,
                                       head_dim=head_dim, block_size=int(rng.choice(pool)), max_context_len=300,
                                       dtype=limits.dtypes[i % len(limits.dtypes)], extreme_logits=bool(i % 2))
        out.append((f"random#{i} seed={problem.seed}", problem))
    return out


def main(args) -> int:
    names = args.names or registry.variants()
    failures = 0
    for name in names:
        variant = registry.get(name)
        results = [(label, check_problem(name, p, args.backend)) for label, p in problems_for(variant, args.seed, args.random)]
        bad = [(label, r) for label, r in results if not r.ok]
        worst = max((r.comparison.max_abs_err for _, r in results if r.comparison is not None), default=float("nan"))
        status = "PASS" if not bad else "FAIL"
        print(f"{status}  {name:<28} {len(results) - len(bad)}/{len(results)} problems, worst max abs err {worst:.3g}")
        for label, r in bad[:5]:
            print(f"      {label}: {r.problem}")
            print("      " + (r.error or r.comparison.report).replace("\n", "\n      "))
        failures += bool(bad)
    return 1 if failures else 0
