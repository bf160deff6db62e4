"""Planners: which suffix requests a PreSTO round sends (not which path MH takes).

Every rule sees the round's root state and returns requests whose prefixes are
prefixes of the root (DESIGN §2). Here the two rules without a predictor; the
predictive rule (paper Eq. 19) is :mod:`presto_sgl.predictive` and the cost-aware step
budget :mod:`presto_sgl.costaware`; :func:`make_planner` picks one from the config.

* :class:`BFSPlanner` -- the paper's default (§3.2) over the path-keyed tree. Root cut
  T; expanding node v forms the request of its decision with cut c_v; it is feasible
  iff c_v <= the cut that produced v's state (Condition 1). Feasible: add it and
  enqueue the accept child. Infeasible: defer (the cut is kept: it is keyed). The
  reject child is enqueued either way -- the paper's quirk: requests below a deferred
  node are issued but unreachable in this batch. Depth cap K - k, budget N_pf.
* :class:`StepPlanner` -- step keys: every node at depth d shares decision k0 + d, its
  cut and its proposal, so one request root[0:c_k] + suffix serves every node at that
  depth whose state still starts with root[0:c_k]. Proposals still valid from earlier
  rounds are carried over instead of regenerated.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .certainty import Observation, certainty_class
from .config import Keying, PrestoConfig
from .keys import DecisionDraws
from .proposals import DecisionId, ProposalStore
from .state import ChainState


@dataclass(frozen=True)
class PlannedRequest:
    decision: DecisionId
    cut: int
    reachable: bool = True  # False: below a deferred node (BFS quirk)


@dataclass(frozen=True)
class RoundFeedback:
    """What a round taught the planner: the realized decisions and the call's cost.

    Only realized decisions appear (never an unused proposal's content), so a planner
    that adapts to feedback keeps the chain exact.
    """

    length: int  # T, response tokens of the stage
    decisions: tuple[tuple[int, float], ...]  # (cut, log A) of each transition walked
    requests: tuple[tuple[int, int], ...]  # (prefix length, new tokens) of each request sent
    time_s: float  # wall time of the engine call (0 when no request was sent)

    def observations(self) -> list[Observation]:
        """The realized decisions as a predictor sees them: (c/T, eps-certainty class)."""
        return [Observation(cut / self.length, certainty_class(log_a)) for cut, log_a in self.decisions]


@dataclass(frozen=True)
class RoundContext:
    root: ChainState
    root_path: str  # accept ("1") / reject ("0") bits from the stage start to the root
    k0: int  # transitions already done in this stage
    remaining: int  # K - k0: the depth cap
    budget: int  # N_pf
    draws: Callable[[DecisionId], DecisionDraws]
    store: ProposalStore


class Planner(Protocol):
    keying: Keying
    carries_over: bool

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]: ...

    def observe(self, feedback: RoundFeedback) -> None: ...


class BFSPlanner:
    """The paper's breadth-first rule, quirk included."""

    keying: Keying = "path"
    carries_over = False

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        T = ctx.root.length
        depth0 = len(ctx.root_path)
        # (node path, cut that produced the node's state, reachable in this batch)
        queue: deque[tuple[str, int, bool]] = deque([(ctx.root_path, T, True)])
        batch: list[PlannedRequest] = []
        while queue and len(batch) < ctx.budget:
            path, state_cut, reachable = queue.popleft()
            if len(path) - depth0 >= ctx.remaining:
                continue
            cut = ctx.draws(path).cut(T)
            feasible = cut <= state_cut
            if feasible:
                batch.append(PlannedRequest(path, cut, reachable))
                queue.append((path + "1", cut, reachable))
            queue.append((path + "0", state_cut, reachable and feasible))
        return batch

    def observe(self, feedback: RoundFeedback) -> None:
        return None


class StepPlanner:
    """One shared request per depth from the root prefix, with carry-over."""

    keying: Keying = "step"
    carries_over = True

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        T = ctx.root.length
        batch: list[PlannedRequest] = []
        for k in range(ctx.k0, ctx.k0 + ctx.remaining):
            if len(batch) >= ctx.budget:
                break
            cut = ctx.draws(k).cut(T)
            if ctx.store.find(k, ctx.root.tokens, cut) is None:
                batch.append(PlannedRequest(k, cut))
        return batch

    def observe(self, feedback: RoundFeedback) -> None:
        return None


def make_planner(presto: PrestoConfig) -> Planner:
    """The planner of ``presto.rule`` (predictor-driven rules load their predictor)."""
    if presto.rule == "bfs":
        return BFSPlanner()
    if presto.rule == "predictive":
        from .predictive import PredictivePlanner
        from .predictor import load_predictor

        return PredictivePlanner(load_predictor(presto.predictor, online=presto.online))
    if not presto.cost_aware:  # rule "step" (the config allows cost_aware with "step" only)
        return StepPlanner()
    from .costaware import CostAwareStepPlanner
    from .predictor import load_predictor

    return CostAwareStepPlanner(load_predictor(presto.predictor, online=presto.online))
