"""Speed of the CPU executor: barriers (16 blocks x 128 threads x 100 __syncthreads per launch), racecheck beside a
normal launch (that kernel, and cupy.v1 / cupy.rows on a decode problem), and the cold g++ compile of one cupy.v1
instantiation and of a batch of 9 block sizes with and without the precompiled runtime header (wall time, and g++'s
CPU time in extra_info). test_bench_racecheck_ratio interleaves normal and racecheck launches and reports both times
and their ratio in wall and CPU time.

The bar for the barrier launch is 0.5 s. `pytest` runs with --benchmark-disable: the barrier launch then runs once,
untimed, and the heavier benchmarks are skipped; time them all with
`pytest tests/bench/test_bench_cpucuda.py --benchmark-enable` (docs/executor.md has the figures).
"""
from __future__ import annotations

import resource
import shutil
import statistics
import time

import numpy as np
import pytest

from sandbox.variant import registry
from sandbox.cpucuda import CpuRawKernel, CpuRawModule, modes
from sandbox.problem import DecodeProblem

BARRIERS = r"""
extern "C" __global__ void barriers(float* out, int rounds) {
    __shared__ float s[128];
    float acc = 0.0f;
    for (int r = 0; r < rounds; ++r) {  // two barriers per round
        s[threadIdx.x] = (float)(threadIdx.x + r);
        __syncthreads();
        acc += s[(threadIdx.x + 1) % blockDim.x];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""
BLOCKS, THREADS, ROUNDS = 16, 128, 50  # 100 __syncthreads per thread


def _timed_only(benchmark):
    if benchmark.disabled:
        pytest.skip("a timing: runs with --benchmark-enable")


def _barrier_workload(racecheck: bool):
    kernel = CpuRawKernel(BARRIERS, "barriers", racecheck=racecheck)
    out = np.zeros(BLOCKS * THREADS, np.float32)

    def launch():
        kernel(BLOCKS, THREADS, (out, np.int32(ROUNDS)))

    def check():
        t = np.arange(THREADS)
        expected = sum(((t + 1) % THREADS + r) for r in range(ROUNDS)).astype(np.float32)
        np.testing.assert_array_equal(out.reshape(BLOCKS, THREADS), np.tile(expected, (BLOCKS, 1)))

    return launch, check


@pytest.fixture(scope="module")
def workload():
    """(launch, check): one launch of the barrier workload and its validation against NumPy."""
    launch, check = _barrier_workload(False)
    launch()
    return launch, check


def test_barrier_workload_is_correct(workload):
    launch, check = workload
    launch()
    check()


@pytest.mark.benchmark(group="cpucuda")
def test_bench_barriers(benchmark, workload):
    launch, check = workload
    launch()  # validate, then time
    check()
    benchmark(launch)


# ---------------------------------------------------------------- racecheck beside a normal launch

DECODE = dict(seed=11, num_seqs=8, num_heads=8, num_kv_heads=8, head_dim=128, block_size=16, context_lens=[512] * 8,
              dtype="float16")


@pytest.fixture
def default_opt(monkeypatch):
    """Normal and racecheck launches at the executor's default -O2 (conftest.py lowers the suite's to -O0 to
    compile faster)."""
    monkeypatch.setenv("SANDBOX_CPUCUDA_OPT", "-O2")
    monkeypatch.setenv("SANDBOX_CPUCUDA_RACECHECK_OPT", "-O2")


def _decode_workload(name: str, racecheck: bool):
    problem = DecodeProblem.random(**DECODE)
    with modes(racecheck=racecheck):
        prepared = registry.get(name).module.prepare(problem, "cpu")

    def launch():
        with modes(racecheck=racecheck):
            prepared.launch()

    return launch, prepared


@pytest.mark.parametrize("mode", ["normal", "racecheck"])
@pytest.mark.benchmark(group="cpucuda-racecheck-barriers")
def test_bench_racecheck_barriers(benchmark, mode, default_opt):
    """16 x 128 threads x 100 barriers, a warm racecheck launch (library loaded, fibers made) beside a normal one."""
    _timed_only(benchmark)
    launch, check = _barrier_workload(mode == "racecheck")
    launch()
    check()
    benchmark(launch)


@pytest.mark.parametrize("mode", ["normal", "racecheck"])
@pytest.mark.parametrize("name", ["cupy.v1", "cupy.rows"])
def test_bench_racecheck_decode(benchmark, name, mode, default_opt):
    """8 sequences x 8 heads x head dim 128 x 512 tokens (block size 16, float16): racecheck beside normal."""
    _timed_only(benchmark)
    benchmark.group = f"cpucuda-racecheck-{name}"
    launch, prepared = _decode_workload(name, mode == "racecheck")
    launch()  # validate (against a normal launch), then time
    normal, expected = _decode_workload(name, False)
    normal()
    np.testing.assert_allclose(prepared.result().astype(np.float32), expected.result().astype(np.float32),
                               rtol=1e-3, atol=1e-3)
    benchmark(launch)


@pytest.mark.parametrize("name", ["barriers", "cupy.v1", "cupy.rows"])
def test_bench_racecheck_ratio(benchmark, name, default_opt):
    """A warm racecheck launch / a normal one, the two interleaved in one run (5 pairs), in wall time and in CPU
    time (racecheck runs in this process): on a loaded machine the ratios stay comparable. Run with -s to see the
    line it prints; the figures are also the benchmark's extra_info."""
    _timed_only(benchmark)
    if name == "barriers":
        (normal, check), (racecheck, _) = _barrier_workload(False), _barrier_workload(True)
    else:
        (normal, _), (racecheck, _) = _decode_workload(name, False), _decode_workload(name, True)
    normal()
    racecheck()  # warm: the library loaded, the fibers made, the checker's shadow mapped
    times = {"normal": ([], []), "racecheck": ([], [])}  # mode -> (wall, cpu)

    def timed(mode, launch):
        cpu, wall = time.process_time(), time.perf_counter()
        launch()
        times[mode][0].append(time.perf_counter() - wall)
        times[mode][1].append(time.process_time() - cpu)

    def pair():
        timed("normal", normal)
        timed("racecheck", racecheck)

    benchmark.pedantic(pair, rounds=5)
    info = {}
    for i, what in enumerate(("wall", "cpu")):
        n, r = (times[m][i] for m in ("normal", "racecheck"))
        info.update({f"normal_{what}_s": [min(n), statistics.median(n)],
                     f"racecheck_{what}_s": [min(r), statistics.median(r)],
                     f"ratio_{what}": [min(r) / min(n), statistics.median(r) / statistics.median(n)]})
    benchmark.extra_info.update(info)
    print(f"\n{name}: " + "; ".join(f"{what}: normal {1e3 * info[f'normal_{what}_s'][0]:.1f} / "
                                    f"{1e3 * info[f'normal_{what}_s'][1]:.1f} ms, racecheck "
                                    f"{1e3 * info[f'racecheck_{what}_s'][0]:.0f} / "
                                    f"{1e3 * info[f'racecheck_{what}_s'][1]:.0f} ms, ratio "
                                    f"{info[f'ratio_{what}'][0]:.1f}x / {info[f'ratio_{what}'][1]:.1f}x"
                                    for what in ("wall", "cpu")) + " (min / median)")


# ---------------------------------------------------------------- cold compiles

@pytest.mark.parametrize("pch", ["pch", "no-pch"])
@pytest.mark.parametrize("batch", [1, 9], ids=["one", "batch9"])
def test_bench_cold_compile(benchmark, tmp_path, monkeypatch, pch, batch):
    """g++ on cupy.v1 (float16, head dim 128): one instantiation, or the 9 block sizes a launcher compiles together,
    with an empty object cache each round; the precompiled runtime header, when used, is built before timing."""
    _timed_only(benchmark)
    from kernels.cupy_raw import common, v1

    monkeypatch.setenv("SANDBOX_CPUCUDA_CACHE", str(tmp_path))
    monkeypatch.setenv("SANDBOX_CPUCUDA_PCH", "1" if pch == "pch" else "0")
    code = common.load_source(v1.PATH)
    names = [v1.kernel_name(b, 128, "float16") for b in common.POW2_BLOCK_SIZES][:batch]
    CpuRawModule(code=code, options=common.OPTIONS, name_expressions=[v1.kernel_name(8, 64, "float32")]).compile()

    def empty_cache():
        for path in tmp_path.iterdir():
            if path.name != "pch":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        return (), {}

    gxx = []  # g++'s CPU seconds per round (the children this process waited for)

    def compile_once():
        start = resource.getrusage(resource.RUSAGE_CHILDREN)
        CpuRawModule(code=code, options=common.OPTIONS, name_expressions=names).compile()
        end = resource.getrusage(resource.RUSAGE_CHILDREN)
        gxx.append(end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime)

    benchmark.group = f"cpucuda-compile-{'one' if batch == 1 else 'batch9'}"
    benchmark.pedantic(compile_once, setup=empty_cache, rounds=3)
    benchmark.extra_info["gxx_cpu_s"] = gxx
    print(f"\ncold compile, {batch} instantiation(s), {pch}: g++ CPU {min(gxx):.2f} s (min of {len(gxx)})")
