"""Test helpers for the cost-aware step planner: a synthetic clock, so that runs on the
reference engine choose their batch sizes deterministically, and a sampler factory."""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

from tests.support import predictors as stub_predictors
from tests.support.predictors import CutPredictor

from presto_sgl import PowerConfig, PrestoConfig, PrestoPowerMH
from presto_sgl.costaware import CallTimeModel, CostAwareStepPlanner
from presto_sgl.engines.base import Engine

CPU_LAW = (0.02, 0.005, 0.06, 0.006)
"""Seconds per (call, row, decode step, decoded token): a CPU-like engine (DESIGN §6)."""


def law_time(new_tokens: Sequence[int], law: Sequence[float] = CPU_LAW) -> float:
    """The synthetic call time of requests with these new-token counts."""
    return float(CallTimeModel.features(new_tokens) @ law)


class SyntheticClock(CallTimeModel):
    """A time model fed :func:`law_time` instead of the measured wall time."""

    def observe(self, new_tokens: Sequence[int], time_s: float) -> None:
        super().observe(new_tokens, law_time(new_tokens))


def presto_sampler(engine: Engine, config: PowerConfig, presto: PrestoConfig) -> PrestoPowerMH:
    """``stub_predictors.presto_sampler``; with ``cost_aware`` the planner uses a fresh
    :class:`CutPredictor` and a :class:`SyntheticClock`."""
    if not presto.cost_aware:
        return stub_predictors.presto_sampler(engine, config, presto)
    planner = CostAwareStepPlanner(CutPredictor(), SyntheticClock())
    with mock.patch("presto_sgl.samplers.make_planner", lambda _: planner):
        return PrestoPowerMH(engine, config, presto)
