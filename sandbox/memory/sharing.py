"""Memory saved by sharing blocks: parallel sampling and beam search, one request at a time.

Parallel sampling (n): the prompt is allocated once and forked n - 1 times; every sample then
generates its own output (lengths drawn independently), so the first append into the shared
partial last block copies it (copy-on-write) and only full prompt blocks stay shared.

Beam search (width k): the prompt is forked into k beams. Each step every beam appends its token;
then a random language model (a 64-token vocabulary, logits ~ N(0, 2^2) drawn afresh for every
beam and step) proposes each beam's continuations, and the k best cumulative log-probabilities
survive: a beam that wins c continuations is kept and forked c - 1 times, one that wins none is
freed. Generated blocks are therefore shared too, down to the beams' common ancestor. All beams
stop after the request's output length.

saved = 1 - (sum over steps of blocks in use) / (sum over steps of blocks the same sequences would
hold without sharing, ceil(len / block_size) each), summed over all requests, sampled after each
step's appends. This measures the decode phase of requests run in isolation.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sandbox.paging import BlockManager

BEAM_VOCAB = 64
BEAM_LOGIT_STD = 2.0


@dataclass
class SharingResult:
    kind: str            # "parallel" or "beam"
    width: int
    block_size: int
    requests: int
    blocks_with_sharing: int
    blocks_without_sharing: int
    saved: float
    copies: int          # copy-on-write orders issued

    def as_dict(self) -> dict:
        return asdict(self)


def _result(kind, width, block_size, requests, with_, without, copies) -> SharingResult:
    return SharingResult(kind, width, block_size, requests, with_, without,
                         1.0 - with_ / without if without else 0.0, copies)


def parallel_sampling(prompts, output_samples, block_size: int) -> SharingResult:
    """prompts [R]; output_samples [R, n] output lengths of each request's n samples."""
    output_samples = np.asarray(output_samples)
    n = output_samples.shape[1]
    with_ = without = copies = 0
    for prompt, outs in zip((int(p) for p in prompts), output_samples.tolist()):
        bm = BlockManager(n * -(-(prompt + max(outs)) // block_size), block_size)
        bm.allocate(0, prompt)
        for j in range(1, n):
            bm.fork(0, j)
        live = list(range(n))
        for step in range(1, max(outs) + 1):
            for j in live:
                copies += bm.append_slot(j)[1] is not None
            with_ += bm.num_used_blocks
            without += len(live) * -(-(prompt + step) // block_size)
            for j in [j for j in live if outs[j] == step]:
                bm.free(j)
                live.remove(j)
        assert bm.num_free_blocks == bm.num_blocks
    return _result("parallel", n, block_size, len(output_samples), with_, without, copies)


def beam_search(prompts, outputs, width: int, block_size: int, rng: np.random.Generator) -> SharingResult:
    """Beam search of the given width on every (prompt, output length) request; see the module docstring."""
    with_ = without = copies = 0
    for prompt, out in zip((int(p) for p in prompts), (int(o) for o in outputs)):
        bm = BlockManager(width * -(-(prompt + out) // block_size) + width, block_size)
        bm.allocate(0, prompt)
        beams = [0]
        for j in range(1, width):
            bm.fork(0, j)
            beams.append(j)
        next_id = width
        scores = np.zeros(width)
        scores[1:] = -np.inf                       # identical beams at the start: expand one
        for step in range(1, out + 1):
            for b in beams:
                copies += bm.append_slot(b)[1] is not None
            with_ += bm.num_used_blocks
            without += width * -(-(prompt + step) // block_size)
            if step == out:
                break
            logits = rng.normal(0.0, BEAM_LOGIT_STD, size=(width, BEAM_VOCAB))
            logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
            cand = (scores[:, None] + logp).ravel()
            best = np.argpartition(-cand, width - 1)[:width]
            best = best[np.argsort(-cand[best])]
            parents = (best // BEAM_VOCAB).tolist()
            wins = [0] * width
            for p in parents:
                wins[p] += 1
            for i, b in enumerate(beams):
                if wins[i] == 0:
                    bm.free(b)
            new_beams, seen = [], set()
            for p in parents:
                if p in seen:
                    bm.fork(beams[p], next_id)
                    new_beams.append(next_id)
                    next_id += 1
                else:
                    seen.add(p)
                    new_beams.append(beams[p])
            beams = new_beams
            scores = cand[best]
        for b in beams:
            bm.free(b)
        assert bm.num_free_blocks == bm.num_blocks
    return _result("beam", width, block_size, len(outputs), with_, without, copies)
