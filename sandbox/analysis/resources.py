"""Static resources of every kernel variant, compiled for a real GPU architecture without a GPU.

    collect(variants=None, block_sizes=POW2_BLOCK_SIZES, head_dim=128, dtype="float16", arch=DEFAULT_ARCH,
            kv_dtype=None, config=None) -> list[dict], one row per (variant, block size)
    collect_many(variants, [(block_sizes, dtype, kv_dtype), ...], head_dim, arch) -> the same, several
            precisions in one go (one real-mode child for them all)

Walks the registry (variants of every family and kind, decode and MLA, and cache writers) and asks each
module that defines
`compile_report(block_size, head_dim, dtype, arch)` for its registers, shared memory, local memory
and spills, then adds the theoretical occupancy (sandbox.analysis.occupancy). dtype is the query's (float32,
float16, bfloat16); kv_dtype an fp8 cache (float8_e4m3fn, float8_e5m2; None: the query's dtype), passed
as compile_report(..., kv_dtype=...) only when given. A module whose compile_report takes no kv_dtype
(or refuses it: TypeError, sandbox.Unsupported) gives a `skipped` row saying so. Numba's compile_ptx
needs numba.cuda in real mode, so a simulator process runs the collection in a real-mode child.

Tunables: `config` ({"threads": 64}; sandbox.variant.tunables) is resolved against every selected variant
(an undeclared parameter or value is refused before anything compiles) and passed to compile_report as
keyword arguments, so a row reports what a run with that configuration launches; each row's `config`
names it ("threads=64"; "" for a variant without tunables).

Also here (from ptx_link.py), for any PTX producer: `link_ptx(ptx, arch)` links with nvJitLink and parses its log.
`collect(..., images=True)` also returns each kernel's cubin, for sandbox.analysis.sass to disassemble.
"""
from __future__ import annotations

import concurrent.futures
import inspect

from ..problem import dtypes as dtypes_mod
from ..variant import registry, tunables
from ..devices.backends import numba_simulated
from .gpus import DEFAULT_ARCH
from .occupancy import occupancy
from .ptx_link import ARCHS, LINKER_EXTRA_SMEM, link_ptx, parse_arch, parse_link_log  # noqa: F401  (re-exported)
from ..variant.limits import POW2_BLOCK_SIZES, Unsupported
from ..devices.other_mode import call_in_numba_mode
from ..errors import RefusedRequest

DTYPES = dtypes_mod.QUERY_DTYPES  # float32, float16, bfloat16
KV_DTYPES = dtypes_mod.FP8_DTYPES  # besides the query's own
COLUMNS = ("variant", "family", "block_size", "head_dim", "dtype", "kv_dtype", "arch", "registers", "static_shared_bytes",
           "dynamic_shared_bytes", "local_bytes", "spill_stores", "spill_loads", "threads_per_block",
           "occupancy", "limiter", "path")


def _modules(names):
    """[(name, family, module)] for the given names, or every registered variant and cache writer."""
    if names is None:
        names = registry.variants(problem=None) + registry.cache_writers()
    out = []
    for name in names:
        if name in registry.CACHE_WRITERS:
            entry = registry.get_cache_writer(name)
        else:
            try:
                entry = registry.get(name)
            except ValueError:
                valid = ", ".join(registry.variants(problem=None) + registry.cache_writers())
                raise RefusedRequest(f"unknown variant {name!r}; valid names: {valid}") from None
        out.append((name, entry.family, entry.module))
    return out


def without_compile_report(names=None) -> list[str]:
    """The selected (default: every registered) variants and cache writers that define no compile_report."""
    return [name for name, _, module in _modules(names) if not hasattr(module, "compile_report")]


def _head_dim(module, head_dim: int) -> int:
    """The head dim a variant's rows are for: the one asked, except for MLA variants (one head dim, 576)."""
    kind = getattr(getattr(module, "LIMITS", None), "kind", None)  # cache writers have none
    return getattr(kind, "fixed_head_dim", None) or head_dim


def _supported(module, block_size: int, head_dim: int, dtype: str, kv_dtype: str | None = None) -> str | None:
    """Why this variant cannot take the configuration (by its LIMITS), or None."""
    limits = getattr(module, "LIMITS", None)
    if limits is None:
        return None
    if limits.block_sizes is not None and block_size not in limits.block_sizes:
        return f"block_size {block_size} not supported"
    if limits.head_dims is not None and head_dim not in limits.head_dims:
        return f"head_dim {head_dim} not supported"
    if dtype not in limits.dtypes:
        return f"dtype {dtype} not supported"
    if kv_dtype is not None and kv_dtype not in getattr(limits, "kv_dtypes", ()):
        return f"kv_dtype {kv_dtype} not supported"
    return None


def takes_kv_dtype(function) -> bool:
    """Whether compile_report accepts a kv_dtype keyword (a variant without fp8 caches may not take one)."""
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True  # not introspectable: let the call decide
    return "kv_dtype" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def takes_keywords(function, names) -> bool:
    """Whether `function` accepts every keyword in `names` (a **kwargs parameter accepts them all)."""
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()) or set(names) <= set(params)


def report_config(name: str, module, config: dict | None) -> dict:
    """The keyword arguments compile_report gets: the resolved configuration, or {} for a variant whose
    compile_report takes no tunables and was asked for its defaults (it reports those). ValueError
    (Unsupported for a value) for an undeclared parameter or value, before anything compiles."""
    resolved = tunables.resolve(name, module, config)
    if not resolved or takes_keywords(module.compile_report, resolved):
        return resolved
    if not config or config == tunables.defaults(module):
        return {}
    raise Unsupported(f"{name}: compile_report takes no {', '.join(resolved)} argument, so it cannot report "
                      f"{tunables.describe(resolved)}")


def _compile_report(module, block_size: int, head_dim: int, dtype: str, arch: str, kv_dtype: str | None,
                    config: dict | None = None):
    """module.compile_report(...) with kv_dtype= only when given and the configuration's keywords: (report,
    None) or (None, why it is skipped)."""
    config = config or {}
    if kv_dtype is None:
        try:
            return dict(module.compile_report(block_size, head_dim, dtype, arch, **config)), None
        except Unsupported as exc:
            return None, f"not supported: {exc}"
    if not takes_kv_dtype(module.compile_report):
        return None, f"kv_dtype {kv_dtype} not supported: compile_report takes no kv_dtype (it reports the query's dtype only)"
    try:
        return dict(module.compile_report(block_size, head_dim, dtype, arch, kv_dtype=kv_dtype, **config)), None
    except (TypeError, Unsupported) as exc:
        return None, f"kv_dtype {kv_dtype} not supported: compile_report(..., kv_dtype=) raised {type(exc).__name__}: {exc}"


def _with_occupancy(entry: dict, arch: str) -> dict:
    occ = occupancy(int(entry["registers"]), int(entry["static_shared_bytes"]) + int(entry["dynamic_shared_bytes"]),
                    int(entry["threads_per_block"]), arch)
    return dict(entry, occupancy=round(occ.fraction, 4), limiter=occ.limiter, blocks_per_sm=occ.blocks_per_sm)


def _take_images(report: dict) -> list:
    """Pop the compiled images out of a compile_report() dict and its `kernels`: [(kernel, cubin, function)].

    A single-kernel report without `kernels` names its kernel "main"; function None means the
    cubin's only entry function.
    """
    top = report.pop("image", None)
    images = [(k.get("name", "main"), *k.pop("image")) for k in report.get("kernels", []) if "image" in k]
    if not images and top is not None:
        images = [("main", *top)]
    return images


def _collect_here(variants=None, block_sizes=POW2_BLOCK_SIZES, head_dim=128, dtype="float16", arch=DEFAULT_ARCH,
                  progress=None, images=False, kv_dtype=None, config=None) -> list[dict]:
    rows = []
    asked = head_dim
    for name, family, module in _modules(variants):
        if not hasattr(module, "compile_report"):
            continue
        head_dim = _head_dim(module, asked)
        keywords = report_config(name, module, config)
        label = tunables.describe(tunables.resolve(name, module, config))
        for block_size in block_sizes:
            row = dict(variant=name, family=family, block_size=block_size, head_dim=head_dim, dtype=dtype,
                       kv_dtype=kv_dtype or dtype, arch=arch, config=label)
            if progress:
                progress(f"{name} block_size={block_size}" + (f" {dtype}:{kv_dtype}" if kv_dtype else ""))
            reason = _supported(module, block_size, head_dim, dtype, kv_dtype)
            if reason:
                rows.append(dict(row, skipped=reason))
                continue
            try:
                report, reason = _compile_report(module, block_size, head_dim, dtype, arch, kv_dtype, keywords)
            except Exception as exc:  # one variant failing to compile must not hide the others
                rows.append(dict(row, error=f"{type(exc).__name__}: {exc}"))
                continue
            if report is None:
                rows.append(dict(row, skipped=reason))
                continue
            compiled = _take_images(report)
            kernels = [_with_occupancy(dict(k, **{f: k.get(f, report[f]) for f in
                                                  ("threads_per_block", "dynamic_shared_bytes")}), arch)
                       for k in report.pop("kernels", [])]
            row.update(_with_occupancy(report, arch))
            row.setdefault("path", "")
            if kernels:
                row["kernels"] = kernels
            if images:
                row["images"] = compiled
            rows.append(row)
    return rows


def _collect_many_here(variants, configs, head_dim, arch, progress=None, images=False, config=None) -> list[dict]:
    return [row for block_sizes, dtype, kv_dtype in configs
            for row in _collect_here(variants, block_sizes, head_dim, dtype, arch, progress, images, kv_dtype,
                                     config)]


def precision(dtype, kv_dtype=None) -> tuple[str, str | None]:
    """(query dtype, fp8 cache dtype or None) by canonical name; ValueError for anything else."""
    dtype = dtypes_mod.canonical(dtype)
    if dtype not in DTYPES:
        raise RefusedRequest(f"dtype must be one of {', '.join(DTYPES)} (fp32, fp16, bf16), got {dtype!r}")
    if kv_dtype is None:
        return dtype, None
    kv = dtypes_mod.canonical(kv_dtype)
    if kv == dtype:
        return dtype, None
    if kv not in KV_DTYPES:
        raise RefusedRequest(f"kv_dtype must be the query's dtype or one of {', '.join(KV_DTYPES)} (e4m3, e5m2), "
                             f"got {kv_dtype!r}")
    return dtype, kv


def collect_many(variants=None, configs=((POW2_BLOCK_SIZES, "float16", None),), head_dim: int = 128,
                 arch: str = DEFAULT_ARCH, progress=None, images: bool = False, config: dict | None = None) -> list[dict]:
    """collect() for each (block_sizes, dtype, kv_dtype) of configs, rows in that order, numba kernels of
    them all compiled in one real-mode child; config: the tunables of every selected variant."""
    parse_arch(arch)
    configs = [(tuple(int(b) for b in sizes), *precision(dtype, kv)) for sizes, dtype, kv in configs]
    modules = _modules(variants)
    for name, _, module in modules:  # unknown names and tunables fail here, in this process
        if hasattr(module, "compile_report"):
            report_config(name, module, config)
    if not numba_simulated():
        return _collect_many_here(variants, configs, head_dim, arch, progress, images, config)
    # numba kernels compile in a real-mode child (its progress is reported when it returns); the others here

    names = [name for name, _, _ in modules]
    numba = [name for name, family, _ in modules if registry.family(family).census == "numba_ptx"]
    others = [name for name in names if name not in numba]
    # The child compiles the Numba kernels while this process compiles the others with NVRTC: two cores busy.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        child = pool.submit(call_in_numba_mode, False, "sandbox.analysis.resources:_collect_many_here", numba,
                            configs, head_dim, arch, images=images, config=config) if numba else None
        rows = _collect_many_here(others, configs, head_dim, arch, progress, images, config) if others else []
        numba_rows = child.result() if child is not None else []
    for row in numba_rows if progress else ():
        progress(f"{row['variant']} block_size={row['block_size']} (numba, compiled in a real-mode child)")
    return sorted(rows + numba_rows, key=_order(names, configs))


def _order(names: list, configs: list):
    """Sort key restoring collect_many's order: precision (configs), then variant (names), then block size."""
    precision_at = {(dtype, kv or dtype): i for i, (_, dtype, kv) in enumerate(configs)}
    variant_at = {name: i for i, name in enumerate(names)}

    def key(row):
        index = precision_at[(row["dtype"], row["kv_dtype"])]
        sizes = configs[index][0]
        return index, variant_at[row["variant"]], sizes.index(row["block_size"])
    return key


def collect(variants=None, block_sizes=POW2_BLOCK_SIZES, head_dim: int = 128, dtype: str = "float16",
            arch: str = DEFAULT_ARCH, progress=None, images: bool = False, kv_dtype: str | None = None,
            config: dict | None = None) -> list[dict]:
    """One row per (variant, block size) with the COLUMNS above (plus `kernels` for multi-kernel
    variants, `note`, and `skipped` / `error` where a row has no numbers).

    dtype: the query's (aliases such as "bf16" accepted); kv_dtype: an fp8 cache ("e4m3", "e5m2"), or
    None for the query's dtype. images=True adds `images`: [(kernel name, cubin bytes, function name
    or None)] per row. config: the selected variants' tunables (see the module docstring).
    """
    return collect_many(variants, [(block_sizes, dtype, kv_dtype)], head_dim, arch, progress, images, config)
