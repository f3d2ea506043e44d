"""python -m sandbox traffic VARIANT...: memory traffic counted on the CPU (Nsight Compute's metrics) and the
modelled time on a GPU, per variant and block size.

For each point: the totals against the ideal bytes, the per-site table (the uncoalesced load, the
conflicting store), the model's time, fraction of DRAM bandwidth and binding level; then one summary
table. --csv writes one row per kernel whose columns are the metric names (diff it against
`ncu --csv --metrics ...`), --json every result in full, --plot the device's roofline with every point,
--sensitivity each point's time under the model's what-ifs and whether the fastest variant changes. --config NAME=VALUE,... counts every named variant with
those tunables (sandbox.tunables(name)). Exit 0; 2 for a refused request (a bad --config included: nothing runs,
nothing is written); 1 when a point failed to run, or when no point was counted (every one outside its variant's
limits). A count estimated to take long is announced before it starts, and refused past the hard bound unless
--force (sandbox/devices/cost.py).
"""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import time

import numpy as np

from ..analysis import gpus, sensitivity
from ..devices import cost
from ..analysis.traffic import metrics as M
from ..analysis.traffic import variant as V
from ..problem import dtypes
from ..sweep import mla_shapes, shapes as shapes_mod
from ..sweep.report.mpl import pyplot
from ..sweep.report.roofline import roofline_figure
from ..variant import registry
from ..variant import tunables
from ..variant.limits import Unsupported
from . import add_config_argument, align, block_size_list, numbers, outputs, resolve_configs, select_names
from ..errors import RefusedRequest

DEFAULT_SHAPE = shapes_mod.GOAL_SHAPE
DEFAULT_BLOCK_SIZES = (16,)


def add_arguments(parser) -> None:
    parser.add_argument("variants", nargs="+", metavar="VARIANT",
                        help="variant names, families (cupy, numba, wrong) or globs (cupy.*), comma or space separated")
    parser.add_argument("--shape", default=DEFAULT_SHAPE, metavar="S",
                        help=f"{shapes_mod.SHAPE_FORMAT}, or an MLA shape {mla_shapes.SHAPE_FORMAT} (default "
                             f"{DEFAULT_SHAPE}, the goal shape)")
    parser.add_argument("--block-sizes", type=block_size_list, default=DEFAULT_BLOCK_SIZES, metavar="N,N",
                        help="comma-separated block sizes (default 16)")
    parser.add_argument("--device", default=gpus.DEFAULT,
                        help=f"the GPU modelled: {', '.join(gpus.NAMES)} (default {gpus.DEFAULT})")
    parser.add_argument("--sample-seqs", type=numbers.integer(1, 10**6), metavar="N",
                        help=f"count the blocks of N sequences when all do the same work, and scale (default "
                             f"{V.SAMPLE_SEQS})")
    parser.add_argument("--exact", action="store_true", help="count every block (no sampling: slower)")
    parser.add_argument("--sites", type=numbers.integer(0, 10**6), default=12, metavar="N",
                        help="site rows shown per kernel, the costliest first (0: none; default 12)")
    parser.add_argument("--seed", type=numbers.integer(0, 10**9), default=0)
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON")
    parser.add_argument("--csv", metavar="FILE", help="write one row per kernel, metric names as columns")
    parser.add_argument("--sensitivity", action="store_true",
                        help="re-model each point with the DRAM latency -25%%/+25%%, the copy stream as the DRAM ceiling "
                             "and loads per wait -1/+1, and say where the fastest variant changes")
    parser.add_argument("--plot", metavar="PNG", help="draw the device's roofline with every point on it")
    add_config_argument(parser)
    parser.add_argument("--force", action="store_true",
                        help="count problems estimated past the hard bound too (sandbox/devices/cost.py)")


def _names(values, kind: str = "decode") -> list[str]:
    """The variants asked for, of the shape's kind ("decode", or "mla" for an mla: shape)."""
    known = registry.variants(problem=kind) + registry.variants("wrong", problem=kind)
    names = select_names(list(values), known, lambda family: registry.variants(family, problem=kind))
    for name in names:
        family = registry.get(name).family_plugin
        if family.capture is None:
            counted = [f"{f}.*" for f in registry.FAMILIES
                       if registry.family(f).capture and registry.variants(f, problem=None)]
            raise RefusedRequest(f"{name} has no GPU kernel ({family.summary}): traffic counts a kernel's memory "
                                 f"accesses; choose {' or '.join(counted)} variants")
    return names


def shape_bytes(shape) -> int:
    """Host memory problem_for(shape) takes, about: the K/V elements staged in float32, then in the cache's
    dtype, then paged (K and V); MLA: the latent rows likewise. An estimate to refuse the impossible up front."""
    if isinstance(shape, mla_shapes.MLAShape):
        return shape.num_seqs * shape.context_len * 576 * (4 + 2 * 2)
    itemsize = 4 if shape.kv_dtype is None and shape.dtype == "float32" else 2
    return shape.num_seqs * shape.context_len * shape.num_kv_heads * shape.head_dim * (4 + 3 * itemsize)


def memory_bound() -> int:
    """This machine's memory (16 GiB where it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def check_shape_fits(text: str, shape) -> None:
    needed, bound = shape_bytes(shape), memory_bound()
    if needed > bound:
        raise RefusedRequest(f"--shape {text}: counting it would take about {needed / 2**30:,.1f} GiB of memory; the "
                             f"bound is {bound / 2**30:,.1f} GiB (this machine's): fewer sequences or tokens")


def problem_for(shape, block_size: int, seed: int):
    """The shape paged at `block_size`: the sweep's tables and layout; K/V of one constant value (the counts do
    not depend on the values, and random ones would cost seconds per GB)."""
    if isinstance(shape, mla_shapes.MLAShape):
        return mla_shapes.paged_mla_problem(mla_shapes.make_mla_tokens(shape, seed), block_size)
    if shape.group_size:
        return shapes_mod.shared_problem(shape, block_size, seed)
    kv_shape = (shape.num_seqs, shape.context_len, shape.num_kv_heads, shape.head_dim)
    rows = shape.num_seqs * shape.query_len
    query = np.full((rows, shape.num_heads, shape.head_dim), 0.5, np.float32).astype(dtypes.dtype(shape.dtype))
    if shape.kv_dtype == dtypes.NVFP4:  # packed e2m1 codes (two 1.0s a byte) with e4m3 block scales 1.0 beside them
        cache = np.full(kv_shape[:3] + (shape.head_dim // 2,), 0x22, np.uint8)
        scales = np.ones(kv_shape[:3] + (shape.head_dim // 16,), np.float32).astype(dtypes.dtype("float8_e4m3fn"))
        tokens = shapes_mod.Tokens(shape, query, cache, cache, seed, shape.attention_options(), scales, scales)
        return shapes_mod.paged_problem(tokens, block_size)
    cache = np.full(kv_shape, 0.25, dtype=np.float32).astype(dtypes.dtype(shape.kv_dtype))
    tokens = shapes_mod.Tokens(shape, query, cache, cache, seed, shape.attention_options())
    return shapes_mod.paged_problem(tokens, block_size)


def counted_multiply_adds(name: str, problem, sample: int | None) -> int:
    """The multiply-adds a count simulates: the CPU executor's sampled sequences (V.sample), the Numba capture's
    represented blocks (numba_sample.estimate_seconds)."""
    variant = registry.get(name)
    if variant.family_plugin.capture == "numba_simulator":
        return variant.kind.part("numba_counted_multiply_adds")(problem, name)
    counted, _, _ = V.sample(problem, sample)
    return counted.multiply_adds()


def _site_lines(kernel: dict, limit: int) -> list[str]:
    def cost(s):
        return s.get("sectors", 0) + s.get("wavefronts", 0)

    rows = sorted(kernel["sites"], key=cost, reverse=True)[:limit]
    if not rows:
        return []
    lines = [["  site", "op", "space", "target", "requests", "B/req", "sect/req", "wave/req (ideal)", "lanes  chain"]]
    for s in rows:
        shared = s["space"] == "shared"
        lines.append([f"  {s['file']}:{s['line']}", s["op"], s["space"], s["target"], str(s["requests"]),
                      f"{s['bytes_per_request']:.0f}", "-" if shared else f"{s['sectors_per_request']:.2f}",
                      f"{s['wavefronts_per_request']:.2f} ({s['ideal_wavefronts_per_request']:.2f})" if shared else "-",
                      f"{s['lanes_per_request']:.1f}" + (f"  via {' < '.join(s['chain'])}" if s["chain"] else "")])
    return align(lines).splitlines()


def report(result: dict, sites: int) -> str:
    """One point as text: totals against the ideal, the sites, the model."""
    m, s, model = result["metrics"], V.summary(result), result["model"]
    config = f" [{result['config']}]" if result.get("config") else ""
    out = [f"== {result['variant']}{config}  {result['problem']}  ({result['device']})"]
    out += [f"  note: {n}" for n in result["notes"]]
    out.append(f"  DRAM read {m[M.DRAM_READ]:,} B + write {m[M.DRAM_WRITE]:,} B = {s['dram_bytes']:,} B; ideal "
               f"{s['ideal_bytes']:,} B: {s['bytes_over_ideal']:.3f}x")
    out.append(f"  global loads {m[M.GLOBAL_LOAD_REQUESTS]:,} requests, {s['load_sectors_per_request']:.2f} sectors/request "
               f"(K/V {s['kv_sectors_per_request']:.2f}); L2 sectors read {m['lts__t_sectors_op_read.sum']:,}, "
               f"written {m['lts__t_sectors_op_write.sum']:,}; shared bank conflicts {s['bank_conflicts']:,}")
    for k in result["kernels"]:
        occ = (f"{k['registers']} registers, {k.get('spill_stores', 0)}/{k.get('spill_loads', 0)} B spill "
               f"stores/loads, {k['static_shared_bytes'] + k['dynamic_shared_bytes']} B shared, "
               f"{k['blocks_per_sm']} blocks/SM ({k['limiter']})" if "registers" in k else "no compile census")
        km = next(r for r in model["kernels"] if r["name"] == k["name"])
        loads = (f"loads in flight {km['loads_in_flight']} back to back, {km['loads_per_wait']:.2f} per wait "
                 f"({'SASS' if km['loads_in_flight_source'] == 'sass' else km['loads_in_flight_source']})")
        out.append(f"  kernel {k['name']}  grid {tuple(k['grid'])} block {tuple(k['block'])}: {occ}; {loads}; "
                   f"model {km['time_us']:.1f} us ({km['bound']})")
        out += _site_lines(k, sites)
    levels = ", ".join(f"{n} {v:.1f}" for n, v in model["levels_us"].items())
    out.append(f"  MODEL: {model['time_us']:.1f} us, {100 * model['fraction_of_dram_bw']:.1f}% of nominal DRAM "
               f"bandwidth, {100 * model['fraction_of_achievable']:.1f}% of achievable (the measured read stream), "
               f"bound by {model['bound']} (levels, us: {levels})")
    out += [f"  assumes: {a}" for a in model["assumptions"]]
    return "\n".join(out)


def csv_rows(result: dict, block_size: int, shape: str) -> list[dict]:
    return [dict(variant=result["variant"], shape=shape, block_size=block_size, kernel=k["name"],
                 grid="x".join(map(str, k["grid"])), block="x".join(map(str, k["block"])),
                 model_time_us=round(next(r["time_us"] for r in result["model"]["kernels"] if r["name"] == k["name"]), 3),
                 **{n: k["metrics"][n] for n in M.METRICS}) for k in result["kernels"]]


def sensitivity_line(result: dict, device) -> str:
    """One point's modelled time under each what-if of sandbox.analysis.sensitivity."""
    t = sensitivity.times(result, device)
    cases = ", ".join(f"{c} {t[c]:.1f} ({t[c] / t['model'] - 1:+.0%})" for c in sensitivity.CASES)
    return f"  SENSITIVITY (us): model {t['model']:.1f}; {cases}"


def verdicts(points: list, device) -> str:
    """Per block size: does the fastest variant stay the fastest under every what-if?"""
    lines = ["SENSITIVITY of the verdict (the fastest variant per block size under each what-if):"]
    for bs in dict.fromkeys(bs for _, bs, _ in points):
        here = [(name, sensitivity.times(r, device)) for name, b, r in points if b == bs]
        fastest = min(here, key=lambda p: p[1]["model"])[0]
        flipped = sensitivity.flips(here)
        lines.append(f"  block size {bs}: {fastest} fastest; " + ("the verdict flips: " + "; ".join(flipped)
                                                                  if flipped else "holds in every case"
                                                                  if len(here) > 1 else "one variant only"))
    return "\n".join(lines)


def summary_table(points: list) -> str:
    lines = [["variant", "bs", "DRAM/ideal", "K/V sect/req", "bank confl", "loads in flight", "model us",
              "% nominal", "% achievable", "bound"]]
    for name, bs, result in points:
        s = V.summary(result)
        lines.append([name, str(bs), f"{s['bytes_over_ideal']:.3f}", f"{s['kv_sectors_per_request']:.2f}",
                      f"{s['bank_conflicts']:,}", f"{s['model_loads_in_flight']}/{s['model_loads_per_wait']:.2f}",
                      f"{s['model_time_us']:.1f}",
                      f"{100 * s['model_fraction_of_bw']:.1f}", f"{100 * s['model_fraction_of_achievable']:.1f}",
                      s["model_bound"]])
    return align(lines)


def main(args) -> int:
    shape = shapes_mod.parse_any(args.shape)
    check_shape_fits(args.shape, shape)
    if args.exact and args.sample_seqs is not None:
        raise RefusedRequest(f"--exact counts every block; --sample-seqs {args.sample_seqs} samples: give one")
    outputs.check_output_path("--json", args.json)
    outputs.check_output_path("--csv", args.csv)
    outputs.check_output_path("--plot", args.plot)
    outputs.check_distinct(json=args.json, csv=args.csv, plot=args.plot)
    names = _names(args.variants, shape.kind)
    configs = resolve_configs(names, args.config)  # a bad --config: ValueError before anything runs
    try:
        gpus.get(args.device)
    except ValueError as exc:
        raise RefusedRequest(f"--device {args.device}: {exc}") from None
    sample = None if args.exact else (V.SAMPLE_SEQS if args.sample_seqs is None else args.sample_seqs)
    points, failed, rows = [], 0, []
    for block_size in args.block_sizes:
        problem = None
        for name in names:
            start = time.perf_counter()
            try:
                problem = problem if problem is not None else problem_for(shape, block_size, args.seed)
                cost.guard(f"traffic {name} at {shape.name} block size {block_size}",
                           counted_multiply_adds(name, problem, sample), registry.get(name).family, "cpu",
                           args.force, traffic=True)
                result = V.traffic(name, problem, args.device, sample, config=configs[name])
            except cost.TooLong:
                raise
            except Unsupported as exc:
                print(f"== {name} block size {block_size}: skipped ({exc})")
                continue
            except Exception as exc:  # one variant failing must not hide the others
                print(f"== {name} block size {block_size}: FAILED: {type(exc).__name__}: {exc}")
                failed += 1
                continue
            print(report(result, args.sites))
            if args.sensitivity:
                print(sensitivity_line(result, args.device))
            print(f"  (counted in {time.perf_counter() - start:.1f} s)")
            sys.stdout.flush()
            points.append((name, block_size, result))
            rows += csv_rows(result, block_size, shape.name)
    if len(points) > 1:
        print("\nMODEL (" + gpus.get(args.device).name + "), not a measurement:\n" + summary_table(points))
    if args.sensitivity:
        print(verdicts(points, args.device))
    if args.plot and points:
        fig = roofline_figure([dict(label=f"{n} bs{bs}", flops=V.flops(r), time_us=r["model"]["time_us"],
                                    dram_bytes=V.summary(r)["dram_bytes"], latency_bytes_per_s=V.latency_bandwidth(r))
                               for n, bs, r in points], args.device)
        image = io.BytesIO()
        fig.savefig(image, format=os.path.splitext(args.plot)[1][1:].lower() or "png", dpi=110)
        pyplot().close(fig)
        outputs.write_output("--plot", args.plot, image.getvalue())
        print(f"wrote {args.plot}")
    if args.json:
        outputs.write_output("--json", args.json,
                             json.dumps([dict(r, block_size=bs) for _, bs, r in points], indent=1, default=str))
    if args.csv and rows:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        outputs.write_output("--csv", args.csv, text.getvalue())
    if not points and not failed:
        print("nothing counted: every point was outside its variant's limits (see the skipped lines above)")
    return 1 if failed or not points else 0
