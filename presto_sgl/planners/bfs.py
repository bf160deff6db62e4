"""The paper's breadth-first rule (§3.2) over the path-keyed tree, quirk included.

Root cut T; expanding node v forms the request of its decision; it is feasible iff the
kernel's cut for v is decided by, and within, the tokens v's state keeps from the root
(for PowerMH: c_v <= the cut that produced v's state; Condition 1). Feasible: add it and
enqueue the accept child. Infeasible: defer (the cut is kept: it is keyed). The reject
child is enqueued either way -- the paper's quirk: requests below a deferred node are
issued but unreachable in this batch. Depth cap K - k, budget N_pf.

Ranked (for a cost-aware budget, :mod:`.budget`): every prefix of the BFS order is the rule
at a smaller budget, and with a predictor V(n) sums the reaching weights R(v) of the first n
(Eq. 11, from the predictor's h+: the product of h+ / h- along the bits below the round's
root; 0 below a deferred node, which the walk cannot reach in this batch).
"""

from __future__ import annotations

import itertools
from collections import deque

from ..chain.keys import DecisionId, Keying
from ..predictor.certainty import Predictor, h_plus
from .base import PlannedRequest, PlanOffer, RoundContext, RoundFeedback, Stateless


class BFSPlanner(Stateless):
    """Breadth-first requests of the path-keyed tree, up to the budget; with a ``predictor``
    its ranked batch carries the predicted transitions V(n) (and the predictor learns from
    the realized decisions)."""

    keying: Keying | None = "path"
    carries_over = False

    def __init__(self, predictor: Predictor | None = None) -> None:
        self.predictor = predictor

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        T = ctx.root.length
        depth0 = len(ctx.root_path)
        # (node path, tokens its state keeps from the root, reachable in this batch)
        queue: deque[tuple[str, int, bool]] = deque([(ctx.root_path, T, True)])
        batch: list[PlannedRequest] = []
        while queue and len(batch) < ctx.budget:
            path, shared, reachable = queue.popleft()
            if len(path) - depth0 >= ctx.remaining:
                continue
            cut = ctx.cut(path, shared)
            if cut is not None:
                batch.append(PlannedRequest(path, cut, reachable))
                queue.append((path + "1", cut, reachable))
            queue.append((path + "0", shared, reachable and cut is not None))
        return batch

    def ranked(self, ctx: RoundContext) -> PlanOffer:
        batch = self.plan(ctx)
        if self.predictor is None:
            return PlanOffer(batch)
        cuts = {p.decision: p.cut for p in batch}
        depth0, T = len(ctx.root_path), ctx.root.length
        reach = [_reach(str(p.decision), cuts, depth0, T, self.predictor) if p.reachable else 0.0 for p in batch]
        return PlanOffer(batch, tuple(itertools.accumulate(reach)))

    def observe(self, feedback: RoundFeedback) -> None:
        if self.predictor is not None:
            self.predictor.observe(feedback.observations())


def _reach(path: str, cuts: dict[DecisionId, int], depth0: int, T: int, predictor: Predictor) -> float:
    """R(v) of a reachable node: the product of h+ / h- along the bits below the round's root."""
    weight = 1.0
    for i in range(depth0, len(path)):
        h = h_plus(predictor, cuts[path[:i]] / T)
        weight *= h if path[i] == "1" else 1.0 - h
    return weight
