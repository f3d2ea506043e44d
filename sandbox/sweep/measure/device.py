"""The GPU the sweep runs on: its properties (through the CUDA driver API), the L2 flush, freeing memory.

Everything here is small and GPU-only, except `device_info`, which returns {} without a driver.
"""
from __future__ import annotations

from .bandwidth import stream_reader

# Never flush with less than this, whatever the L2 reports (Triton and gpu-mode write 256 MB);
# a longer flush also hides the host-side launch cost of the next call behind GPU work.
MIN_FLUSH_BYTES = 256 * 2**20


def _driver_value(call, *args):
    from cuda.bindings import driver
    err, *value = call(*args)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{call.__name__} failed: {err}")
    return value[0] if len(value) == 1 else value


def device_info(ordinal: int = 0) -> dict:
    """Name, compute capability, SMs, L2 size, memory, driver version of GPU `ordinal`; {} without one."""
    try:
        from cuda.bindings import driver
        _driver_value(driver.cuInit, 0)
        dev = _driver_value(driver.cuDeviceGet, ordinal)
        attr = driver.CUdevice_attribute
        get = lambda a: int(_driver_value(driver.cuDeviceGetAttribute, a, dev))  # noqa: E731
        info = {
            "name": _driver_value(driver.cuDeviceGetName, 256, dev).split(b"\0")[0].decode(),
            "compute_capability": f"{get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)}."
                                  f"{get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)}",
            "multiprocessors": get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            "l2_cache_bytes": get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            "total_memory_bytes": int(_driver_value(driver.cuDeviceTotalMem, dev)),
            "driver_version": _version(int(_driver_value(driver.cuDriverGetVersion))),
        }
    except Exception:  # no driver, no device, or no cuda-bindings: the caller records a CPU run
        return {}
    try:  # theoretical DRAM bandwidth, where the driver still reports the memory clock
        clock_khz = get(attr.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
        bus_bits = get(attr.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
        if clock_khz and bus_bits:
            info["theoretical_dram_gbps"] = round(2 * clock_khz * 1e3 * bus_bits / 8 / 1e9, 1)
    except Exception:
        pass
    return info


def _version(v: int) -> str:
    """CUDA's 12040 -> "12.4"."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def runtime_version() -> str | None:
    try:
        import cupy
        return _version(int(cupy.cuda.runtime.runtimeGetVersion()))
    except Exception:
        pass
    try:
        from numba import cuda
        major, minor = cuda.runtime.get_version()
        return f"{major}.{minor}"
    except Exception:
        return None


def flush_bytes(l2_bytes: int | None) -> int:
    """At least twice the L2 (H200: 60 MB -> 120 MB) and never under MIN_FLUSH_BYTES."""
    return max(2 * int(l2_bytes or 0), MIN_FLUSH_BYTES)


class L2Flusher:
    """Evicts whatever the last call left in L2, and leaves nothing dirty behind.

    Two passes on the default stream, each over flush_bytes(L2) (>= 2 x L2): a write of zeros to one
    buffer, then a streaming read of a second buffer. The write alone would leave about one L2 of
    dirty lines whose write-back would land inside the next timed call; the read that ends the flush
    evicts them (their write-back happens here, untimed) and leaves only clean lines.
    `passes` is [(kind, callable)], run in order; its last kind is "read".
    """

    def __init__(self, l2_bytes: int | None, write_pass=None, read_pass=None):
        self.nbytes = flush_bytes(l2_bytes)
        if write_pass is None:
            write_pass = _zero_writer(self.nbytes)
        if read_pass is None:
            read_pass = stream_reader(self.nbytes)
        self.passes = [("write", write_pass), ("read", read_pass)]

    def __call__(self) -> None:
        for _, run in self.passes:
            run()


def _zero_writer(nbytes: int):
    """A callable that writes zeros over a device buffer of `nbytes`, asynchronously."""
    try:
        import cupy
        buffer = cupy.empty(nbytes, dtype=cupy.uint8)
        return lambda: buffer.fill(0)
    except ImportError:
        from numba import cuda
        from numba.cuda.cudadrv.driver import device_memset
        buffer = cuda.device_array(nbytes, dtype="uint8")
        return lambda: device_memset(buffer, 0, nbytes)


def free_device_memory() -> None:
    """Return cached blocks of CuPy's pools (between shapes) so big shapes do not stack up."""
    import gc
    gc.collect()
    try:
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    except Exception:
        pass


def synchronize_device() -> None:
    """Wait for all work on the current GPU (CuPy's or Numba's view of it; both share the primary context)."""
    try:
        import cupy
    except ImportError:
        from numba import cuda
        cuda.synchronize()
        return
    cupy.cuda.Device().synchronize()
