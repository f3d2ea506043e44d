"""Time the split-KV CUDA C variants over partition sizes at one shape and block size (GPU only).

    python scripts/tune_partition.py [--shape 64x4096x32/8x128xfp16] [--block-size 16]
                                     [--partitions 256,512,1024,2048] [--variants cupy.gqa,cupy.rows,cupy.dense]

The sweep times every variant at its default partition (512 tokens); this answers "is 512 right
on this GPU?". Each configuration is checked against the reference before it is timed; timing is
the sweep's (CUDA events, L2 flush between repeats, median), bandwidth the sweep's convention. A
configuration a variant refuses (e.g. a tile whose shared memory does not fit) is printed UNSUPPORTED
and the others still run; a wrong or failing one makes the exit status 1.
"""
from __future__ import annotations

import argparse
import sys

import sandbox  # noqa: F401  (picks numba's mode before anything imports numba.cuda)
from sandbox.devices import backends
from sandbox.variant import registry
from sandbox.checking.compare import compare
from sandbox.sweep import shapes
from sandbox.sweep.measure import bandwidth, device, timing
from sandbox.sweep.measure.run import Environment


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default=shapes.GOAL_SHAPE)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--partitions", default="256,512,1024,2048")
    parser.add_argument("--variants", default="cupy.gqa,cupy.rows,cupy.dense")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not backends.cupy_usable():
        print("tune_partition: needs an NVIDIA GPU and CuPy", file=sys.stderr)
        return 2
    shape = shapes.parse_shape(args.shape)
    tokens = shapes.make_tokens(shape, args.seed)
    problem = shapes.paged_problem(tokens, args.block_size)
    expected = shapes.expected_output(tokens)
    env = Environment.create(on_gpu=True, quick=False, log=print)  # the sweep's copy bandwidth and L2 flush
    if env.copy is None:  # Environment.create printed why
        return 2
    timer = env.timer_for("cupy", "gpu")
    print(f"{shape.title}, block size {args.block_size}, seed {args.seed}; copy {env.copy.gbps:.0f} GB/s")
    print(f"{'variant':12s} {'partition':>9s} {'time_us':>9s} {'iqr_us':>7s} {'GB/s':>7s} {'of copy':>7s}")
    failed = False
    for row in tune(problem, expected, args.variants.split(","), [int(p) for p in args.partitions.split(",")],
                    lambda fn: timing.measure(fn, timer, timing.GPU_TIMING, flush=env.flush)):
        name, partition, status = row["variant"], row["partition"], row["status"]
        if status == "ok":
            gbps = bandwidth.kernel_gbps(problem.bytes_moved(), row["stats"].median)
            print(f"{name:12s} {partition:9d} {row['stats'].median * 1e6:9.1f} {row['stats'].iqr * 1e6:7.1f} "
                  f"{gbps:7.0f} {gbps / env.copy.gbps:7.1%}", flush=True)
        else:
            failed |= status in ("wrong", "error")
            print(f"{name:12s} {partition:9d} {status.upper()}: {row['note']}", flush=True)
        device.free_device_memory()
    return 1 if failed else 0


def tune(problem, expected, variants, partitions, measure, prepare=None):
    """One row per (variant, partition): {variant, partition, status, note, stats}. A refusal (ValueError,
    sandbox.Unsupported included: e.g. a tile whose shared memory does not fit) is `unsupported` and the
    next configuration runs; another exception is `error`; a wrong output is `wrong` (never timed)."""
    if prepare is None:
        prepare = lambda name, partition: registry.get(name).module.prepare(problem, "gpu", partition_size=partition)  # noqa: E731
    for name in variants:
        for partition in partitions:
            row = dict(variant=name, partition=partition, status="ok", note="", stats=None)
            try:
                prepared = prepare(name, partition)
            except ValueError as exc:
                yield dict(row, status="unsupported", note=str(exc).splitlines()[0])
                continue
            except Exception as exc:
                yield dict(row, status="error", note=f"prepare raised {type(exc).__name__}: {exc}")
                continue
            try:
                prepared.launch()
                verdict = compare(prepared.result(), expected, problem.dtype)
                if not verdict.ok:
                    yield dict(row, status="wrong", note=verdict.report.splitlines()[0])
                    continue
                yield dict(row, stats=measure(prepared.launch))
            except Exception as exc:
                yield dict(row, status="error", note=f"{type(exc).__name__}: {exc}")
            finally:
                del prepared


if __name__ == "__main__":
    sys.exit(main())
