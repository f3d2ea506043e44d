"""A variant's traffic and modelled time on a GPU, counted on the CPU: sandbox.traffic(name, problem).

    traffic(name, problem, device="h200", sample_seqs=8, census=True, config=None) -> dict
        "metrics"      the call's kernels summed (Nsight Compute's names, metrics.METRICS)
        "kernels"      per launch: name, grid, block, metrics, sites, registers, static/dynamic shared bytes,
                       occupancy, blocks_per_sm, limiter (the compile census of that instantiation)
        "ideal_bytes"  query + K/V of every physical slot read, once + table entries + output
                       (problem.ideal_bytes(): a prefix shared through the tables counts once)
        "model"        time_us, fraction_of_dram_bw (of nominal), fraction_of_achievable (of the measured read
                       stream), bound, assumptions, levels_us, kernels (each with loads_in_flight, loads_per_wait,
                       loads_in_flight_source: "sass" when read from its SASS, else what was assumed)
        "scale", "notes"  how many times the counted blocks stand for the grid, and what to know
    columns(name, problem, device="h200", config=None) -> dict   the per-point columns a sweep records (COLUMNS)

Each family's capture counts its launches (sandbox/variant/family.py): cupy.* run on the CPU executor in traffic
mode; numba.* under the Numba simulator's capture (sandbox.analysis.traffic.numba_sim); a family's own capture
function (triton.*: Triton's interpreter) hands its launches and each one's census, with the cubin whose SASS
gives the loads in flight; numpy.gather has no kernel.
A micro-benchmark (the micro problem kind, micro.*) is counted one block for the grid (micro.py). One L2 model
spans the call's kernels; each launch's census and the scaling of its counts are census.py's.

Large problems: when every sequence (or every group of sequences sharing a prompt) does the same work
(same context and query lengths), the blocks of the first `sample_seqs` sequences (whole groups) are
counted and every count is scaled by num_seqs / counted; the grids, the model and ideal_bytes are the
whole problem's, and the result says so. sample_seqs=None counts every block.
"""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from .. import gpus, model as _model, resources
from ..occupancy import occupancy
from . import metrics as M
from . import micro, numba_sample
from .census import assumed_loads, loads_fields, model_kernel, nvrtc_census, read_loads, scaled, scaled_sites
from .count import count
from sandbox.cpucuda import modes as cpucuda_modes, traffic_capture
from sandbox.errors import RefusedRequest
from sandbox.devices.backends import numba_simulated
from sandbox.problem import kinds
from sandbox.problem.mla import record as mla_record
from sandbox.problem.micro import MICRO
from sandbox.variant import registry, tunables

SAMPLE_SEQS = 8
COLUMNS = ("dram_bytes", "ideal_bytes", "bytes_over_ideal", "load_sectors_per_request", "kv_sectors_per_request",
           "bank_conflicts", "model_time_us", "model_fraction_of_bw", "model_fraction_of_achievable", "model_bound",
           "model_loads_in_flight", "model_loads_per_wait", "model_loads_source", "model_flops")
_CACHE_TARGETS = ("key_cache", "value_cache", "cache")  # decode's K and V; MLA's latent rows


# ---------------------------------------------------------------- sampling sequences of the same work shape

def sharing_groups(problem) -> list[np.ndarray]:
    """Sequences that share a physical block (a forked prompt), as index arrays in order of first sequence."""
    parent = list(range(problem.num_seqs))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_block = problem.first_read_tokens() // problem.block_size
    end_block = -(-problem.context_lens.astype(np.int64) // problem.block_size)
    owner: dict[int, int] = {}
    for s in range(problem.num_seqs):
        for b in problem.block_tables[s, first_block[s]:end_block[s]].tolist():
            if b in owner:
                parent[root(s)] = root(owner[b])
            else:
                owner[b] = s
    groups: dict[int, list[int]] = {}
    for s in range(problem.num_seqs):
        groups.setdefault(root(s), []).append(s)
    return [np.array(g) for g in sorted(groups.values())]


def subproblem(problem, seqs: np.ndarray):
    """The problem restricted to sequences `seqs` (same caches: every address stays where it was)."""
    if problem.query_start is None:
        query, query_start = problem.query[seqs], None
    else:
        qs = problem.query_start.astype(np.int64)
        query = problem.query[np.concatenate([np.arange(qs[s], qs[s + 1]) for s in seqs])]
        query_start = np.concatenate([[0], np.cumsum(problem.query_lens[seqs])]).astype(np.int32)
    return dataclasses.replace(problem, query=np.ascontiguousarray(query),
                               block_tables=np.ascontiguousarray(problem.block_tables[seqs]),
                               context_lens=np.ascontiguousarray(problem.context_lens[seqs]),
                               query_start=query_start, recipe=None)


def sample(problem, sample_seqs: int | None):
    """(problem to count, scale, note): the first whole groups of at least `sample_seqs` sequences when
    every group does the same work; else the problem itself (scale 1)."""
    if sample_seqs is None or problem.num_seqs <= sample_seqs:
        return problem, 1.0, None
    if sample_seqs < 1:
        raise RefusedRequest(f"sample_seqs must be >= 1 or None, got {sample_seqs}")
    groups = sharing_groups(problem)
    lens, qlens = problem.context_lens, problem.query_lens
    shapes = {(tuple(lens[g].tolist()), tuple(qlens[g].tolist())) for g in groups}
    if len(shapes) != 1:
        return problem, 1.0, "every block counted: the sequences do not all do the same work"
    take = -(-sample_seqs // len(groups[0]))
    if take >= len(groups):
        return problem, 1.0, None
    seqs = np.concatenate(groups[:take])
    scale = len(groups) / take
    note = (f"blocks of {len(seqs)} of {problem.num_seqs} sequences counted ({take} of {len(groups)} groups doing "
            f"the same work: same context and query lengths); counts scaled x{scale:g}")
    return subproblem(problem, seqs), scale, note


def mla_subproblem(problem, seqs: np.ndarray):
    """The MLAProblem restricted to sequences `seqs` (same cache: every address stays where it was)."""
    rows = np.concatenate([np.flatnonzero(problem.rows()[0] == s) for s in seqs])
    query_start = None
    if problem.query_start is not None:
        query_start = np.concatenate([[0], np.cumsum(problem.query_lens[seqs])]).astype(np.int32)
    return dataclasses.replace(problem, query=np.ascontiguousarray(problem.query[rows]),
                               block_tables=np.ascontiguousarray(problem.block_tables[seqs]),
                               context_lens=np.ascontiguousarray(problem.context_lens[seqs]), query_start=query_start,
                               indices=None if problem.indices is None else np.ascontiguousarray(problem.indices[rows]),
                               recipe=None)


def mla_sample(problem, sample_seqs: int | None):
    """sample() for an MLAProblem: the first `sample_seqs` sequences when every sequence does the same work (same
    context and query lengths, as many valid indices per row) and no physical block serves two sequences."""
    if sample_seqs is None or problem.num_seqs <= sample_seqs:
        return problem, 1.0, None
    if sample_seqs < 1:
        raise RefusedRequest(f"sample_seqs must be >= 1 or None, got {sample_seqs}")
    used = [problem.block_tables[s, :-(-int(n) // problem.block_size)] for s, n in enumerate(problem.context_lens)]
    blocks = np.concatenate(used)
    same = (len(set(problem.context_lens.tolist())) == 1 and len(set(problem.query_lens.tolist())) == 1
            and len(set(problem.tokens_per_row().tolist())) == 1)
    if not same or len(np.unique(blocks)) < len(blocks):
        return problem, 1.0, "every block counted: the sequences do not all do the same work, or share blocks"
    scale = problem.num_seqs / sample_seqs
    note = (f"blocks of {sample_seqs} of {problem.num_seqs} sequences counted (every sequence does the same work); "
            f"counts scaled x{scale:g}")
    return mla_subproblem(problem, np.arange(sample_seqs)), scale, note


# ---------------------------------------------------------------- captures per family

def _capture_cupy(name, problem, counted, census: bool, config, device, kind: str = "decode"):
    prepare = kinds.named(kind).part("prepare")
    with cpucuda_modes(traffic=True):  # the executor's one switch: every kernel launched inside is counted
        whole, _ = prepare(name, problem, "cpu", config)
        if counted is problem:
            part = whole
        elif hasattr(whole, "subset"):  # a plan that depends on the batch (FlashInfer's split): the whole's
            part = whole.subset(counted)
        else:
            part = prepare(name, counted, "cpu", config)[0]
        with traffic_capture() as launches:
            part.launch()
    grids = [_dims(g) for _, g, _, _, _ in whole.launches]
    # a family whose headers NVRTC cannot compile (FlashInfer's) names its own compile (Family.census)
    compiler = registry.get(name).family_plugin.census
    compiler = compiler if callable(compiler) else None
    resources = [_cupy_census(kernel, block, shared, device.arch, compiler) if census else _no_census(block, shared)
                 for kernel, _, block, _, shared in whole.launches]
    return launches, grids, resources


def _capture_numba(name, problem, counted, census: bool, config, device, kind: str = "decode"):
    try:
        from . import numba_sim
    except ImportError as exc:
        raise RuntimeError(f"{name}: Numba traffic capture not available (sandbox.analysis.traffic.numba_sim "
                           f"cannot be imported: {exc})") from None

    if not numba_simulated():
        raise RuntimeError(f"{name}: the Numba traffic capture needs the Numba CUDA simulator, and numba.cuda is "
                           "in real mode in this process; run with NUMBA_ENABLE_CUDASIM=1")
    if counted is not problem:
        raise RuntimeError("sampling sequences is for the CPU executor's large problems; the simulator counts all")
    # The capture's own helpers where it has them: blocks of a GPU's size (the simulator's launchers cap
    # them otherwise), and one block counted per class of identical-work blocks (numba_sample).
    sizes = getattr(numba_sim, "gpu_thread_counts", contextlib.nullcontext)
    prepare = kinds.named(kind).part("prepare")
    with sizes():
        prepared, _ = prepare(name, problem, "cpu", config)
    represent = kinds.named(kind).part("numba_representatives")(problem, gpus.get(device).l2_bytes)
    with (numba_sim.capture(represent=represent) if represent else numba_sim.capture()) as launches:
        prepared.launch()
    arch = gpus.get(device).arch
    res = (_numba_census(name, problem, kind, config, arch) if census
           else dict(census_error="not asked for (census=False)"))
    return launches, [tuple(r.grid) for r in launches], [_launched(res, r.block, arch, r.kernel) for r in launches]


# The harness's captures by the name a family declares (sandbox/variant/family.py, CAPTURES).
CAPTURES = {"executor": _capture_cupy, "numba_simulator": _capture_numba}


def _read_image(census: dict, arch: str) -> dict:
    """A capture's census with its loads in flight: a family's own capture may hand each launch's cubin as
    `image` (cubin bytes, function name; sandbox/variant/family.py), whose SASS is read here as the CUDA C
    census reads its own; a census with neither loads nor an image assumes them and says why."""
    if "image" in census:
        cubin, function = census["image"]
        rest = {k: v for k, v in census.items() if k != "image"}
        return dict(rest, **loads_fields(read_loads(cubin, function), arch))
    if "loads_in_flight_source" in census:
        return census
    return dict(census, **assumed_loads("no compile census" if "census_error" in census
                                        else "the family's capture gave no cubin to read"))


def _launched(census: dict, block, arch: str, kernel: str = "") -> dict:
    """The census with the threads per block this launch ran (and the occupancy they give)."""
    threads = int(np.prod(_dims(block)))
    readings = census.get("sass_readings") or {}
    census = {k: v for k, v in census.items() if k != "sass_readings"}
    # The SASS of the kernel this launch ran (numba.split launches two): matched by name, else the only one.
    match = [r for n, r in readings.items() if kernel and kernel in n] or (list(readings.values())
                                                                           if len(readings) == 1 else [])
    census.update(loads_fields(match[0], arch) if match else assumed_loads(
        "no SASS: the Numba simulator's capture without a compile census" if not readings
        else f"no SASS matched kernel {kernel!r}"))
    if "registers" not in census or census.get("threads_per_block") == threads:
        return census
    occ = occupancy(census["registers"], census["static_shared_bytes"] + census["dynamic_shared_bytes"], threads,
                    arch)
    return dict(census, threads_per_block=threads, occupancy=round(occ.fraction, 4), blocks_per_sm=occ.blocks_per_sm,
                limiter=occ.limiter)


def _numba_representatives(problem, l2_bytes: int):
    """One block simulated per kind of identical-work block (numba_sample). Query heads of one KV head are
    one kind only when the problem's K/V overflow the L2: when they fit, a GPU serves a head's repeat
    reads from L2, and only simulating every head shows it (a represented head would be charged its
    representative's DRAM bytes: twice the truth or more)."""
    if problem.max_query_len != 1:
        return None
    kv_bytes = problem.key_cache.nbytes + problem.value_cache.nbytes
    return numba_sample.decode_representatives(problem, across_heads=kv_bytes > l2_bytes)


def _dims(value) -> tuple:
    dims = [int(value)] if isinstance(value, (int, np.integer)) else [int(v) for v in value]
    return tuple(dims + [1] * (3 - len(dims)))


def _no_census(block, dynamic_shared: int) -> dict:
    return dict(census_error="not asked for (census=False)", threads_per_block=int(np.prod(_dims(block))),
                dynamic_shared_bytes=int(dynamic_shared), **assumed_loads("no compile census (census=False)"))


def _cupy_census(kernel, block, dynamic_shared: int, arch: str, compiler=None) -> dict:
    """Registers and shared memory of this exact instantiation (NVRTC -> cubin for the device's arch, or the
    family's own `compiler(kernel, arch) -> (Resources, cubin, function)`), its occupancy and the loads its warps
    keep in flight (read from the same cubin's SASS)."""
    threads = int(np.prod(_dims(block)))
    try:
        if compiler is None:
            res, reading = nvrtc_census(kernel.code, kernel.name, tuple(kernel.options), arch)
        else:
            res, cubin, function = compiler(kernel, arch)
            reading = read_loads(cubin, function)
    except Exception as exc:  # no CUDA wheels: the model says occupancy is unknown
        return dict(census_error=f"{type(exc).__name__}: {exc}"[:300], threads_per_block=threads,
                    dynamic_shared_bytes=int(dynamic_shared), **assumed_loads("no compile census"))
    occ = occupancy(res.registers, res.static_shared_bytes + int(dynamic_shared), threads, arch)
    return dict(registers=res.registers, static_shared_bytes=res.static_shared_bytes,
                dynamic_shared_bytes=int(dynamic_shared), local_bytes=res.local_bytes,
                spill_stores=res.spill_stores, spill_loads=res.spill_loads, threads_per_block=threads,
                occupancy=round(occ.fraction, 4), blocks_per_sm=occ.blocks_per_sm, limiter=occ.limiter,
                **loads_fields(reading, arch))


def _decode_census_shape(problem) -> dict:
    return dict(head_dim=problem.head_dim, kv_dtype=None if problem.kv_dtype == problem.dtype else problem.kv_dtype.name)


def _mla_census_shape(problem) -> dict:
    """resources takes MLA's one head dim itself; the fp8 record goes by its codes' dtype."""
    return dict(kv_dtype=mla_record.CODE_DTYPE if problem.fp8 else None)


def _numba_census(name, problem, kind: str, config, arch: str) -> dict:
    shape = kinds.named(kind).part("census_shape")(problem)
    try:
        (row,) = resources.collect([name], [problem.block_size], dtype=problem.dtype.name, config=config, arch=arch,
                                   images=True, **shape)
    except Exception as exc:
        return dict(census_error=f"{type(exc).__name__}: {exc}"[:300])
    keys = ("registers", "static_shared_bytes", "dynamic_shared_bytes", "local_bytes", "spill_stores", "spill_loads",
            "threads_per_block", "occupancy", "blocks_per_sm", "limiter")
    out = {k: row[k] for k in keys if k in row} or dict(census_error=row.get("skipped") or row.get("error", "?"))
    out["sass_readings"] = _numba_readings(row.get("images") or ())
    return out


def _numba_readings(images) -> dict:
    """{kernel name: LoadsInFlight or the reason} of a Numba census row's cubins."""
    return {kernel: read_loads(cubin, function) for kernel, cubin, function in images}


# ---------------------------------------------------------------- the result

def traffic(name: str, problem, device=gpus.DEFAULT, sample_seqs: int | None = SAMPLE_SEQS, census: bool = True,
            config: dict | None = None) -> dict:
    """Count `name`'s kernels on `problem` and model their time on `device` (see the module docstring).

    config: the variant's tunables (sandbox.tunables(name); None: its defaults). census=False skips the compile census (registers, occupancy: NVRTC or numba in real mode); the model then
    takes occupancy as unknown.
    """
    gpu = gpus.get(device)
    variant = registry.get(name)
    plugin = variant.family_plugin
    if plugin.capture is None:
        counted_families = [f"{f}.*" for f in registry.FAMILIES
                            if registry.family(f).capture and registry.variants(f, problem=None)]
        raise RefusedRequest(f"{name} has no GPU kernel ({plugin.summary}): traffic counts a kernel's memory "
                             f"accesses; choose a {' or '.join(counted_families)} variant")
    kind = variant.problem
    if kind == MICRO:  # a micro-benchmark's problem: one block counted for the whole grid (micro.py)
        return micro.traffic(variant, problem, gpu, census, config)
    problem.validate()
    variant.limits.check(name, problem, "cpu")
    sampler = variant.kind.part("traffic_sample")
    # the simulator's capture counts every block itself (numba_sample); the others count a sample of a large
    # problem's sequences
    counted, scale, note = sampler(problem, None if plugin.capture == "numba_simulator" else sample_seqs)
    capture = plugin.capture if callable(plugin.capture) else CAPTURES[plugin.capture]
    launches, grids, resources = capture(name, problem, counted, census, config, gpu, kind)
    resources = [_read_image(res, gpu.arch) for res in resources]
    if len(grids) != len(launches):
        raise RuntimeError(f"{name}: {len(launches)} launches counted but {len(grids)} prepared")
    call = count(launches, gpu)
    # The attention math's FLOPs on CUDA cores: what the counted tensor-core MMAs did not do (a tensor-core
    # variant's Q.K^T and P.V are its MMAs; their padding rows make the MMAs' FLOPs the larger).
    tensor_flops = scaled(call.metrics, scale)["sandbox__tensor_flops.sum"]
    flops = max(2.0 * problem.multiply_adds() - tensor_flops, 0.0)
    load_sectors = [t.metrics[M.GLOBAL_LOAD_SECTORS] for t in call.launches]
    kernels, model_inputs = [], []
    for t, grid, res, sectors in zip(call.launches, grids, resources, load_sectors):
        metrics = scaled(t.metrics, scale)
        share = flops * sectors / sum(load_sectors) if sum(load_sectors) else flops / len(call.launches)
        kernels.append(dict(name=t.kernel, grid=grid, block=t.block, counted_grid=t.grid, metrics=metrics,
                            sites=scaled_sites(t.sites, scale), notes=t.notes, flops=share, **res))
        model_inputs.append(model_kernel(t.kernel, metrics, grid, t.block, res, share))
    notes = ([note] if note else []) + call.notes + [f"{k['name']}: compile census unavailable ({k['census_error']})"
                                                     for k in kernels if "census_error" in k]
    return dict(variant=name, config=tunables.describe(variant.configuration(config)), device=gpu.name,
                problem=problem.describe(), metrics=scaled(call.metrics, scale),
                kernels=kernels, ideal_bytes=int(problem.ideal_bytes()), model=_model.predict(model_inputs, gpu),
                scale=scale, notes=notes)


def kv_sectors_per_request(result: dict) -> float:
    """Sectors per request of the cache's loads (sites reading key_cache / value_cache, MLA's latent cache), over
    every kernel."""
    sites = [s for k in result["kernels"] for s in k["sites"]
             if s["op"] == "load" and s["space"] == "global" and s["target"] in _CACHE_TARGETS]
    requests = sum(s["requests"] for s in sites)
    return sum(s["sectors"] for s in sites) / requests if requests else 0.0


def flops(result: dict) -> float:
    """The FLOPs the model counts for a call: the CUDA-core math shared among the kernels, and the counted MMAs'."""
    return sum(k.get("flops", 0.0) for k in result["kernels"]) + result["metrics"]["sandbox__tensor_flops.sum"]


def latency_bandwidth(result: dict) -> float:
    """Bytes per second a call's DRAM bytes would flow at if the latency level alone set its time (the latency-bound
    roof of its bytes in flight, for the roofline)."""
    seconds = result["model"]["levels_us"]["latency"] / 1e6
    m = result["metrics"]
    return (m[M.DRAM_READ] + m[M.DRAM_WRITE]) / seconds if seconds else float("inf")


def summary(result: dict) -> dict:
    """The COLUMNS of one traffic() result (loads in flight: the longest kernel's)."""
    m = result["metrics"]
    longest = max(result["model"]["kernels"], key=lambda k: k["time_us"])
    dram = m[M.DRAM_READ] + m[M.DRAM_WRITE]
    return dict(dram_bytes=dram, ideal_bytes=result["ideal_bytes"], bytes_over_ideal=dram / result["ideal_bytes"],
                load_sectors_per_request=m[M.GLOBAL_LOAD_SECTORS] / max(m[M.GLOBAL_LOAD_REQUESTS], 1),
                kv_sectors_per_request=kv_sectors_per_request(result),
                bank_conflicts=sum(m[n] for n in M.SHARED_CONFLICTS),
                model_time_us=result["model"]["time_us"], model_fraction_of_bw=result["model"]["fraction_of_dram_bw"],
                model_fraction_of_achievable=result["model"]["fraction_of_achievable"],
                model_bound=result["model"]["bound"], model_loads_in_flight=longest["loads_in_flight"],
                model_loads_per_wait=longest["loads_per_wait"],
                model_loads_source="sass" if longest["loads_in_flight_source"] == "sass" else "assumed",
                model_flops=flops(result))


def columns(name: str, problem, device=gpus.DEFAULT, sample_seqs: int | None = SAMPLE_SEQS,
            config: dict | None = None) -> dict:
    """What a sweep point records: summary(traffic(name, problem, device, config=config)) (keys: COLUMNS)."""
    return summary(traffic(name, problem, device, sample_seqs, config=config))


def _decode_numba_multiply_adds(problem, name: str) -> int:
    """The multiply-adds the Numba capture simulates: its represented blocks (numba_sample.estimate_seconds)."""
    return int(numba_sample.estimate_seconds(problem, name) / numba_sample.SECONDS_PER_MULTIPLY_ADD)


# The traffic counter's part of each problem kind (sandbox/problem/kinds.py): how a count samples sequences,
# which blocks the Numba capture simulates (None: every one) and the multiply-adds that costs, the census's
# shape keywords.
kinds.DECODE.attach(traffic_sample=sample, numba_representatives=_numba_representatives,
                    numba_counted_multiply_adds=_decode_numba_multiply_adds, census_shape=_decode_census_shape)
kinds.MLA.attach(traffic_sample=mla_sample, numba_representatives=lambda problem, l2_bytes: None,
                 numba_counted_multiply_adds=lambda problem, name: problem.multiply_adds(),
                 census_shape=_mla_census_shape)
