"""Cost-aware budget for the path-keyed rules (bfs, predictive): requests per call by rate.

With path keys nothing carries over between rounds (a proposal is keyed by its node, and
the next round starts at a new node), so rounds renew, and by the renewal-reward theorem
the stage finishes fastest when each round maximizes its expected transitions per second:

    b* = argmax_{1 <= b <= N} E_b / t(rows of the rule's batch at budget b),

where E_b is the rule's own predicted number of transitions at budget b and t the shared
:class:`~presto_sgl.planners.timemodel.CallTimeModel` (rows: every draw of every request,
each with its T - c new tokens). b = 1 is sequential PowerMH's rate (E_1 = 1), so under
the model no call is slower per transition than sequential.

- bfs: the batch at budget b is the first b requests of the budget-N batch (BFS order);
  E_b = sum of their reaching weights R(v) (Eq. 11, from the predictor's h+; 0 below a
  deferred node, which the walk cannot reach in this batch).
- predictive: E_b = V(root, b) of Eq. 19 and the batch its optimal selection.

The first calls explore fixed fractions of N (as the step rule's cost-aware planner), so
that the time model sees different row counts. Planning reads only cuts, the predictor
and call times, never a proposal's content, so the chain stays exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ..config import Keying
from ..keys import DecisionId
from ..predictor.certainty import Predictor, h_plus
from .base import PlannedRequest, PlanOffer, RoundContext, RoundFeedback, Stateless
from .bfs import BFSPlanner
from .predictive import allocate, candidate_tree
from .timemodel import EXPLORE, CallTimeModel

RULES = ("bfs", "predictive")


class CostAwarePathPlanner(Stateless):
    """``rule`` ("bfs" or "predictive") sending the b* requests of the best predicted rate."""

    keying: Keying | None = "path"
    carries_over = False
    time_model: CallTimeModel

    def __init__(
        self,
        rule: str,
        predictor: Predictor,
        time_model: CallTimeModel | None = None,
        explore: Sequence[float] = EXPLORE,
    ) -> None:
        if rule not in RULES:
            raise ValueError(f"`rule` (={rule!r}) must be one of {RULES}")
        self.rule = rule
        self.predictor = predictor
        self.time_model = time_model if time_model is not None else CallTimeModel()
        self.explore = tuple(explore)

    def options(self, ctx: RoundContext) -> list[tuple[float, list[PlannedRequest]]]:
        """(E_b, batch at budget b) for b = 1..N (fewer when the tree has fewer candidates)."""
        T = ctx.root.length
        if self.rule == "predictive":
            nodes = candidate_tree(ctx, self.predictor, ctx.budget)
            out = []
            for b in range(1, len(nodes) + 1):
                value, selection = allocate(nodes, b)
                out.append((value, [PlannedRequest(v.path, v.cut) for v in selection]))
            return out
        full = BFSPlanner().plan(ctx)
        cuts = {p.decision: p.cut for p in full}
        total, out = 0.0, []
        for i, p in enumerate(full):
            total += _reach(p, cuts, len(ctx.root_path), T, self.predictor) if p.reachable else 0.0
            out.append((total, full[: i + 1]))
        return out

    def rows(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[int]:
        """New tokens of every row the batch sends (a kernel may send several draws per request)."""
        T = ctx.root.length
        out: list[int] = []
        for p in batch:
            out += [T - p.cut] * len(ctx.kernel.suffix_draws(p.cut, T, ctx.draws(p.decision)))
        return out

    def _choice(self, ctx: RoundContext, options: list[tuple[float, list[PlannedRequest]]]) -> int:
        """Index of the option sent: an exploration fraction during the first calls, else b*."""
        calls = self.time_model.calls
        if calls < len(self.explore):
            return min(len(options), max(1, math.ceil(self.explore[calls] * ctx.budget))) - 1
        rates = [value / self.time_model.predict(self.rows(ctx, batch)) for value, batch in options]
        return max(range(len(options)), key=lambda i: (rates[i], -i))

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        options = self.options(ctx)
        return options[self._choice(ctx, options)][1] if options else []

    def offer(self, ctx: RoundContext) -> PlanOffer:
        """The budget-N batch in an order whose prefixes are optimal (BFS order; for
        predictive the heaviest candidates best-first, an optimal selection of every size:
        see :mod:`.predictive`), V(n) their summed weights, and b*."""
        options = self.options(ctx)
        if not options:
            return PlanOffer([])
        if self.rule == "bfs":
            batch, values = options[-1][1], tuple(v for v, _ in options)
        else:
            nodes = candidate_tree(ctx, self.predictor, ctx.budget)
            batch = [PlannedRequest(v.path, v.cut) for v in nodes]
            values = tuple(itertools.accumulate(v.weight for v in nodes))
        return PlanOffer(batch, values, self._choice(ctx, options) + 1)

    def observe(self, feedback: RoundFeedback) -> None:
        """Refit the time model on the call; pass the realized decisions to the predictor."""
        if feedback.requests and feedback.timed:
            self.time_model.observe([new for _, new in feedback.requests], feedback.time_s)
        self.predictor.observe(feedback.observations())


def _reach(p: PlannedRequest, cuts: dict[DecisionId, int], depth0: int, T: int, predictor: Predictor) -> float:
    """R(v) of a reachable BFS node: the product of h+ / h- along the bits below the round's root."""
    path = str(p.decision)
    weight = 1.0
    for i in range(depth0, len(path)):
        h = h_plus(predictor, cuts[path[:i]] / T)
        weight *= h if path[i] == "1" else 1.0 - h
    return weight
