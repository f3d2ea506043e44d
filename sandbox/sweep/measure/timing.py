"""Timing: statistics over repeats, time-budgeted warm-up, and the timers (CUDA events or wall clock).

A timer has ``time(fn) -> seconds`` and times exactly one call of `fn` (a launch). GPU timers
bracket the launch with CUDA events on the legacy default stream, where the variants launch; the
CPU timer reads the wall clock and synchronizes. `measure` is the same for every timer, so it is
tested on the CPU with a fake timer.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Protocol


@dataclasses.dataclass(frozen=True)
class Stats:
    """Seconds: median, quartiles (q3 - q1 = iqr), min, over `repeats` timed calls."""

    median: float
    q1: float
    q3: float
    min: float
    repeats: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @classmethod
    def from_samples(cls, samples) -> "Stats":
        samples = sorted(float(s) for s in samples)
        if not samples:
            raise ValueError("no timing samples")
        if len(samples) == 1:
            q1 = q3 = samples[0]
        else:
            q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        return cls(median=statistics.median(samples), q1=q1, q3=q3, min=samples[0], repeats=len(samples))


@dataclasses.dataclass(frozen=True)
class TimingConfig:
    """How long to warm up and to measure one point.

    warmup_s: calls run (untimed) until this much wall time has passed, at least one call if > 0.
    budget_s: the timed repeats aim for this much total device time, within [min_repeats, max_repeats].
    """

    warmup_s: float
    budget_s: float
    min_repeats: int
    max_repeats: int
    flush: bool = True


# GPU: warm-up 25 ms like Triton's do_bench; ~100 ms of repeats is hundreds of calls at these shapes.
GPU_TIMING = TimingConfig(warmup_s=0.025, budget_s=0.1, min_repeats=10, max_repeats=500)
GPU_QUICK_TIMING = TimingConfig(warmup_s=0.01, budget_s=0.03, min_repeats=5, max_repeats=100)
# CPU: the correctness run already warmed up; emulation times rank nothing (the model does: summary.py), so a
# few wall-clock repeats within a short budget (one when a call takes longer) keep the sweep's time for counting;
# where nothing compiles in a launch (the Numba simulator, NumPy) the correctness launch is the first of them.
CPU_TIMING = TimingConfig(warmup_s=0.0, budget_s=0.3, min_repeats=1, max_repeats=3, flush=False)
CPU_QUICK_TIMING = TimingConfig(warmup_s=0.0, budget_s=0.2, min_repeats=1, max_repeats=3, flush=False)


class Timer(Protocol):
    def time(self, fn: Callable[[], None]) -> float: ...


def measure(fn: Callable[[], None], timer: Timer, config: TimingConfig, flush: Callable[[], None] | None = None,
            clock: Callable[[], float] = time.perf_counter, prior: tuple[float, ...] = ()) -> Stats:
    """Warm up for config.warmup_s, then time calls of `fn` (flushing the L2 before each) until the
    timed calls add up to config.budget_s, within [min_repeats, max_repeats].

    Repeating until the budget is spent (rather than for a count fixed in advance) keeps a slow first
    call (a compile, a cold cache) from deciding how many samples a fast kernel gets. `prior`: samples
    already taken of the same call (the sweep's correctness launch where nothing compiles in it), counted
    first toward the budget and the repeats.
    """
    flush = flush if (flush is not None and config.flush) else (lambda: None)
    if config.warmup_s > 0:
        start = clock()
        calls = 0
        while not calls or clock() - start < config.warmup_s:
            flush()
            timer.time(fn)
            calls += 1
    samples: list[float] = list(prior)[:config.max_repeats]
    while len(samples) < config.min_repeats or (sum(samples) < config.budget_s and len(samples) < config.max_repeats):
        flush()
        samples.append(timer.time(fn))
    return Stats.from_samples(samples)


class WallClockTimer:
    """Wall clock around fn() followed by `synchronize()` (a no-op for CPU backends)."""

    def __init__(self, synchronize: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter):
        self.synchronize = synchronize
        self.clock = clock

    def time(self, fn) -> float:
        start = self.clock()
        fn()
        self.synchronize()
        return self.clock() - start


class CupyEventTimer:
    """cupy.cuda.Event pair on the current stream (the legacy default stream, shared with Numba)."""

    def __init__(self):
        import cupy
        self._cupy = cupy
        self.start, self.end = cupy.cuda.Event(), cupy.cuda.Event()

    def time(self, fn) -> float:
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self._cupy.cuda.get_elapsed_time(self.start, self.end) / 1e3


class NumbaEventTimer:
    """numba.cuda events on stream 0 (used when CuPy is absent)."""

    def __init__(self):
        from numba import cuda
        self._cuda = cuda
        self.start, self.end = cuda.event(timing=True), cuda.event(timing=True)

    def time(self, fn) -> float:
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self._cuda.event_elapsed_time(self.start, self.end) / 1e3


class TorchEventTimer:
    """torch.cuda.Event pair on torch's current stream (the torch.sdpa peer)."""

    def __init__(self):
        import torch
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def time(self, fn) -> float:
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3


def gpu_timer():
    """CuPy events when CuPy is importable (it shares the primary context with Numba), else Numba's."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return NumbaEventTimer()
    return CupyEventTimer()
