"""Count one block for each class of identical-work blocks (numba_sim.capture(represent=...)).

A serving-sized problem is hours under the simulator (5-20 us per multiply-add), but its blocks are
few kinds: in a decode kernel whose blockIdx.x is the sequence, every block of sequences with the
same context length does the same work, at addresses that differ only by whole rows. Such blocks'
per-block counts (requests, lanes, bytes, sectors and wavefronts per request) are equal when each
address a block computes differs from its representative's by a multiple of 32 bytes (sector
boundaries fall alike) and equal addresses stay equal (the block table's repeats fall alike).
decode_representatives() groups blocks under exactly those conditions, and groups nothing where
they cannot be shown from the problem's shapes.
"""
from __future__ import annotations

import dataclasses

import numpy as np

SECTOR_BYTES = 32
# Kernels whose grid is (sequence, head or KV head[, partition]): blockIdx.x is the sequence, and
# neither the head nor the KV head changes a block's work (kernels/numba_cuda/{block,gqa,split}.py).
SEQUENCE_ON_X = ("block_body", "gqa_body", "partition_body", "merge_body")
# Per variant made of those kernels: the problem attribute counting the blocks (grid y) of a sequence that
# do one kind of work, so one of them is simulated (estimate_seconds).
GROUPED_VARIANTS = {"numba.block": "num_heads", "numba.split": "num_heads", "numba.gqa": "num_kv_heads"}


@dataclasses.dataclass(frozen=True)
class Representatives:
    """blocks: int [num_blocks], the block whose counts stand for each (itself for a simulated one)."""

    blocks: np.ndarray
    reason: str

    @property
    def simulated(self) -> int:
        return int(np.count_nonzero(self.blocks == np.arange(len(self.blocks))))

    def check(self, num_blocks: int) -> None:
        b = self.blocks
        if b.shape != (num_blocks,) or (b < 0).any() or (b >= num_blocks).any() or (b[b] != b).any():
            raise ValueError(f"Representatives.blocks must be int [{num_blocks}] block indices, each pointing at a "
                             f"block that represents itself; got shape {b.shape}")


def by_key(keys: list) -> np.ndarray:
    """int [len(keys)]: each block's representative, the first block (in launch order) with its key."""
    first = {}
    return np.array([first.setdefault(k, i) for i, k in enumerate(keys)], np.int64)


def repeats(blocks: np.ndarray) -> tuple:
    """Which entries of a table row name the same physical block: each entry labelled by the order in
    which its block first appears ([7, 3, 7] -> (0, 1, 0)); rows with equal labels repeat alike."""
    _, first_seen, inverse = np.unique(blocks, return_index=True, return_inverse=True)
    label = np.argsort(np.argsort(first_seen))
    return tuple(int(x) for x in label[inverse.ravel()])


def sequence_kinds(problem) -> list | None:
    """Per sequence, the key of its kind of work (decode_representatives' grouping), or None when the
    problem's shapes cannot show two sequences' blocks alike (see decode_representatives)."""
    p = problem
    widths = (p.query.dtype.itemsize, p.key_cache.dtype.itemsize, 4)
    if getattr(p, "query_start", None) is not None or any(p.head_dim * w % SECTOR_BYTES for w in widths):
        return None
    lens = p.context_lens.astype(np.int64)
    first = p.first_read_tokens().astype(np.int64)
    table_row = p.block_tables.shape[1] * p.block_tables.dtype.itemsize
    used = [p.block_tables[s, first[s] // p.block_size: -(-lens[s] // p.block_size)] for s in range(p.num_seqs)]
    owners = {}
    for s, blocks in enumerate(used):
        for b in set(blocks.tolist()):
            owners.setdefault(b, set()).add(s)
    kinds = []
    for s, blocks in enumerate(used):
        if any(len(owners[b]) > 1 for b in blocks.tolist()):
            kinds.append(("shares physical blocks", s))  # its own kind: its K/V may be in L2 already
        else:
            kinds.append((int(lens[s]), int(first[s]), (s * table_row) % SECTOR_BYTES, repeats(blocks)))
    return kinds


def decode_representatives(problem, across_heads: bool = True):
    """A capture(represent=...) callable for a decode problem (one query token per sequence).

    For the kernels in SEQUENCE_ON_X it maps block (x = sequence, y, z) to the first block with the
    same (context length, first token read, z, the sequence's block-table repeats and its table row's
    offset modulo 32 bytes; and y unless across_heads); a sequence that shares a physical block with
    another is a kind of its own. For other kernels, or when a head's row of the query, the output,
    the K/V cache or the float32 partials is not a whole number of sectors (head_dim * element bytes
    % 32), it answers None: every block is simulated.

    The per-block counts are exact either way. DRAM bytes are not counted for the blocks that do not
    run: count() gives them their representative's, right for blocks whose data no other block read
    first. Query heads of one KV head (grid y of numba.block and numba.split) read the same K/V: when
    the blocks between them in launch order fit in L2 (small problems), a GPU serves the second from
    L2 and across_heads=False (every head simulated) models that; at serving sizes they do not fit.
    """
    kinds = sequence_kinds(problem)

    def represent(name, grid, block, args):
        if kinds is None or name not in SEQUENCE_ON_X or grid[0] != len(kinds):
            return None
        gx, gy, gz = grid
        keys = [(kinds[x], z, 0 if across_heads else y) for z in range(gz) for y in range(gy) for x in range(gx)]
        return Representatives(by_key(keys), "same context length, first token and table pattern"
                                             f"{'' if across_heads else ', same head'}: {len(set(keys))} kinds of block")

    return represent


# Wall seconds per multiply-add (Q.K and P.V, DecodeProblem.multiply_adds) of a captured launch, measured
# on a loaded 2-core machine: numba.gqa, one block of 512 tokens x 4 heads x head_dim 128 at 128 threads,
# 524k multiply-adds in 36 s; the check-sized problems of every Numba variant took 27-44 us of CPU each.
SECONDS_PER_MULTIPLY_ADD = 7e-5


def estimate_seconds(problem, variant: str, across_heads: bool = True) -> float:
    """Roughly how long capturing one call of a Numba decode variant takes, represent=decode_representatives
    (problem, across_heads) given: the multiply-adds of the blocks simulated times SECONDS_PER_MULTIPLY_ADD.
    For the variants in GROUPED_VARIANTS, one sequence per kind of work and (across_heads) one of its
    blocks along grid y; for the others, every sequence. To refuse a problem before starting it."""
    p = problem
    reads = (p.context_lens.astype(np.int64) - p.first_read_tokens()) * p.query_lens
    per_block = GROUPED_VARIANTS.get(variant)
    kinds = sequence_kinds(p) if per_block else None
    share = 1
    if kinds is not None:
        reads = reads[sorted({k: i for i, k in reversed(list(enumerate(kinds)))}.values())]
        share = getattr(p, per_block) if across_heads else 1
    return float(2 * p.num_heads * p.head_dim * int(reads.sum()) / share * SECONDS_PER_MULTIPLY_ADD)
