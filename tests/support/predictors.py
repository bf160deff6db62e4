"""Test predictors for the predictive rule, and a PreSTO sampler factory that uses them.

No trained predictor is needed: :class:`CutPredictor` depends on the cut fraction and
refits on what it observes, so the exactness suites also cover an online predictor.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

from presto_sgl import PowerConfig, PrestoConfig, PrestoPowerMH
from presto_sgl.predictor.certainty import Observation
from presto_sgl.engines.base import Engine
from presto_sgl.planners.predictive import PredictivePlanner


class CutPredictor:
    """P(accept) = 0.7 f, P(reject) = 0.7 (1 - f) at cut fraction f, shrunk toward the
    observed class shares as observations arrive (weight n / (n + 10))."""

    def __init__(self) -> None:
        self.observations: list[Observation] = []
        self.counts = [0, 0, 0]

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        base = (0.7 * (1.0 - cut_fraction), 0.3, 0.7 * cut_fraction)
        n = len(self.observations)
        w = n / (n + 10.0)
        return tuple((1.0 - w) * b + w * (c / n if n else 0.0) for b, c in zip(base, self.counts))

    def observe(self, observations: Sequence[Observation]) -> None:
        for o in observations:
            self.observations.append(o)
            self.counts[o.label] += 1


def presto_sampler(engine: Engine, config: PowerConfig, presto: PrestoConfig) -> PrestoPowerMH:
    """``PrestoPowerMH``; rule "predictive" plans with a fresh :class:`CutPredictor`."""
    if presto.rule != "predictive":
        return PrestoPowerMH(engine, config, presto)
    with mock.patch("presto_sgl.samplers.make_planner", lambda _: PredictivePlanner(CutPredictor())):
        return PrestoPowerMH(engine, config, presto)
