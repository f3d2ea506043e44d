"""Memory saved by sharing blocks (the vLLM paper's Fig. 15): parallel sampling and beam search, one request at a time.

Parallel sampling (n): the prompt is allocated once and forked n - 1 times; every sample then
generates the request's output length (vLLM's benchmark_serving.py sets ignore_eos, so every
sample runs to max_tokens), so the first append into the shared partial last block copies it
(copy-on-write) and only full prompt blocks stay shared. ``output_samples`` may give each sample
its own length instead.

Beam search (width k): the prompt is forked into k beams; every step each beam appends its token,
then ``sandbox.memory.beam`` decides which beams survive: a beam that wins c continuations is kept
and forked c - 1 times, one that wins none is freed. Generated blocks are therefore shared too, down
to the beams' common ancestor. All beams stop after the request's output length.

saved = 1 - (sum over steps of blocks in use) / (sum over steps of blocks the same sequences would
hold without sharing, ceil(len / block_size) each), summed over all requests, sampled after each
step's appends: the paper's "blocks saved by sharing / total blocks without sharing".
"""
from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass

import numpy as np

from sandbox.memory import beam
from sandbox.paging import BlockManager


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


def beam_search(prompts, outputs, width: int, block_size: int, rng: random.Random,
                survival: float | None = None, replacements: float = beam.REPLACEMENTS) -> SharingResult:
    """Beam search of the given width on every (prompt, output length) request; see the module docstring.
    ``survival`` given: the constant model; None: the per-output model with ``replacements``
    (``sandbox.memory.beam``)."""
    with_ = without = copies = 0
    for prompt, out in zip((int(p) for p in prompts), (int(o) for o in outputs)):
        step_survival = survival if survival is not None else beam.survival_for(out, replacements)
        bm = BlockManager(width * -(-(prompt + out) // block_size) + width, block_size)
        bm.allocate(0, prompt)
        beams = [0]
        for j in range(1, width):
            bm.fork(0, j)
            beams.append(j)
        new_id = itertools.count(width).__next__
        append = bm.append_slot
        for step in range(1, out + 1):
            for b in beams:
                copies += append(b)[1] is not None
            with_ += bm.num_used_blocks
            without += width * -(-(prompt + step) // block_size)
            if step == out:
                break
            parents = beam.next_parents(width, step_survival, rng)
            if parents is not None:
                beams = advance_beams(bm, beams, parents, new_id)
        for b in beams:
            bm.free(b)
        assert bm.num_free_blocks == bm.num_blocks
    return _result("beam", width, block_size, len(outputs), with_, without, copies)


def advance_beams(bm: BlockManager, beams: list, parents: list[int], new_id) -> list:
    """Free the beams nobody continues, fork the ones continued more than once (``new_id()`` names a fork)."""
    continued = set(parents)
    for i, b in enumerate(beams):
        if i not in continued:
            bm.free(b)
    new_beams, seen = [], set()
    for p in parents:
        if p in seen:
            child = new_id()
            bm.fork(beams[p], child)
            new_beams.append(child)
        else:
            seen.add(p)
            new_beams.append(beams[p])
    return new_beams


BEAM_MODELS = ("survival", "replacements")     # the constant model's parameter, the per-output model's


def beam_savings(prompts, outputs, block_size: int, model: str, value: float, widths, seed: int = 0) -> dict:
    """{width: saved} of beam search under ``model`` ("survival": constant, "replacements": per output)."""
    if model == "survival":
        beam.validate_survival(value)
        params = dict(survival=value)
    elif model == "replacements":
        beam.survival_for(1, value)                        # refuses a non-positive value
        params = dict(replacements=value)
    else:
        raise ValueError(f"beam model must be one of {BEAM_MODELS}, got {model!r}")
    return {w: beam_search(prompts, outputs, w, block_size, random.Random(seed), **params).saved for w in widths}


def range_error(saved: dict, target: tuple[float, float]) -> float:
    """Squared distance of the smallest and largest width's savings to the paper's range ends (its widths 2 and 6)."""
    widths = sorted(saved)
    return (saved[widths[0]] - target[0]) ** 2 + (saved[widths[-1]] - target[1]) ** 2


def calibrate(prompts, outputs, block_size: int, model: str, values, widths, target: tuple[float, float],
              seed: int = 0) -> tuple[float, list[dict]]:
    """The value in ``values`` whose beam savings at the smallest and largest width come closest
    (squared error) to ``target`` = (saved at widths[0], saved at widths[-1]); returns (best, table rows)."""
    rows = []
    for value in values:
        saved = beam_savings(prompts, outputs, block_size, model, value, widths, seed)
        rows.append({model: value, "saved": saved, "error": range_error(saved, target)})
    best = min(rows, key=lambda r: r["error"])
    return best[model], rows


def calibrate_survival(prompts, outputs, block_size: int, survivals, widths, target: tuple[float, float],
                       seed: int = 0) -> tuple[float, list[dict]]:
    """``calibrate`` for the constant model."""
    return calibrate(prompts, outputs, block_size, "survival", survivals, widths, target, seed)


def cross_validate(workloads: dict, block_size: int, model: str, values, widths, targets: dict,
                   seed: int = 0) -> list[dict]:
    """Fit on one workload, predict the other: for each ordered pair (fit, test) of ``workloads``
    ({name: (prompts, outputs)}), the value fitted on ``fit`` (``calibrate`` against targets[fit]),
    the savings it predicts at every width on ``test`` and their out-of-sample error against
    targets[test] (the largest distance, in fraction points, of widths[0] / widths[-1] to the range's ends)."""
    fitted = {name: calibrate(*lengths, block_size, model, values, (widths[0], widths[-1]), targets[name], seed)[0]
              for name, lengths in workloads.items()}
    rows = []
    for fit, value in fitted.items():
        for test, lengths in workloads.items():
            if test == fit:
                continue
            saved = beam_savings(*lengths, block_size, model, value, widths, seed)
            lo, hi = targets[test]
            error = max(abs(saved[widths[0]] - lo), abs(saved[widths[-1]] - hi))
            rows.append(dict(model=model, fit=fit, value=value, test=test, saved=saved, paper=(lo, hi),
                             out_of_sample_error=error))
    return rows
