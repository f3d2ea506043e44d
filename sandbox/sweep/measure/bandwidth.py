"""Copy and read bandwidth: the practical ceilings every sweep point is measured against.

Copy convention: a copy of N bytes reads N and writes N, so copy bandwidth = 2 * N / seconds / 1e9
GB/s (read + write), the same counting as a kernel's bytes_moved (it reads K/V and writes its
output). On a GPU: a device-to-device cudaMemcpy of 1 GiB (>= 1 GB) timed with CUDA events,
median of several. On the CPU: a NumPy copy of host memory, wall clock, labelled as such.

Read convention: a streaming read of N bytes = N / seconds / 1e9 GB/s. A decode kernel is almost
all reads (K/V), and DRAM often reads faster than it copies (no read-write turnaround), so the read
ceiling is the stricter yardstick. On a GPU: `stream_reader` (a grid-stride kernel of 16-byte loads
whose XOR is kept alive by a store that never happens) over 1 GiB, CUDA events; the L2 flush uses
the same reader. On the CPU: a NumPy XOR-reduction of host memory.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

from .timing import gpu_timer

GPU_COPY_BYTES = 2**30
GPU_READ_BYTES = 2**30
CPU_COPY_BYTES = 256 * 2**20
CPU_QUICK_COPY_BYTES = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class CopyBandwidth:
    gbps: float            # (read + write) bytes / s / 1e9, median over repeats
    nbytes: int            # size of one copy
    seconds: float         # median time of one copy
    repeats: int
    method: str            # what was copied (or read), how it was timed
    kind: str = "copy"     # "copy" (read + write counted) or "read" (bytes read)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["convention"] = ("2 * nbytes / seconds / 1e9 (read + write)" if self.kind == "copy"
                           else "nbytes / seconds / 1e9 (bytes read)")
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


def read_gbps(nbytes: int, seconds: float) -> float:
    """GB/s of a streaming read of `nbytes` that took `seconds`."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return nbytes / seconds / 1e9


def _result(samples, nbytes, method, kind="copy") -> CopyBandwidth:
    seconds = statistics.median(samples)
    gbps = copy_gbps(nbytes, seconds) if kind == "copy" else read_gbps(nbytes, seconds)
    return CopyBandwidth(gbps, nbytes, seconds, len(samples), method, kind)


def host_read_bandwidth(nbytes: int = CPU_COPY_BYTES, repeats: int = 5) -> CopyBandwidth:
    """XOR-reduce a host buffer of `nbytes` (the CPU sweep's read ceiling)."""
    src = np.ones(nbytes // 8, dtype=np.uint64)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.bitwise_xor.reduce(src)
        samples.append(time.perf_counter() - start)
    return _result(samples, src.nbytes, f"host XOR-reduction of {src.nbytes} bytes, wall clock (CPU, not a GPU)",
                   "read")


# One 16-byte load per thread per step, grid-stride; the XOR of everything read feeds a store that
# the data never triggers (all-ones bytes XOR to 0), so no load can be optimized away.
READ_KERNEL = r"""
extern "C" __global__ void stream_read(const uint4 *__restrict__ src, unsigned long long n, unsigned int *sink) {
    unsigned int acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""
READ_THREADS = 256
READ_BLOCKS_PER_SM = 8


def stream_reader(nbytes: int):
    """A callable that reads a device buffer of `nbytes` (rounded down to 16 bytes) once, asynchronously,
    on the legacy default stream (CuPy's RawKernel; Numba's where CuPy is absent). `.nbytes` is what it reads."""
    n = nbytes // 16
    try:
        import cupy
    except ImportError:
        return _numba_stream_reader(n)
    src = cupy.ones(n * 16, dtype=cupy.uint8)
    sink = cupy.zeros(1, dtype=cupy.uint32)
    kernel = cupy.RawKernel(READ_KERNEL, "stream_read")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = (sms * READ_BLOCKS_PER_SM,)

    def read():
        kernel(grid, (READ_THREADS,), (src, np.uint64(n), sink))

    read.nbytes = n * 16
    read.buffer = src
    return read


def _numba_stream_reader(n: int):
    from numba import cuda, uint32

    @cuda.jit
    def stream_read(src, sink):
        acc = uint32(0)
        start = cuda.grid(1)
        stride = cuda.gridsize(1)
        for i in range(start, src.shape[0], stride):
            acc ^= src[i]
        if acc == uint32(0x9E3779B9):
            sink[0] = acc

    src = cuda.to_device(np.full(n * 4, 0x01010101, dtype=np.uint32))
    sink = cuda.device_array(1, dtype=np.uint32)
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    grid = sms * READ_BLOCKS_PER_SM

    def read():
        stream_read[grid, READ_THREADS](src, sink)

    read.nbytes = n * 16
    read.buffer = src
    return read


def gpu_read_bandwidth(nbytes: int = GPU_READ_BYTES, repeats: int = 10) -> CopyBandwidth:
    """stream_reader over `nbytes` of device memory, CUDA events around each read, median."""
    read = stream_reader(nbytes)
    timer = gpu_timer()
    for _ in range(3):
        timer.time(read)
    samples = [timer.time(read) for _ in range(repeats)]
    return _result(samples, read.nbytes, f"streaming-read kernel (16-byte loads) over {read.nbytes} bytes, CUDA events",
                   "read")


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
