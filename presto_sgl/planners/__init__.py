"""Planners: which requests a round sends (docs/design.md §5). A planner is a rule x a budget
policy (:func:`presto_sgl.samplers.make_planner`, from a rule's entry in :mod:`presto_sgl.registry`):

* the rules, each ranking its batch (:meth:`Planner.ranked`): ``sequential`` -- the next
  decision only (PowerMH, paper Alg. 1): :mod:`.base`; ``bfs`` -- the paper's breadth-first
  rule: :mod:`.bfs`; ``predictive`` -- the paper's DP over predicted branch probabilities:
  :mod:`.predictive`; ``step`` -- one shared request per depth with carry-over: :mod:`.step`;
  :data:`SPECS` declares them to the registry;
* the budget: fixed (the rule alone) or ``cost_aware`` (:class:`.budget.CostAware`): the
  best predicted rate where rounds renew (:class:`.budget.RatePolicy`), a rollout where
  proposals carry over (:class:`.costaware.RolloutPolicy`).
"""

from __future__ import annotations

from ..predictor.certainty import Predictor
from .base import (
    PlannedRequest,
    Planner,
    PlanOffer,
    RoundContext,
    RoundFeedback,
    RuleSpec,
    SequentialPlanner,
)
from .bfs import BFSPlanner
from .budget import BudgetPolicy, CostAware, RatePolicy
from .costaware import RolloutPolicy
from .predictive import PredictivePlanner
from .step import StepPlanner
from .timemodel import CallTimeModel

__all__ = [
    "SPECS",
    "BFSPlanner",
    "BudgetPolicy",
    "CallTimeModel",
    "CostAware",
    "PlanOffer",
    "PlannedRequest",
    "Planner",
    "PredictivePlanner",
    "RatePolicy",
    "RolloutPolicy",
    "RoundContext",
    "RoundFeedback",
    "RuleSpec",
    "SequentialPlanner",
    "StepPlanner",
]


def _needs(predictor: Predictor | None) -> Predictor:
    if predictor is None:
        raise ValueError("the predictive rule needs a predictor")
    return predictor


SPECS = (
    RuleSpec("sequential", None, lambda p: SequentialPlanner(), "PowerMH, one model call per transition"),
    RuleSpec("bfs", "path", BFSPlanner, "the paper's breadth-first rule over the path-keyed tree"),
    RuleSpec(
        "predictive",
        "path",
        lambda p: PredictivePlanner(_needs(p)),
        "the paper's DP over predicted branch probabilities",
        predicts=True,
    ),
    RuleSpec(
        "step", "step", lambda p: StepPlanner(), "one shared request per depth, valid proposals carried over rounds"
    ),
)
"""The built-in rules, registered by :mod:`presto_sgl.registry` when it loads."""
