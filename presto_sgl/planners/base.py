"""What every planner shares: the round it plans, the requests it returns, the feedback.

A planner decides which decisions' draws a PreSTO round sends (not which path MH
takes: that is the walker's). Every request's prefix is a prefix of the round's root
(Condition 1, decided by the kernel's :meth:`~presto_sgl.kernels.base.Kernel.prefetch_cut`),
so a batch is a set of forks of one sequence (docs/design.md §5).

A planner object is what a sampler holds; :meth:`Planner.for_run` gives the planner of
one chain's run. Round state (what the previous round of this chain looked like) lives
in the per-run object; what is learned across chains (an online predictor, a call-time
model) is shared on purpose and guarded by locks, so chains may run on several threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Protocol, Self

from ..chain.keys import DecisionDraws, DecisionId, Keying
from ..chain.state import ChainState
from ..kernels.base import Kernel
from ..kernels.proposals import ProposalStore
from ..predictor.certainty import Observation, Predictor, certainty_class
from .timemodel import CallTimeModel


@dataclass(frozen=True)
class PlannedRequest:
    decision: DecisionId
    cut: int
    reachable: bool = True  # False: below a deferred node (BFS quirk)


@dataclass(frozen=True)
class PlanOffer:
    """What a round could send, for a shared scheduler (:mod:`presto_sgl.scheduling.scheduler`): the
    planner's full batch in an order whose every prefix is a valid batch (the first is the
    decision the walk needs next), ``values[n-1]`` the predicted proposals used of the first
    n (None: no prediction), ``preferred`` the n the planner picks alone."""

    batch: list[PlannedRequest]
    values: tuple[float, ...] | None = None
    preferred: int | None = None


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
    _: KW_ONLY
    timed: bool = True  # False: the call was a shared scheduler's merged call (it fits the time model)

    def observations(self) -> list[Observation]:
        """The realized decisions as a predictor sees them: (c/T, eps-certainty class)."""
        return [Observation(cut / self.length, certainty_class(log_a)) for cut, log_a in self.decisions]


@dataclass(frozen=True)
class RoundContext:
    root: ChainState
    root_path: str  # accept ("1") / reject ("0") bits from the stage start to the root
    k0: int  # transitions already done in this stage
    remaining: int  # K - k0: the depth cap
    _: KW_ONLY
    budget: int  # N_pf
    draws: Callable[[DecisionId], DecisionDraws]
    store: ProposalStore
    kernel: Kernel
    keying: Keying
    horizon: int | None = None  # H: a request at cut c draws at most H - c tokens (None: the root's length)

    @property
    def ends(self) -> bool:
        """ending="eos": a draw runs to its own stop token (at most ``horizon`` - cut tokens)."""
        return self.kernel.ends

    def decision(self, path: str, k: int) -> DecisionId:
        """The identity of the decision at the node with ``path`` and depth ``k`` in the stage."""
        return path if self.keying == "path" else k

    def cut(self, decision: DecisionId, shared: int | None = None) -> int | None:
        """The cut of ``decision`` at a node whose state keeps the root's first ``shared``
        tokens (default: the root itself), or None when it cannot be requested in this
        batch (Condition 1 fails: the decision is deferred)."""
        T = self.root.length
        return self.kernel.prefetch_cut(self.root, T if shared is None else shared, self.draws(decision))

    def root_cut(self, decision: DecisionId) -> int:
        """The cut of ``decision`` at the root (always decided: the root is fully known)."""
        cut = self.cut(decision)
        assert cut is not None, "a kernel's cut at the root itself is always known"
        return cut


class Planner(Protocol):
    keying: Keying | None  # the keys the rule couples with (None: either)
    carries_over: bool  # proposals stay valid across rounds (step keys)

    @property
    def time_model(self) -> CallTimeModel | None:
        """The call-time model a cost-aware planner plans on (None: the rule ignores call times)."""
        ...

    def use_time_model(self, model: CallTimeModel) -> None:
        """Plan on ``model`` from now on (a shared scheduler's, fitted on its merged calls:
        :meth:`Scheduler.adopt`); a planner that ignores call times ignores it."""
        ...

    def for_run(self) -> Planner:
        """The planner of one chain's run (shares what is learned across runs)."""
        ...

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]: ...

    def ranked(self, ctx: RoundContext) -> PlanOffer:
        """The rule's batch (up to the budget) in an order whose every prefix is a valid batch,
        with V(n) when the rule values it: what a budget policy cuts (:mod:`.budget`)."""
        ...

    def offer(self, ctx: RoundContext) -> PlanOffer:
        """What the round could send, for a shared scheduler: a fixed budget offers its plan
        whole, with no values (:class:`Stateless`); a cost-aware one its ranked batch, values
        and pick (:class:`~.budget.CostAware`)."""
        ...

    def observe(self, feedback: RoundFeedback) -> None: ...


@dataclass(frozen=True)
class RuleSpec:
    """A rule's registry entry (:mod:`presto_sgl.registry`): its name, the keys it couples with
    (None: either; docs/design.md §4), its planner with a fixed budget made from a predictor
    (None unless the rule ``predicts`` or the budget is cost-aware), and one line of help."""

    name: str
    keying: Keying | None
    planner: Callable[[Predictor | None], Planner]
    doc: str
    _: KW_ONLY
    predicts: bool = False  # the rule needs a predictor with a fixed budget too (a cost-aware budget always has one)


class Stateless:
    """Mixin of planners without round state: one object serves every run (``observe`` is a
    no-op unless the planner learns, thread-safely, from realized decisions); no call-time
    model, and the plan offered whole."""

    time_model: CallTimeModel | None = None

    def for_run(self) -> Self:
        return self

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        raise NotImplementedError

    def ranked(self, ctx: RoundContext) -> PlanOffer:
        return PlanOffer(self.plan(ctx))

    def offer(self, ctx: RoundContext) -> PlanOffer:
        return PlanOffer(self.plan(ctx))

    def use_time_model(self, model: CallTimeModel) -> None:
        if self.time_model is not None:
            self.time_model = model

    def observe(self, feedback: RoundFeedback) -> None:
        return None


class SequentialPlanner(Stateless):
    """Sequential PowerMH (paper Alg. 1) as a plan: the next decision only, one per call."""

    keying: Keying | None = None
    carries_over = False

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        decision = ctx.decision(ctx.root_path, ctx.k0)
        return [PlannedRequest(decision, ctx.root_cut(decision))]
