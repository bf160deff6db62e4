"""Planners: which requests a round sends (docs/design.md §5). A planner is a rule x a budget
policy (:func:`.budget.make_planner`, from a rule's entry in :mod:`presto_sgl.registry`):

* the rules, each ranking its batch (:meth:`Planner.ranked`): ``sequential`` -- the next
  decision only (PowerMH, paper Alg. 1): :mod:`.base`; ``bfs`` -- the paper's breadth-first
  rule: :mod:`.bfs`; ``predictive`` -- the paper's DP over predicted branch probabilities:
  :mod:`.predictive`; ``step`` -- one shared request per depth with carry-over: :mod:`.step`;
* the budget: fixed (the rule alone) or ``cost_aware`` (:class:`.budget.CostAware`): the
  best predicted rate where rounds renew (:class:`.budget.RatePolicy`), a rollout where
  proposals carry over (:class:`.costaware.RolloutPolicy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import registry
from ..config import PrestoConfig
from ..registry import RuleSpec, builtin
from .base import PlannedRequest, Planner, PlanOffer, RoundContext, RoundFeedback, SequentialPlanner
from .bfs import BFSPlanner
from .budget import BudgetPolicy, CostAware, RatePolicy
from .costaware import RolloutPolicy
from .predictive import PredictivePlanner
from .step import StepPlanner
from .timemodel import CallTimeModel

if TYPE_CHECKING:
    from ..predictor.certainty import Predictor

__all__ = [
    "BFSPlanner",
    "BudgetPolicy",
    "CostAware",
    "PlanOffer",
    "PlannedRequest",
    "Planner",
    "PredictivePlanner",
    "RatePolicy",
    "RolloutPolicy",
    "RoundContext",
    "RoundFeedback",
    "SequentialPlanner",
    "StepPlanner",
    "make_planner",
]


def make_planner(
    presto: PrestoConfig, *, predictor: Predictor | None = None, time_model: CallTimeModel | None = None
) -> Planner:
    """The planner of ``presto``: its rule (:mod:`presto_sgl.registry`) with a fixed budget, or
    with ``cost_aware`` a :class:`CostAware` one: a rollout where the rule's proposals carry
    over, else the best rate. ``predictor`` (default: the config's, loaded) is shared by the
    rule and the policy (a rule that needs none with a fixed budget gets none); ``time_model``
    (default: a fresh one) is the policy's."""
    from ..predictor import load_predictor

    spec = registry.RULES[presto.rule]
    if not (presto.cost_aware or spec.predicts):
        return spec.planner(None)  # type: ignore[no-any-return]  # a RuleSpec's factory makes a Planner
    if predictor is None:
        predictor = load_predictor(presto.predictor, online=presto.online)
    rule: Planner = spec.planner(predictor)
    if not presto.cost_aware:
        return rule
    policy: BudgetPolicy = RolloutPolicy(predictor, time_model) if rule.carries_over else RatePolicy(time_model)
    return CostAware(rule, policy, predictor)


def _needs(predictor: Predictor | None) -> Predictor:
    if predictor is None:
        raise ValueError("the predictive rule needs a predictor")
    return predictor


builtin(RuleSpec("sequential", None, lambda p: SequentialPlanner(), "PowerMH, one model call per transition"))
builtin(RuleSpec("bfs", "path", BFSPlanner, "the paper's breadth-first rule over the path-keyed tree"))
builtin(
    RuleSpec(
        "predictive",
        "path",
        lambda p: PredictivePlanner(_needs(p)),
        "the paper's DP over predicted branch probabilities",
        predicts=True,
    )
)
builtin(
    RuleSpec(
        "step", "step", lambda p: StepPlanner(), "one shared request per depth, valid proposals carried over rounds"
    )
)
