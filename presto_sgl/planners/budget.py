"""Budget policies: how many of a rule's requests a call sends (docs/design.md §5).

A rule (bfs, predictive, step or any registered one) ranks its batch of up to N = budget
requests: an order whose every prefix is a valid batch, with V(n), the predicted
proposals used of the first n, when the rule can value them (:meth:`Planner.ranked`). A
budget policy picks the prefix n, and a planner is a rule x a policy:

* **fixed**: the whole batch; the rule's own planner (no wrapper);
* **cost-aware** (:class:`CostAware`): n* from a call-time model (:class:`CallTimeModel`,
  shared by every run of a sampler, or the shared scheduler's),

  - :class:`RatePolicy` where rounds renew (nothing carries over: path keys): by the
    renewal-reward theorem the stage finishes fastest when each round maximizes its
    expected transitions per second, n* = argmax_n V(n) / t(rows of the first n); n = 1 is
    sequential PowerMH's rate (V(1) = 1), so under the model no call is slower per
    transition than sequential;
  - :class:`~.costaware.RolloutPolicy` where proposals carry over (step keys): n* by a
    rollout of the rest of the stage.

:func:`~presto_sgl.samplers.make_planner` composes them from a PrestoConfig (``cost_aware``), so a new
rule that ranks its batch gets both budgets with no new class. The first calls of a
cost-aware policy explore fixed fractions of N (:data:`EXPLORE`) so that the time model sees
different row counts. A policy reads only cuts, the predictor and call times, never a
proposal's content, so the chain stays exact.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Protocol

from ..predictor.certainty import Predictor
from .base import PlannedRequest, Planner, PlanOffer, RoundContext, RoundFeedback
from .timemodel import EXPLORE, CallTimeModel


class BudgetPolicy(Protocol):
    """Picks how many of a ranked batch a call sends, from a call-time model."""

    time_model: CallTimeModel

    def for_run(self) -> BudgetPolicy:
        """The policy of one chain's run (shares what is learned across runs)."""
        ...

    def choose(self, ctx: RoundContext, ranked: PlanOffer) -> int:
        """n: the prefix of ``ranked.batch`` the call sends (0 for an empty batch)."""
        ...

    def values(self, ctx: RoundContext, ranked: PlanOffer) -> tuple[float, ...] | None:
        """V(n) of ``ranked`` for a shared scheduler: the rule's, or the policy's own model of them."""
        ...

    def observe(self, feedback: RoundFeedback) -> None:
        """Learn from the round's call (its time, what it realized)."""
        ...


def rows(ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[int]:
    """New tokens of every row the batch sends (a kernel may send several draws per request)."""
    T = ctx.root.length
    out: list[int] = []
    for p in batch:
        out += [T - p.cut] * len(ctx.kernel.suffix_draws(p.cut, T, ctx.draws(p.decision)))
    return out


def explored(calls: int, explore: Sequence[float], budget: int) -> int | None:
    """The exploration size of the ``calls``-th call, n = max(1, ceil(f N)), or None once explored."""
    return max(1, math.ceil(explore[calls] * budget)) if calls < len(explore) else None


class RatePolicy:
    """n* = argmax_n V(n) / t(rows of the first n), the smallest n among ties (module docstring)."""

    def __init__(self, time_model: CallTimeModel | None = None, explore: Sequence[float] = EXPLORE) -> None:
        self.time_model = time_model if time_model is not None else CallTimeModel()
        self.explore = tuple(explore)

    def for_run(self) -> RatePolicy:
        return self  # no round state

    def choose(self, ctx: RoundContext, ranked: PlanOffer) -> int:
        batch, values = ranked.batch, ranked.values
        if not batch:
            return 0
        if values is None:
            raise ValueError("a rate budget needs a rule that values its batch (Planner.ranked gave no values)")
        n = explored(self.time_model.calls, self.explore, ctx.budget)
        if n is not None:
            return min(len(batch), n)
        rates = [values[i] / self.time_model.predict(rows(ctx, batch[: i + 1])) for i in range(len(batch))]
        return max(range(len(batch)), key=lambda i: (rates[i], -i)) + 1

    def values(self, ctx: RoundContext, ranked: PlanOffer) -> tuple[float, ...] | None:
        return ranked.values

    def observe(self, feedback: RoundFeedback) -> None:
        """Refit the time model on the call."""
        if feedback.requests and feedback.timed:
            self.time_model.observe([new for _, new in feedback.requests], feedback.time_s)


class CostAware:
    """The planner of ``rule`` with a cost-aware budget ``policy``: each call sends the prefix
    of the rule's ranked batch the policy picks; a shared scheduler is offered the whole
    ranked batch, its values and that pick."""

    def __init__(self, rule: Planner, policy: BudgetPolicy, predictor: Predictor | None = None) -> None:
        self.rule = rule
        self.policy = policy
        self.predictor = predictor  # what the rule and the policy learn with (reporting; None: not said)
        self.keying = rule.keying
        self.carries_over = rule.carries_over

    @property
    def time_model(self) -> CallTimeModel:
        return self.policy.time_model

    def use_time_model(self, model: CallTimeModel) -> None:
        self.policy.time_model = model

    def for_run(self) -> CostAware:
        run = copy.copy(self)
        run.rule, run.policy = self.rule.for_run(), self.policy.for_run()
        return run

    def ranked(self, ctx: RoundContext) -> PlanOffer:
        return self.rule.ranked(ctx)

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        ranked = self.rule.ranked(ctx)
        return ranked.batch[: self.policy.choose(ctx, ranked)]

    def offer(self, ctx: RoundContext) -> PlanOffer:
        ranked = self.rule.ranked(ctx)
        n = self.policy.choose(ctx, ranked)
        if not ranked.batch:
            return PlanOffer([])
        return PlanOffer(ranked.batch, self.policy.values(ctx, ranked), n)

    def observe(self, feedback: RoundFeedback) -> None:
        self.policy.observe(feedback)
        self.rule.observe(feedback)
