"""The traffic counting core on hand-built captures: requests, sectors, wavefronts, per-block sums, the L2."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sandbox.analysis import gpus
from sandbox.analysis import traffic as T
from sandbox.analysis.traffic import l2, metrics as M

LD, ST = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
SH_LD, SH_WAVES = "smsp__inst_executed_op_shared_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
SH_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"


@pytest.mark.parametrize("stride, width, offset, sectors", [
    (16, 16, 0, 16),    # coalesced float4: 512 bytes
    (4, 4, 0, 4),       # coalesced float
    (128, 4, 0, 32),    # stride 32 floats: one sector per lane
    (4, 4, 4, 5),       # misaligned by 4 bytes
    (0, 4, 0, 1),       # broadcast
    (8, 8, 28, 9),      # 8-byte accesses straddling sectors
])
def test_global_request_sectors(stride, width, offset, sectors):
    found, masks = T.global_request(offset + np.arange(32) * stride, width)
    assert len(found) == sectors
    touched = sum(bin(int(m)).count("1") for m in masks)
    assert touched == len({offset + lane * stride + b for lane in range(32) for b in range(width)})


@pytest.mark.parametrize("stride, width, wavefronts, ideal", [
    (4, 4, 1, 1), (8, 4, 2, 1), (128, 4, 32, 1), (132, 4, 1, 1), (0, 4, 1, 1),
    (16, 16, 4, 4), (32, 16, 8, 4), (0, 16, 1, 1), (2, 2, 1, 1),
])
def test_shared_request_wavefronts(stride, width, wavefronts, ideal):
    assert T.shared_request(np.arange(32) * stride, width) == (wavefronts, ideal)


def records(rows):
    """RECORD_DTYPE from (block, warp, lane, epoch, site, address, width) tuples, in execution order."""
    out = np.zeros(len(rows), T.RECORD_DTYPE)
    for i, row in enumerate(rows):
        out[i] = row
    return out


SITES = [T.Site("k.cu", 10, ("k.cu:30",), "load", "global", "x"),
         T.Site("k.cu", 11, (), "store", "global", "y"),
         T.Site("k.cu", 12, (), "load", "shared", "tile"),
         T.Site("k.cu", 13, (), "atomic", "global", "counter")]


def test_group_splits_by_execution_count_and_epoch_and_keeps_partial_warps():
    rows = []
    for lane in range(20):          # a partial warp runs site 0 twice in epoch 0 ...
        rows += [(0, 0, lane, 0, 0, 4 * lane, 4), (0, 0, lane, 0, 0, 1024 + 4 * lane, 4)]
    for lane in range(20):          # ... and once more after a barrier
        rows.append((0, 0, lane, 1, 0, 4 * lane, 4))
    site_block, sectors = T.group(records(rows), SITES)
    (row,) = site_block
    assert (row["requests"], row["lanes"], row["bytes"], row["sectors"]) == (3, 60, 240, 9)
    assert list(sectors["sector"]) == [0, 1, 2, 32, 33, 34, 0, 1, 2]  # execution order
    assert sectors["read"].all() and not sectors["write"].any()


def test_group_separates_warps_and_blocks_and_counts_shared_conflicts():
    rows = [(b, w, lane, 0, 2, 4 * 32 * lane * (1 + w), 4) for b in range(2) for w in range(2) for lane in range(32)]
    site_block, sectors = T.group(records(rows), SITES)
    assert len(sectors) == 0  # shared memory never reaches the sector stream
    assert list(site_block["block"]) == [0, 1] and list(site_block["requests"]) == [2, 2]
    # warp 0: stride 32 words (32-way), warp 1: stride 64 words (32-way as well)
    assert list(site_block["wavefronts"]) == [64, 64] and list(site_block["ideal_wavefronts"]) == [2, 2]


def launch(rows, grid=(2, 1, 1), sites=SITES, counters=None):
    site_block, sectors = T.group(records(rows), sites)
    return T.RawLaunch("k", grid, (32, 1, 1), sites, site_block, sectors, counters=counters or {})


def test_count_metrics_blocks_and_sites_agree():
    rows = [(b, 0, lane, 0, 0, 16 * lane, 16) for b in range(2) for lane in range(32)]         # same 512 bytes
    rows += [(b, 0, lane, 0, 1, 4096 + 512 * b + 4 * lane, 4) for b in range(2) for lane in range(32)]
    rows += [(1, 0, lane, 0, 2, 8 * lane, 4) for lane in range(32)]                            # 2-way conflict
    tensor = np.array([0, 3])
    result = T.count([launch(rows, counters={"smsp__inst_executed_pipe_tensor.sum": tensor})])
    m = result.metrics
    assert set(m) == set(M.METRICS)
    assert (m[LD], m[LD_SECTORS], m[ST], m[ST_SECTORS]) == (2, 32, 2, 8)
    assert (m[SH_LD], m[SH_WAVES], m[SH_CONFLICTS]) == (1, 2, 1)
    assert m["lts__t_sectors_op_read.sum"] == 32 and m["lts__t_sectors_op_write.sum"] == 8
    assert m["dram__bytes_read.sum"] == 512          # the second block finds the first one's sectors in L2
    assert m["dram__bytes_write.sum"] == 2 * 128     # each block's 128 written bytes, once, at the flush
    assert m["smsp__inst_executed_pipe_tensor.sum"] == 3
    blocks = result.launches[0].blocks
    assert len(blocks) == 2 and blocks[0]["dram__bytes_read.sum"] == 512 and blocks[1]["dram__bytes_read.sum"] == 0
    assert {k: sum(b[k] for b in blocks) for k in M.METRICS} == m
    sites = {s["line"]: s for s in result.launches[0].sites}
    assert sites[10]["sectors_per_request"] == 16 and sites[10]["bytes_per_request"] == 512
    assert sites[10]["chain"] == ["k.cu:30"] and sites[10]["target"] == "x"
    assert sites[12]["wavefronts_per_request"] == 2 and sites[12]["bank_conflicts"] == 1
    assert sites[12]["lanes_per_request"] == 32 and 13 not in sites


def stream(*rows):
    """SECTOR_DTYPE from (block, sector, mask, write, read)."""
    out = np.zeros(len(rows), T.SECTOR_DTYPE)
    for i, row in enumerate(rows):
        out[i] = row
    return out


FULL = 0xFFFFFFFF


def test_l2_is_lru_of_its_capacity():
    # capacity 2 sectors: A B A C (evicts B, the least recent) B (misses again)
    s = stream(*[(0, x, FULL, False, True) for x in (1, 2, 1, 3, 2)])
    ((read, write),) = l2.dram_bytes([s], [1], 64)
    assert read[0] == 4 * 32 and write[0] == 0
    ((read, _),) = l2.dram_bytes([s], [1], 96)
    assert read[0] == 3 * 32


def test_l2_stores_never_read_dram_and_reach_it_once():
    s = stream((0, 7, 0x0000FFFF, True, False),    # write the low half
               (0, 7, 0x000000FF, False, True),    # read written bytes: no DRAM read
               (1, 7, 0x00FF0000, False, True),    # read bytes nobody wrote: the sector comes from DRAM
               (1, 7, 0xFF000000, True, False))    # dirty already: still one write-back, charged to block 0
    ((read, write),) = l2.dram_bytes([s], [2], 1 << 20)
    assert list(read) == [0, 32] and list(write) == [32, 0]


def test_l2_eviction_writes_back_and_an_atomic_reads_and_writes():
    s = stream((0, 1, FULL, True, False), (0, 2, FULL, False, True), (0, 3, 0xF, True, True))
    ((read, write),) = l2.dram_bytes([s], [1], 32)   # one sector: every access evicts the previous one
    assert read[0] == 2 * 32 and write[0] == 2 * 32  # sector 1 written back at eviction, 3 at the flush


def test_l2_spans_the_launches_of_a_call():
    first = launch([(0, 0, lane, 0, 1, 4 * lane, 4) for lane in range(32)], grid=(1, 1, 1))   # writes 128 bytes
    second = launch([(0, 0, lane, 0, 0, 4 * lane, 4) for lane in range(32)], grid=(1, 1, 1))  # reads them back
    call = T.count([first, second])
    a, b = (t.metrics for t in call.launches)
    assert a["dram__bytes_write.sum"] == 128 and b["dram__bytes_read.sum"] == 0
    assert call.metrics["dram__bytes_read.sum"] == 0 and call.metrics["dram__bytes_write.sum"] == 128
    tiny = dataclasses.replace(gpus.get("h200"), l2_bytes=32)
    a, b = (t.metrics for t in T.count([first, second], tiny).launches)
    assert a["dram__bytes_write.sum"] == 128 and b["dram__bytes_read.sum"] == 128  # evicted between kernels


def test_atomics_count_as_their_own_requests():
    rows = [(0, 0, lane, 0, 3, 0, 4) for lane in range(32)]  # every lane adds to one counter
    m = T.count([launch(rows, grid=(1, 1, 1))]).metrics
    assert m["l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum"] == 1
    assert m["l1tex__t_sectors_pipe_lsu_mem_global_op_atom.sum"] == 1 and m["lts__t_sectors_op_atom.sum"] == 1
    assert m["dram__bytes_read.sum"] == 32 and m["dram__bytes_write.sum"] == 32 and m[LD] == 0


def test_raw_launch_refuses_bad_input():
    good = launch([(0, 0, 0, 0, 0, 0, 4)], grid=(1, 1, 1))
    with pytest.raises(ValueError, match="unknown names"):
        dataclasses.replace(good, counters={"flops": np.zeros(1)})
    with pytest.raises(ValueError, match="one count per block"):
        dataclasses.replace(good, counters={"sandbox__tensor_flops.sum": np.zeros(3)})
    with pytest.raises(ValueError, match="op must be one of"):
        T.Site("k.cu", 1, (), "prefetch", "global", "x")
    with pytest.raises(ValueError, match="blocks outside"):
        T.count([dataclasses.replace(good, grid=(1, 1, 1), sectors=stream((4, 0, 1, False, True)))])
    with pytest.raises(ValueError, match="device must be one of h200, h100, gh200, h100-pcie, a100"):
        T.count([good], "v100")
