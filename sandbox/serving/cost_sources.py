"""The ``--step-cost`` sources by name: ``analytic``, ``sweep:RUN_DIR``, ``model[:VARIANTS]``.

    SOURCES        word -> factory(argument, shape, fixed_ms, overhead_ms) -> a StepCostModel
    make_cost_model(spec, shape, fixed_ms=None, overhead_ms=0.0)

Above ``cost``, ``cost_sweep`` and ``cost_model`` (each of which imports only ``cost``): adding a source is a
class beside them and one entry here. A factory raises RefusedRequest to refuse its argument.
"""
from __future__ import annotations

from sandbox.errors import RefusedRequest
from sandbox.memory.budget import ModelShape
from sandbox.serving.cost import AnalyticCost, StepCostModel
from sandbox.serving.cost_model import ModelCost
from sandbox.serving.cost_sweep import SweepCost


def _analytic(argument: str, shape: ModelShape, fixed_ms, overhead_ms):
    if argument:
        raise RefusedRequest(f"--step-cost analytic takes no argument, got {argument!r}")
    return AnalyticCost(shape, fixed_ms, overhead_ms)


def _model(argument: str, shape: ModelShape, fixed_ms, overhead_ms):
    return ModelCost(argument, shape, fixed_ms, overhead_ms=overhead_ms)


def _sweep(argument: str, shape: ModelShape, fixed_ms, overhead_ms):
    if not argument:
        raise RefusedRequest("--step-cost sweep needs a run folder: sweep:results/<run>")
    return SweepCost(argument, shape, fixed_ms, overhead_ms)


SOURCES = {"analytic": _analytic, "sweep": _sweep, "model": _model}
_SPELLING = {"sweep": ":RUN_DIR", "model": "[:VARIANTS]"}


def make_cost_model(spec: str, shape: ModelShape, fixed_ms: float | None = None,
                    overhead_ms: float = 0.0) -> StepCostModel:
    """``analytic``, ``sweep:RUN_DIR`` or ``model[:VARIANTS]`` -> a cost model; RefusedRequest otherwise."""
    word, _, argument = spec.partition(":")
    if word not in SOURCES:
        raise RefusedRequest(f"--step-cost {spec!r}: unknown source {word!r}; choose one of "
                             + ", ".join(w + _SPELLING.get(w, "") for w in SOURCES))
    return SOURCES[word](argument, shape, fixed_ms, overhead_ms)
