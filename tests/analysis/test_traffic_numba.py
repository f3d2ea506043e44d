"""Traffic counts from the Numba CUDA simulator (sandbox/analysis/traffic/numba_sim.py) on hand-made
kernels whose answers are known: coalescing, strides, misalignment, broadcast, partial warps, bank
conflicts, L2 reuse across blocks, atomics, and the grouping rules (barrier epochs, k-th execution).

Every count is exact: a warp-level request is the active lanes of one warp executing one site for
the k-th time since the last barrier; sectors are 32-byte pieces of arrays placed 256-byte aligned;
wavefronts are the most distinct 4-byte words any bank sees. Few threads and blocks: the simulator
pays about 270 us per thread and barrier.
"""
from __future__ import annotations

import numpy as np
import pytest

from sandbox.devices import backends

pytestmark = pytest.mark.skipif(not backends.numba_simulated(), reason="needs the Numba CUDA simulator (no GPU)")

from numba import cuda, float32, float64, int32, uint16  # noqa: E402  (the simulator swaps `cuda` inside kernels)

from sandbox.analysis.traffic import count, numba_sim  # noqa: E402
from sandbox.cpucuda.raw import RawLaunch  # noqa: E402


def launched(kernel, grid, block, *args, dynamic_shared=0) -> RawLaunch:
    with numba_sim.capture() as launches:
        kernel[grid, block, 0, dynamic_shared](*args)
    assert len(launches) == 1
    return launches[0]


def totals(launch: RawLaunch, target: str, op: str, space: str | None = None) -> dict:
    """Sums of the rows of the sites that do `op` on `target` (every block)."""
    ids = [i for i, s in enumerate(launch.sites) if s.target == target and s.op == op
           and (space is None or s.space == space)]
    assert ids, f"no {op} site on {target}: {launch.sites}"
    rows = launch.site_block[np.isin(launch.site_block["site"], ids)]
    return {field: int(rows[field].sum()) for field in launch.site_block.dtype.names[2:]}


def per_request(launch, target, op, space=None) -> dict:
    t = totals(launch, target, op, space)
    n = t["requests"]
    return dict(requests=n, lanes=t["lanes"] / n, bytes=t["bytes"] / n, sectors=t["sectors"] / n,
                wavefronts=t["wavefronts"] / n, ideal=t["ideal_wavefronts"] / n)


@cuda.jit
def copy(src, dst):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


@cuda.jit
def copy_shifted(src, dst, shift, stride):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i * stride + shift]


@pytest.mark.parametrize("dtype, sectors", [(np.float32, 4), (np.float64, 8), (np.uint16, 2), (np.uint8, 1)])
def test_coalesced_copy_touches_the_bytes_of_a_warp_once(dtype, sectors):
    """32 lanes x the element: 128 B of float32 = 4 sectors per request; float64 8; the raw bits the
    variants pass for bfloat16 (uint16) 2 and for fp8 (uint8) 1. Numba loads one element per
    instruction (its PTX has only scalar ld.global), so there is no wider form to count."""
    src = cuda.to_device(np.arange(128).astype(dtype))
    dst = cuda.device_array(128, dtype)
    launch = launched(copy, 2, 64, src, dst)
    width = np.dtype(dtype).itemsize
    for op, target in (("load", "src"), ("store", "dst")):
        assert per_request(launch, target, op) == dict(requests=4, lanes=32, bytes=32 * width, sectors=sectors,
                                                       wavefronts=0, ideal=0)
    assert launch.grid == (2, 1, 1) and launch.block == (64, 1, 1) and launch.kernel == "copy"
    np.testing.assert_array_equal(dst.copy_to_host(), src.copy_to_host())


@pytest.mark.parametrize("stride, sectors", [(1, 4), (2, 8), (8, 32), (32, 32)])
def test_strided_loads_touch_one_sector_per_lane_at_32_bytes_and_more(stride, sectors):
    src = cuda.to_device(np.zeros(32 * 32, np.float32))
    dst = cuda.device_array(32, np.float32)
    launch = launched(copy_shifted, 1, 32, src, dst, 0, stride)
    assert per_request(launch, "src", "load")["sectors"] == sectors
    assert per_request(launch, "dst", "store")["sectors"] == 4


def test_misaligned_by_4_bytes_spans_five_sectors():
    """By index (src[i + 1]) and by a view that starts 4 bytes into its allocation (src[1:])."""
    src = cuda.to_device(np.zeros(64, np.float32))
    dst = cuda.device_array(32, np.float32)
    assert per_request(launched(copy_shifted, 1, 32, src, dst, 1, 1), "src", "load")["sectors"] == 5
    assert per_request(launched(copy, 1, 32, src[1:], dst), "src", "load")["sectors"] == 5


@cuda.jit
def broadcast(src, dst):
    dst[cuda.threadIdx.x] = src[0]


def test_broadcast_is_one_sector_for_all_lanes():
    launch = launched(broadcast, 1, 32, cuda.to_device(np.ones(8, np.float32)), cuda.device_array(32, np.float32))
    assert per_request(launch, "src", "load") == dict(requests=1, lanes=32, bytes=128, sectors=1, wavefronts=0, ideal=0)


def test_a_partial_warp_is_one_request_of_its_active_lanes():
    """20 threads: one request of 20 lanes, 80 B over 3 sectors; 52 threads: a full warp and 20 lanes."""
    src = cuda.to_device(np.zeros(64, np.float32))
    dst = cuda.device_array(64, np.float32)
    assert per_request(launched(copy, 1, 20, src, dst), "src", "load") == dict(
        requests=1, lanes=20, bytes=80, sectors=3, wavefronts=0, ideal=0)
    t = totals(launched(copy, 1, 52, src, dst), "src", "load")
    assert (t["requests"], t["lanes"], t["sectors"]) == (2, 52, 4 + 3)


@cuda.jit
def shared_stride(out, stride):
    s = cuda.shared.array(1056, float32)
    t = cuda.threadIdx.x
    s[t * stride] = t
    cuda.syncthreads()
    out[t] = s[t * stride]


@pytest.mark.parametrize("stride, wavefronts", [(1, 1), (2, 2), (4, 4), (32, 32), (33, 1), (0, 1)])
def test_shared_bank_conflicts(stride, wavefronts):
    """Stride 2 puts two words in each of 16 banks (2-way), 32 all in bank 0 (32-way); 33 is
    conflict-free and 0 (every lane one word) a broadcast."""
    launch = launched(shared_stride, 1, 32, cuda.device_array(32, np.float32), stride)
    for op in ("store", "load"):
        assert per_request(launch, "s", op, "shared") == dict(requests=1, lanes=32, bytes=128, sectors=0,
                                                               wavefronts=wavefronts, ideal=1)


@cuda.jit
def shared_widths(out64, out16):
    d = cuda.shared.array(64, float64)
    h = cuda.shared.array(64, uint16)
    t = cuda.threadIdx.x
    d[t] = t
    h[t] = t
    cuda.syncthreads()
    out64[t] = d[t]
    out16[t] = h[t]


def test_shared_wavefronts_follow_the_element_width():
    """float64: 256 B, two words per lane, 2 wavefronts = ideal; uint16: 64 B in 16 banks, 1 = ideal."""
    launch = launched(shared_widths, 1, 32, cuda.device_array(32, np.float64), cuda.device_array(32, np.uint16))
    assert per_request(launch, "d", "load", "shared")["wavefronts"] == 2 == per_request(launch, "d", "load")["ideal"]
    assert per_request(launch, "h", "store", "shared") == dict(requests=1, lanes=32, bytes=64, sectors=0,
                                                               wavefronts=1, ideal=1)


@cuda.jit
def dynamic_shared(out, stride):
    s = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    s[t * stride] = t
    cuda.syncthreads()
    out[t] = s[t * stride]


def test_dynamic_shared_memory_is_counted_under_its_name():
    launch = launched(dynamic_shared, 1, 32, cuda.device_array(32, np.float32), 2, dynamic_shared=4 * 64)
    assert per_request(launch, "s", "load", "shared")["wavefronts"] == 2


def test_l2_reuse_across_blocks_shows_in_the_sector_stream():
    """Four blocks read the same 128 B: 16 sector reads in launch order, 4 distinct sectors, and a
    second launch on the same device array reads the same sector addresses."""
    src = cuda.to_device(np.ones(8, np.float32))
    dst = cuda.device_array((4, 32), np.float32)
    with numba_sim.capture() as launches:
        reuse[4, 32](src, dst)
        reuse[4, 32](src, dst)
    first, second = launches
    base, nbytes = first.arrays["src"]
    reads = first.sectors[first.sectors["read"]]
    assert base % 256 == 0 and nbytes == 32
    assert len(reads) == 4 and len(np.unique(reads["sector"])) == 1
    assert list(first.sectors["block"]) == sorted(first.sectors["block"])
    assert reads["mask"].tolist() == [0xFFFFFFFF] * 4
    np.testing.assert_array_equal(first.sectors["sector"], second.sectors["sector"])
    counted = count([first, second]).metrics  # the core's L2: cold at the call's start, kept across launches
    assert counted["lts__t_sectors_op_read.sum"] == 8 and counted["dram__bytes_read.sum"] == 32


@cuda.jit
def reuse(src, dst):
    dst[cuda.blockIdx.x, cuda.threadIdx.x] = src[cuda.threadIdx.x % 8]


@cuda.jit
def atomics(counter, bins, out):
    t = cuda.threadIdx.x
    cuda.atomic.add(counter, 0, 1)
    cuda.atomic.max(bins, t, t)
    s = cuda.shared.array(64, int32)
    s[t] = 0
    s[t + 32] = 0
    cuda.syncthreads()
    cuda.atomic.add(s, (t * 2) % 64, 1)  # lanes t and t + 16: words 2t and 2t + 32, one bank
    cuda.syncthreads()
    out[t] = s[t]


def test_atomics_are_requests_of_op_atomic_that_read_and_write():
    counter = cuda.to_device(np.zeros(1, np.int32))
    bins = cuda.to_device(np.zeros(32, np.int32))
    out = cuda.device_array(32, np.int32)
    launch = launched(atomics, 1, 32, counter, bins, out)
    assert per_request(launch, "counter", "atomic")["sectors"] == 1
    assert per_request(launch, "bins", "atomic")["sectors"] == 4
    assert per_request(launch, "s", "atomic", "shared")["wavefronts"] == 2
    atomic = launch.sectors[launch.sectors["write"] & launch.sectors["read"]]
    assert len(atomic) == 1 + 4
    assert counter.copy_to_host()[0] == 32 and out.copy_to_host().tolist() == [int(t % 2 == 0) for t in range(32)]


@cuda.jit
def epochs(src, out, rounds):
    t = cuda.threadIdx.x
    acc = float32(0)
    for r in range(rounds):
        acc += src[r * 32 + t]
        cuda.syncthreads()
    for j in range(t % 4):  # lanes drop out: 3 requests of 24, 16 and 8 lanes
        acc += src[j]
    out[t] = acc


def test_requests_are_counted_per_epoch_and_per_execution_not_by_time():
    """40 rounds run each site past the point CPython specialises it (its offset moves into the
    instruction's cache): still one site and one request per round."""
    launch = launched(epochs, 1, 32, cuda.to_device(np.ones(40 * 32, np.float32)), cuda.device_array(32, np.float32),
                      40)
    loops = [i for i, s in enumerate(launch.sites) if s.target == "src"]
    assert len(loops) == 2
    rows = launch.site_block
    first, second = (rows[rows["site"] == i][0] for i in loops)
    assert (first["requests"], first["lanes"], first["sectors"]) == (40, 40 * 32, 40 * 4)
    assert (second["requests"], second["lanes"], second["sectors"]) == (3, 24 + 16 + 8, 3)


@cuda.jit(device=True)
def load_twice(src, i):
    return src[i] + src[i + 32]


@cuda.jit
def through_device_functions(src, out):
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    a = load_twice(src, t)
    b = load_twice(src, 64 + t)
    out[cuda.blockIdx.x, cuda.blockIdx.y, t] = a + b


def test_sites_carry_their_call_chain_and_blocks_come_in_launch_order():
    """A device function called from two lines is two sites each (chain: the kernel's line); a
    (8, 4) block is one warp; the (2, 3) grid's rows come blockIdx.x fastest."""
    src = cuda.to_device(np.zeros(128, np.float32))
    out = cuda.device_array((2, 3, 32), np.float32)
    launch = launched(through_device_functions, (2, 3), (8, 4), src, out)
    loads = [s for s in launch.sites if s.target == "src"]
    assert len(loads) == 2 * 1 and {s.line for s in loads} == {loads[0].line}  # two loads on one line: one Site
    assert len({s.chain for s in loads}) == 2 and all(c.startswith("tests/analysis/test_traffic_numba.py:") for s in loads
                                                      for c in s.chain)
    t = totals(launch, "src", "load")
    assert (t["requests"], t["lanes"], t["sectors"]) == (6 * 4, 6 * 4 * 32, 6 * 4 * 4)
    assert launch.site_block["block"].tolist() == sorted(launch.site_block["block"].tolist())
    assert launch.site_block["block"].max() == 5
    out_base, _ = launch.arrays["out"]
    stores = launch.sectors[launch.sectors["write"]]
    rows_in_order = [(out_base + 128 * (3 * x + y)) // 32 for y in range(3) for x in range(2)]  # out[x, y, :]
    assert stores["sector"][::4].tolist() == rows_in_order and len(stores) == 6 * 4


@cuda.jit
def store_to_slice(dst):
    dst[0:2] = 1.0


def test_a_store_that_is_not_one_element_is_refused_by_name():
    with pytest.raises(TypeError, match=r"dst\[slice\(0, 2, None\)\] is not an element access"):
        launched(store_to_slice, 1, 1, cuda.device_array(4, np.float32))


def test_local_arrays_are_named_in_the_notes_and_not_counted():
    launch = launched(with_local, 1, 32, cuda.to_device(np.ones(32, np.float32)), cuda.device_array(32, np.float32))
    assert [s.target for s in launch.sites] == ["src", "out"]
    assert any("cuda.local.array" in n and "(16 B per thread)" in n for n in launch.notes)


@cuda.jit
def with_local(src, out):
    t = cuda.threadIdx.x
    scratch = cuda.local.array(4, float32)
    for j in range(4):
        scratch[j] = src[t] * j
    out[t] = scratch[0] + scratch[3]


@cuda.jit
def spin(src, out, rounds):
    t = cuda.threadIdx.x
    acc = float32(0)
    for r in range(rounds):
        acc += src[t]
    out[t] = acc


def test_a_capture_over_its_time_limit_refuses_with_an_estimate():
    """After a block, from the pace of the blocks done; inside a first block that outlasts the limit,
    from the clock every CHECK_EVERY records (its threads stop at their next access)."""
    src, out = cuda.to_device(np.ones(4, np.float32)), cuda.device_array(4, np.float32)
    with pytest.raises(numba_sim.SimulationTooLong, match=r"1 of 64 blocks took .*\(max_seconds = 0\.01\).*represent="):
        with numba_sim.capture(max_seconds=0.01):
            spin[64, 4](src, out, 2000)
    with pytest.raises(numba_sim.SimulationTooLong, match=r"block 1 of the 2 to simulate is unfinished"):
        with numba_sim.capture(max_seconds=0.01):
            spin[2, 4](src, out, 10 ** 6)


@cuda.jit
def read_unwritten(out):
    s = cuda.shared.array(8, float32)
    t = cuda.threadIdx.x
    if t < 7:
        s[t] = t
    cuda.syncthreads()
    out[t] = s[7 - t]


def test_shared_memory_stays_poisoned_under_the_capture():
    """sandbox/devices/numba_poison.py fills shared memory with NaN before each block: the capture's
    own allocation keeps that (thread 0 reads the slot nobody wrote)."""
    out = cuda.device_array(8, np.float32)
    launched(read_unwritten, 1, 8, out)
    got = out.copy_to_host()
    assert np.isnan(got[0]) and got[1:].tolist() == [6, 5, 4, 3, 2, 1, 0]


def test_captures_do_not_nest_and_leave_the_simulator_as_they_found_it():
    from numba.cuda.simulator import kernel, kernelapi

    before = (kernel.BlockManager.run, kernelapi.FakeCUDAShared.array, kernelapi.FakeCUDAAtomic.add)
    with numba_sim.capture():
        with pytest.raises(RuntimeError, match="already active"):
            with numba_sim.capture():
                pass
    assert (kernel.BlockManager.run, kernelapi.FakeCUDAShared.array, kernelapi.FakeCUDAAtomic.add) == before
    assert not hasattr(kernel.BlockThread, "_traffic_epoch")
    with pytest.raises(ValueError, match="max_seconds"):
        with numba_sim.capture(max_seconds=0):
            pass
