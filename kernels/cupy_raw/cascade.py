"""cupy.cascade: attention over a shared prompt computed once for every sequence that shares it, then merged.

Idea (cascade inference): sequences whose block tables start with the same full physical blocks (fork
for parallel sampling or beams, prefix caching) form a group (sandbox.paging.cascade_plan.plan, in the
untimed prepare). The group's prefix (tokens 0..P-1) is a multi-query problem: every query row of
every member (query token x head of a KV head) attends to it with its own position's causal mask,
window and ALiBi, in tiles of up to 32 rows (16 at head dim 256) read through the first member's
table, so a tile loads the prefix once for all its rows (decode, GQA 4, n = 8: one tile per group and
KV head). Each sequence's own tokens P..L-1 are cupy.multi's tiles; a row's partial results (prefix
and suffix, per partition) are merged by log-sum-exp. Same kernels as cupy.multi (multi.cu), another
work list: a group of one, or a problem without sharing, is exactly cupy.multi.
Prefix tokens before every member's window are never looked up or loaded (a tile's range starts at the
earliest window start among its rows); only full blocks shared by every member count as prefix (a
partly full or copy-on-write-split last block is each sequence's own).
Limits: as cupy.multi (any block size, head dims 32..256, every dtype, fp8 cache and option, any
query length and decode).
prepare() returns a CascadePrepared: .plan (the sandbox.paging.cascade_plan groups), .shared_prefixes
([(seqs, prefix tokens)]), bytes_moved() (K/V of the tokens read with each group's prefix counted
once, plus query, output, table entries read, context_lens, query_start: problem.bytes_moved()'s
counting), bytes_loaded() (what the thread blocks load: the prefix once per prefix tile and KV head),
launch_parts() as cupy.multi.
Verdict: not measured on a GPU. Expected gain over cupy.multi at shared-prompt shapes: K/V bytes fall
from n x prefix + suffixes to prefix + suffixes (README example: n = 8, 2048-token prompt).
"""
from __future__ import annotations

import numpy as np

from sandbox.paging import cascade_plan

from . import common, multi

PATH = multi.PATH  # the same kernels (tile attention and merge): cascade is a work list
NAME = "cupy.cascade"
LIMITS = multi.LIMITS
TUNABLES = multi.TUNABLES


def shared_prefixes(groups, block_size: int) -> list[tuple[tuple[int, ...], int]]:
    """[(seqs, prefix tokens)] of a plan: a group of one shares nothing."""
    return [(g.seqs, g.prefix_tokens(block_size) if len(g.seqs) > 1 else 0) for g in groups]


def cascade_work(problem, layout: multi.Layout, partition: int, prefixes) -> multi.WorkList:
    """Tiles of a cascade: per group with a prefix of P > 0 tokens, the members' query rows sorted by
    position in tiles over tokens [earliest window start in the tile, min(P, last position + 1)) of the
    first member's table; then per sequence, cupy.multi's tiles over tokens >= P (its group's P)."""
    work = multi.WorkList(problem, layout, partition)
    rows = multi.query_rows(problem)
    for seqs, prefix in prefixes:
        if prefix > 0:
            entries = []  # (position, query row, window start) of rows that read some prefix token
            for s in seqs:
                row0, positions, lo = rows[s]
                for j, (pos, first) in enumerate(zip(positions, lo)):
                    if first < min(prefix, pos + 1):
                        entries.append((int(pos), row0 + j, int(first)))
            entries.sort()
            for i in range(0, len(entries), layout.tile_tokens):
                tile = entries[i: i + layout.tile_tokens]
                work.add(seqs[0], [(qrow, pos) for pos, qrow, _ in tile], min(first for _, _, first in tile),
                         min(prefix, tile[-1][0] + 1))
        for s in seqs:
            row0, positions, lo = rows[s]
            for j in range(0, len(positions), layout.tile_tokens):
                pos = positions[j: j + layout.tile_tokens]
                work.add(s, zip(range(row0 + j, row0 + j + len(pos)), pos), max(prefix, int(lo[j])),
                         int(pos[-1]) + 1)
    return work


def bytes_moved_for(problem, prefixes) -> int:
    """Bytes a cascade step needs: problem.bytes_moved()'s counting (K/V of the tokens read, query, output,
    table entries read, context_lens, query_start) with each group's shared prefix read once: the
    prefix tokens any member reads ([earliest first read, P)) and their table entries once per group,
    each member's tokens from max(P, its first read) on its own."""
    p = problem
    first = p.first_read_tokens()
    lens = p.context_lens.astype(np.int64)
    bs = p.block_size
    tokens = entries = 0
    for seqs, prefix in prefixes:
        if prefix > 0:
            earliest = min(int(first[s]) for s in seqs)
            tokens += max(0, prefix - earliest)
            entries += max(0, prefix // bs - earliest // bs)
        for s in seqs:
            own = max(prefix, int(first[s]))
            tokens += int(lens[s]) - own
            entries += -(-int(lens[s]) // bs) - own // bs
    kv = tokens * multi.kv_token_bytes(p)
    q_and_out = 2 * p.query.size * p.query.dtype.itemsize
    starts = 0 if p.query_start is None else p.query_start.nbytes
    return kv + q_and_out + 4 * entries + p.context_lens.nbytes + starts


class CascadePrepared(multi.MultiPrepared):
    """cupy.multi's launches over a cascade's work list, with the plan that made it."""

    def __init__(self, launches, out, keep, out_dtype, problem, work, lse=None, plan=(), prefixes=()):
        super().__init__(launches, out, keep, out_dtype, problem, work, lse=lse)
        self.plan = list(plan)                 # [sandbox.paging.cascade_plan.Group]
        self.shared_prefixes = list(prefixes)  # [(seqs, prefix tokens)]

    def bytes_moved(self) -> int:
        """K/V of the tokens read with each group's prefix once (see bytes_moved_for), query, output, table."""
        return bytes_moved_for(self.problem, self.shared_prefixes)


def prepare_with_prefixes(name: str, problem, backend: str, groups, prefixes,
                          partition_size: int | None = None, threads: int = common.NUM_THREADS) -> CascadePrepared:
    """The cascade of `prefixes` ([(seqs, prefix tokens)] covering every sequence once); `groups` is kept as .plan."""
    layout = multi.Layout.for_problem(problem)
    work = cascade_work(problem, layout, multi.partition_tokens(partition_size), prefixes)
    return multi.prepare_work(name, PATH, problem, backend, work, prepared_class=CascadePrepared, threads=threads,
                              plan=groups, prefixes=prefixes)


def plan_for(problem) -> list:
    """sandbox.paging.cascade_plan.plan of the problem's tables."""
    return cascade_plan.plan(problem.block_tables, problem.context_lens, problem.block_size)


def prepare(problem, backend: str, partition_size: int | None = None, *,
            threads: int = common.NUM_THREADS) -> CascadePrepared:
    groups = plan_for(problem)
    return prepare_with_prefixes(NAME, problem, backend, groups, shared_prefixes(groups, problem.block_size),
                                 partition_size, threads)


def compile_report(block_size: int, head_dim: int, dtype, arch: str, kv_dtype=None, flags: int = 0,
                   threads: int = common.NUM_THREADS) -> dict:
    """cupy.multi's kernels (the cascade launches the same two)."""
    return multi.compile_report(block_size, head_dim, dtype, arch, kv_dtype=kv_dtype, flags=flags, threads=threads)
