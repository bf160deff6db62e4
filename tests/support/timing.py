"""Test helpers for the cost-aware planners: a synthetic clock, so that runs on the
reference engine choose their batch sizes deterministically, and the samplers of the
exactness suites (stub predictor, synthetic clock) injected through ``planner=``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from presto_sgl import PowerConfig, PrestoConfig, Sampler
from presto_sgl.engines.base import Engine
from presto_sgl.kernels import Kernel
from presto_sgl.planners import CostAware, Planner, RolloutPolicy, StepPlanner
from presto_sgl.planners.timemodel import CallTimeModel
from presto_sgl.predictor.certainty import Predictor
from presto_sgl.samplers import make_planner
from tests.support.predictors import CutPredictor, predictive_planner

CPU_LAW = (0.02, 0.005, 0.06, 0.006, 0.03)
"""Seconds per (call, row, decode step, decoded token, step with two rows or more): a CPU-like
engine with a faster path for a batch of one (docs/design.md §5, cost-aware)."""


def law_time(new_tokens: Sequence[int], law: Sequence[float] = CPU_LAW) -> float:
    """The synthetic call time of requests with these new-token counts."""
    return float(CallTimeModel.features(new_tokens) @ law)


class SyntheticClock(CallTimeModel):
    """A time model fed :func:`law_time` instead of the measured wall time."""

    def observe(self, new_tokens: Sequence[int], time_s: float) -> None:
        super().observe(new_tokens, law_time(new_tokens))


def rollout_planner(predictor: Predictor, *args: Any, **kwargs: Any) -> CostAware:
    """The step rule with the rollout budget (:class:`RolloutPolicy`'s arguments)."""
    return CostAware(StepPlanner(), RolloutPolicy(predictor, *args, **kwargs))


def stub_planner(presto: PrestoConfig) -> Planner:
    """The planner of ``presto``; predictor-driven rules plan with a fresh :class:`CutPredictor`
    (and, cost-aware, a :class:`SyntheticClock`) instead of the shipped predictor."""
    if presto.rule == "predictive" and not presto.cost_aware:
        return predictive_planner()
    return make_planner(presto, predictor=CutPredictor(), time_model=SyntheticClock())


def presto_sampler(
    engine: Engine, config: PowerConfig, presto: PrestoConfig, *, kernel: Kernel | None = None
) -> Sampler:
    """A ``Sampler`` with the :func:`stub_planner` of ``presto`` (and ``kernel``, if given)."""
    return Sampler(engine, config, presto, planner=stub_planner(presto), kernel=kernel)
