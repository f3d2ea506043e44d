"""The whole memory-waste study: contiguous reservations, paged block sizes, sharing; one run folder.

``run_study(config)`` draws the request lengths once (same requests for every configuration),
simulates each configuration (see ``simulate``), measures sharing on the first ``sharing_requests``
of the same requests (see ``sharing``; the paper's Fig. 15 ranges for Alpaca- and ShareGPT-like
lengths go beside them), appends one CSV row per configuration as it finishes and returns everything
as a dict ready for JSON.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sandbox.errors import RefusedRequest
from sandbox.memory import beam, distributions, paper, sharing, simulate
from sandbox.memory.arena import RESERVE_POLICIES
from sandbox.memory.waste import CATEGORIES
from sandbox.results import CsvAppender, new_run_dir
from sandbox.memory.plot import plot_study

DEFAULT_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MEMORY_FIELDS = ["allocator", "block_size", "reserve", *CATEGORIES, "utilization", "max_concurrent_requests",
                 "mean_concurrent_requests", "steps", "finished", "preemptions", "recomputed_tokens",
                 "hit_step_cap", "budget_tokens", "seconds"]
SHARING_FIELDS = ["kind", "width", "block_size", "requests", "blocks_with_sharing", "blocks_without_sharing",
                  "saved", "copies", "seconds"]


@dataclass
class StudyConfig:
    distribution: str = "sharegpt"
    trace: str | None = None
    budget_tokens: int = 0
    budget_note: str = ""
    max_len: int = 2048
    block_sizes: tuple[int, ...] = DEFAULT_BLOCK_SIZES
    num_requests: int = 2000
    reserve: str = "max"
    max_num_seqs: int = simulate.DEFAULT_MAX_NUM_SEQS
    sharing_requests: int = 500
    sharing_block_size: int = 16
    sharing_widths: tuple[int, ...] = paper.FIG15_WIDTHS
    beam_survival: float | None = None       # None: the per-output model (beam_replacements)
    beam_replacements: float = beam.REPLACEMENTS
    max_steps: int = 10**6
    seed: int = 0
    args: dict = field(default_factory=dict)


def validate(config: StudyConfig) -> None:
    """Raise ValueError naming the first bad setting."""
    if config.max_len < 2:
        raise RefusedRequest(f"--max-len must be >= 2, got {config.max_len}")
    if config.num_requests < 1:
        raise RefusedRequest(f"--num-requests must be >= 1, got {config.num_requests}")
    if config.sharing_requests < 1:
        raise RefusedRequest(f"--sharing-requests must be >= 1, got {config.sharing_requests}")
    if config.max_steps < 1:
        raise RefusedRequest(f"--max-steps must be >= 1, got {config.max_steps}")
    if config.max_num_seqs < 1:
        raise RefusedRequest(f"--max-num-seqs must be >= 1, got {config.max_num_seqs}")
    if config.seed < 0:
        raise RefusedRequest(f"--seed must be an integer >= 0 (it seeds NumPy's generator), got {config.seed}")
    if config.beam_survival is not None and not 0 < config.beam_survival <= 1:
        raise RefusedRequest(f"--beam-survival must lie in (0, 1], got {config.beam_survival}")
    if not config.beam_replacements > 0:
        raise RefusedRequest(f"--beam-replacements must be > 0, got {config.beam_replacements}")
    if not config.block_sizes or min(config.block_sizes) < 1:
        raise RefusedRequest(f"--block-sizes must be positive integers, got {list(config.block_sizes)}")
    if config.sharing_block_size < 1:
        raise RefusedRequest(f"--sharing-block-size must be >= 1, got {config.sharing_block_size}")
    if config.budget_tokens < config.max_len:
        raise RefusedRequest(f"the KV budget ({config.budget_tokens} tokens{config.budget_note}) must hold at least "
                         f"one request of --max-len {config.max_len} tokens")
    for bs in config.block_sizes:
        if config.budget_tokens // bs * bs < config.max_len:
            raise RefusedRequest(f"block size {bs}: the budget of {config.budget_tokens} tokens holds fewer than "
                             f"--max-len {config.max_len} slots in whole blocks")
    if config.reserve not in RESERVE_POLICIES:
        raise RefusedRequest(f"unknown reserve policy {config.reserve!r}")


def request_lengths(config: StudyConfig):
    """(prompts, outputs, arrival note): a trace's rows in arrival order when it has an arrival column."""
    if config.trace:
        prompts, outputs, arrivals = distributions.load_trace(config.trace, config.max_len, config.num_requests)
        if arrivals is None:
            return prompts, outputs, "all requests at step 0 (offline batch), in trace order"
        order = np.argsort(arrivals, kind="stable")
        return (prompts[order], outputs[order],
                "all requests at step 0 (offline batch), queued in the trace's arrival order; "
                "python -m sandbox serving --trace replays the arrival times")
    rng = np.random.default_rng([config.seed, 0])
    prompts, outputs = distributions.sample_lengths(config.distribution, config.num_requests, config.max_len, rng)
    return prompts, outputs, "all requests at step 0 (offline batch)"


def run_sharing(config: StudyConfig, prompts, outputs, progress=None) -> tuple[list[dict], list[dict]]:
    """Parallel sampling and beam search at every width on the first sharing_requests requests."""
    prompts, outputs = prompts[:config.sharing_requests], outputs[:config.sharing_requests]
    rows = {"parallel": [], "beam": []}
    for width in config.sharing_widths:
        t0 = time.perf_counter()
        samples = np.repeat(outputs[:, None], width, axis=1)     # every sample runs to the output length
        row = sharing.parallel_sampling(prompts, samples, config.sharing_block_size).as_dict()
        rows["parallel"].append(dict(row, seconds=time.perf_counter() - t0))
        if progress:
            progress(rows["parallel"][-1])
    for width in config.sharing_widths:
        t0 = time.perf_counter()
        rng = random.Random(config.seed * 1000 + width)
        row = sharing.beam_search(prompts, outputs, width, config.sharing_block_size, rng,
                                  config.beam_survival, config.beam_replacements).as_dict()
        rows["beam"].append(dict(row, seconds=time.perf_counter() - t0))
        if progress:
            progress(rows["beam"][-1])
    return rows["parallel"], rows["beam"]


def paper_ranges(config: StudyConfig) -> dict | None:
    """The paper's Fig. 15 ranges for this study's lengths (None for a trace or the uniform lengths)."""
    return None if config.trace else paper.FIG15.get(config.distribution)


def run_study(config: StudyConfig, results_root: Path | None = None, show_progress: bool = True) -> dict:
    """Simulate everything, write the run folder (CSV rows as they finish, meta.json, PNG); return the result."""
    from tqdm import tqdm

    validate(config)
    prompts, outputs, arrival = request_lengths(config)
    run_dir = new_run_dir("memory", root=results_root)
    workload = f"trace {Path(config.trace).name}" if config.trace else f"{config.distribution}-like lengths"
    meta = dict(
        workload=workload, seed=config.seed, budget_tokens=config.budget_tokens, budget_note=config.budget_note,
        max_len=config.max_len, block_sizes=list(config.block_sizes), reserve=config.reserve,
        max_num_seqs=config.max_num_seqs, lengths=simulate.lengths_summary(prompts, outputs), arrival=arrival,
        sharing=dict(workload=workload, requests=min(config.sharing_requests, len(prompts)),
                     block_size=config.sharing_block_size, widths=list(config.sharing_widths),
                     beam_survival=config.beam_survival, beam_replacements=config.beam_replacements,
                     paper=paper_ranges(config)),
        args=config.args, run_dir=str(run_dir))
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

    policies = [config.reserve] + [p for p in RESERVE_POLICIES if p != config.reserve]
    steps = len(policies) + len(config.block_sizes) + 2 * len(config.sharing_widths)
    bar = tqdm(total=steps, desc="memory study", unit="config", disable=not show_progress, leave=False)
    contiguous, paged = [], []
    t_start = time.perf_counter()
    common = dict(max_len=config.max_len, max_steps=config.max_steps, max_num_seqs=config.max_num_seqs)
    with CsvAppender(run_dir / "memory.csv", MEMORY_FIELDS) as csv_rows:
        for kind, values in (("contiguous", policies), ("paged", config.block_sizes)):
            for value in values:
                bar.set_postfix_str(f"{kind} {value}")
                t0 = time.perf_counter()
                if kind == "contiguous":
                    res = simulate.simulate_contiguous(prompts, outputs, config.budget_tokens, reserve=value, **common)
                else:
                    res = simulate.simulate_paged(prompts, outputs, config.budget_tokens, value, **common)
                res.seconds = time.perf_counter() - t0
                (contiguous if kind == "contiguous" else paged).append(res.as_dict())
                csv_rows.write(res.as_dict())
                bar.update()
    with CsvAppender(run_dir / "sharing.csv", SHARING_FIELDS) as csv_rows:
        def on_sharing(row):
            bar.set_postfix_str(f"sharing {row['kind']} {row['width']}")
            csv_rows.write(row)
            bar.update()
        parallel, beam_rows = run_sharing(config, prompts, outputs, on_sharing)
    bar.close()
    meta["seconds"] = time.perf_counter() - t_start
    result = dict(meta=meta, contiguous=contiguous[0], contiguous_variants=contiguous[1:], paged=paged,
                  sharing=dict(meta["sharing"], parallel=parallel, beam=beam_rows), run_dir=str(run_dir))
    result["plot"] = str(plot_study(result, run_dir / "memory.png"))
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return result
