"""Test predictors for the predictive and cost-aware rules.

No trained predictor is needed: :class:`CutPredictor` depends on the cut fraction and
refits on what it observes, so the exactness suites also cover an online predictor
whose planning changes as the chain runs. It is thread-safe (one sampler may run many
chains at once and share it, like the library's online predictor).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from presto_sgl.planners import PredictivePlanner
from presto_sgl.predictor.certainty import Observation


class CutPredictor:
    """P(accept) = 0.7 f, P(reject) = 0.7 (1 - f) at cut fraction f, shrunk toward the
    observed class shares as observations arrive (weight n / (n + 10))."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.observations: list[Observation] = []
        self.counts = [0, 0, 0]

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        base = (0.7 * (1.0 - cut_fraction), 0.3, 0.7 * cut_fraction)
        with self._lock:
            n, counts = len(self.observations), tuple(self.counts)
        w = n / (n + 10.0)
        return tuple((1.0 - w) * b + w * (c / n if n else 0.0) for b, c in zip(base, counts))  # type: ignore[return-value]  # three classes, three probabilities

    def observe(self, observations: Sequence[Observation]) -> None:
        with self._lock:
            for o in observations:
                self.observations.append(o)
                self.counts[o.label] += 1


def predictive_planner() -> PredictivePlanner:
    """The predictive rule's planner on a fresh :class:`CutPredictor` (online, cut-dependent)."""
    return PredictivePlanner(CutPredictor())
