"""Planners: which requests a round sends (docs/design.md §5); :func:`make_planner` picks one.

* ``sequential`` -- the next decision only (PowerMH, paper Alg. 1): :mod:`.base`;
* ``bfs`` -- the paper's breadth-first rule: :mod:`.bfs`;
* ``predictive`` -- the paper's DP over predicted branch probabilities: :mod:`.predictive`;
* ``step`` -- one shared request per depth with carry-over: :mod:`.step`; with
  ``cost_aware`` the number per call by rollout: :mod:`.costaware`;
* ``bfs`` / ``predictive`` with ``cost_aware`` -- the budget of the best predicted
  transitions per second: :mod:`.pathcost`.
"""

from __future__ import annotations

from ..config import PrestoConfig
from ..predictor import load_predictor
from .base import Planner, PlannedRequest, RoundContext, RoundFeedback, SequentialPlanner
from .bfs import BFSPlanner
from .costaware import CostAwareStepPlanner
from .pathcost import CostAwarePathPlanner
from .predictive import PredictivePlanner
from .step import StepPlanner

__all__ = [
    "BFSPlanner",
    "CostAwarePathPlanner",
    "CostAwareStepPlanner",
    "PlannedRequest",
    "Planner",
    "PredictivePlanner",
    "RoundContext",
    "RoundFeedback",
    "SequentialPlanner",
    "StepPlanner",
    "make_planner",
]


def make_planner(presto: PrestoConfig) -> Planner:
    """The planner of ``presto.rule`` (predictor-driven rules load their predictor)."""
    if presto.rule == "sequential":
        return SequentialPlanner()
    if presto.cost_aware and presto.rule in ("bfs", "predictive"):
        return CostAwarePathPlanner(presto.rule, load_predictor(presto.predictor, online=presto.online))
    if presto.rule == "bfs":
        return BFSPlanner()
    if presto.rule == "predictive":
        return PredictivePlanner(load_predictor(presto.predictor, online=presto.online))
    if not presto.cost_aware:  # rule "step"
        return StepPlanner()
    return CostAwareStepPlanner(load_predictor(presto.predictor, online=presto.online))
