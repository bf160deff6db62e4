"""Planners: which requests a round sends (docs/design.md §5); a rule's entry in
:mod:`presto_sgl.registry` picks one (:func:`presto_sgl.registry.make_planner`).

* ``sequential`` -- the next decision only (PowerMH, paper Alg. 1): :mod:`.base`;
* ``bfs`` -- the paper's breadth-first rule: :mod:`.bfs`;
* ``predictive`` -- the paper's DP over predicted branch probabilities: :mod:`.predictive`;
* ``step`` -- one shared request per depth with carry-over: :mod:`.step`; with
  ``cost_aware`` the number per call by rollout: :mod:`.costaware`;
* ``bfs`` / ``predictive`` with ``cost_aware`` -- the budget of the best predicted
  transitions per second: :mod:`.pathcost`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import PrestoConfig
from ..registry import RuleSpec, register_rule
from .base import PlannedRequest, Planner, PlanOffer, RoundContext, RoundFeedback, SequentialPlanner
from .bfs import BFSPlanner
from .costaware import CostAwareStepPlanner
from .pathcost import CostAwarePathPlanner
from .predictive import PredictivePlanner
from .step import StepPlanner

if TYPE_CHECKING:
    from ..predictor.certainty import Predictor

__all__ = [
    "BFSPlanner",
    "CostAwarePathPlanner",
    "CostAwareStepPlanner",
    "PlanOffer",
    "PlannedRequest",
    "Planner",
    "PredictivePlanner",
    "RoundContext",
    "RoundFeedback",
    "SequentialPlanner",
    "StepPlanner",
]


def _predictor(presto: PrestoConfig) -> Predictor:
    from ..predictor import load_predictor

    return load_predictor(presto.predictor, online=presto.online)


def _bfs(presto: PrestoConfig) -> Planner:
    return CostAwarePathPlanner("bfs", _predictor(presto)) if presto.cost_aware else BFSPlanner()


def _predictive(presto: PrestoConfig) -> Planner:
    return (
        CostAwarePathPlanner("predictive", _predictor(presto))
        if presto.cost_aware
        else PredictivePlanner(_predictor(presto))
    )


def _step(presto: PrestoConfig) -> Planner:
    return CostAwareStepPlanner(_predictor(presto)) if presto.cost_aware else StepPlanner()


register_rule(
    RuleSpec("sequential", None, lambda presto: SequentialPlanner(), "PowerMH, one model call per transition")
)
register_rule(RuleSpec("bfs", "path", _bfs, "the paper's breadth-first rule over the path-keyed tree"))
register_rule(RuleSpec("predictive", "path", _predictive, "the paper's DP over predicted branch probabilities"))
register_rule(RuleSpec("step", "step", _step, "one shared request per depth, valid proposals carried over rounds"))
