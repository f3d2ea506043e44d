"""Copy bandwidth: the practical ceiling every sweep point is measured against.

Convention: a copy of N bytes reads N and writes N, so copy bandwidth = 2 * N / seconds / 1e9
GB/s (read + write), the same counting as a kernel's bytes_moved (it reads K/V and writes its
output). On a GPU: a device-to-device cudaMemcpy of 1 GiB (>= 1 GB) timed with CUDA events,
median of several. On the CPU: a NumPy copy of host memory, wall clock, labelled as such.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

GPU_COPY_BYTES = 2**30
CPU_COPY_BYTES = 256 * 2**20
CPU_QUICK_COPY_BYTES = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class CopyBandwidth:
    gbps: float            # (read + write) bytes / s / 1e9, median over repeats
    nbytes: int            # size of one copy
    seconds: float         # median time of one copy
    repeats: int
    method: str            # what was copied, how it was timed

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["convention"] = "2 * nbytes / seconds / 1e9 (read + write)"
        return d


def copy_gbps(nbytes: int, seconds: float) -> float:
    """(read + write) GB/s of a copy of `nbytes` that took `seconds`."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return 2 * nbytes / seconds / 1e9


def kernel_gbps(bytes_moved: int, seconds: float) -> float:
    """GB/s (1e9 bytes/s) of a kernel that needed `bytes_moved` bytes."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return bytes_moved / seconds / 1e9


def _result(samples, nbytes, method) -> CopyBandwidth:
    seconds = statistics.median(samples)
    return CopyBandwidth(copy_gbps(nbytes, seconds), nbytes, seconds, len(samples), method)


def host_copy_bandwidth(nbytes: int = CPU_COPY_BYTES, repeats: int = 5) -> CopyBandwidth:
    """np.copyto between two host buffers of `nbytes` (the CPU sweep's reference ceiling)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        samples.append(time.perf_counter() - start)
    return _result(samples, nbytes, f"host np.copyto of {nbytes} bytes, wall clock (CPU, not a GPU)")


def gpu_copy_bandwidth(nbytes: int = GPU_COPY_BYTES, repeats: int = 10) -> CopyBandwidth:
    """Device-to-device cudaMemcpyAsync of `nbytes`, CUDA events around each copy, median."""
    try:
        import cupy
    except ImportError:
        return _numba_copy_bandwidth(nbytes, repeats)
    src = cupy.ones(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    runtime = cupy.cuda.runtime
    stream = cupy.cuda.get_current_stream().ptr

    def copy():
        runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, stream)

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(3):
        copy()
    samples = []
    for _ in range(repeats):
        start.record()
        copy()
        end.record()
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    if not np.array_equal(dst[-4096:].get(), np.ones(4096, dtype=np.uint8)):
        raise RuntimeError("device copy did not copy")
    return _result(samples, nbytes, f"cudaMemcpyAsync device-to-device of {nbytes} bytes, CuPy events")


def _numba_copy_bandwidth(nbytes: int, repeats: int) -> CopyBandwidth:
    from numba import cuda
    src = cuda.to_device(np.ones(nbytes, dtype=np.uint8))
    dst = cuda.device_array(nbytes, dtype=np.uint8)
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    for _ in range(3):
        dst.copy_to_device(src)
    samples = []
    for _ in range(repeats):
        start.record()
        dst.copy_to_device(src)
        end.record()
        end.synchronize()
        samples.append(cuda.event_elapsed_time(start, end) / 1e3)
    return _result(samples, nbytes, f"device-to-device copy of {nbytes} bytes, Numba events")
