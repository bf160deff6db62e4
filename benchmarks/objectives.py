"""The cost-aware planner's retired objectives, kept for benchmarks/cost_aware_sim.py.

The library's :class:`~presto_sgl.planners.costaware.CostAwareStepPlanner` chooses the
number n* of step-rule requests per call by rollout only. :class:`ObjectivePlanner` adds
back the two objectives it was compared with (measured in benchmarks/RESULTS.md: both
stay below the best fixed budget on laws A and C):

* ``rollout`` (default): the library's choice, unchanged;
* ``renewal``: n* = argmax_n sum_{i<n} u_i - lambda t(n), u_i = P(request i is ever
  used) (:func:`ever_used`, no token matches), lambda = the measured transitions per
  second of call time over every run of the sampler (0 before any call);
* ``myopic``: n* = argmax_n E(n) / t(n), E(n) this round's expected transitions
  (:meth:`ObjectivePlanner.expected_transitions`, from :func:`transition_probabilities`).

All three explore the same fixed fractions of N during the first calls. Like the
library's, planning reads only the root, the keyed cuts, the store's prefixes, realized
decisions and call times, so the chain stays exact whatever the objective.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Sequence

from presto_sgl.planners.base import PlannedRequest, RoundContext, RoundFeedback
from presto_sgl.planners.costaware import EXPLORE, CostAwareStepPlanner, MatchRate
from presto_sgl.planners.timemodel import CallTimeModel
from presto_sgl.predictor.certainty import Predictor, h_plus

OBJECTIVES = ("rollout", "renewal", "myopic")


def transition_probabilities(cuts: Sequence[int], accept: Sequence[float], length: int) -> list[float]:
    """r_d = P(the walk makes transition d) when depths 0..len(cuts)-1 all have a proposal.

    DP over the law of m (smallest accepted cut so far, T at the root): at depth d the mass
    with m >= c_d makes the transition (r_d) and moves to m = c_d with probability a_d or
    stays with 1 - a_d; the mass with m < c_d stops. O(D^2) for D depths.
    """
    law = {length: 1.0}  # m -> P(walk still running with smallest accepted cut m)
    rates: list[float] = []
    for cut, a in zip(cuts, accept, strict=True):
        valid = {m: p for m, p in law.items() if m >= cut}
        r = math.fsum(valid.values())
        rates.append(r)
        law = {m: (1.0 - a) * p for m, p in valid.items()}
        law[cut] = law.get(cut, 0.0) + a * r
    return rates


def ever_used(cuts: Sequence[int], accept: Sequence[float]) -> list[float]:
    """u_d = P(a proposal for depth d from the root is ever used) = prod_{j<d, c_j<c_d} (1 - a_j).

    Every depth is eventually walked (K transitions per stage). A proposal with prefix
    root[0:c_d] is valid at depth d iff no earlier depth accepted with a smaller cut (an
    accept at c_j >= c_d keeps root[0:c_d]; at c_j < c_d a fresh suffix generically
    changes token c_j). Used by the ``renewal`` objective.
    """
    return [math.prod(1.0 - a for c, a in zip(cuts[:d], accept[:d]) if c < cut) for d, cut in enumerate(cuts)]


class RunRate:
    """Realized transitions and call time over every run of a sampler (renewal's lambda);
    thread-safe, shared by the per-run planners like the other learners."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.transitions = 0
        self.call_time_s = 0.0

    def add(self, transitions: int, time_s: float) -> None:
        with self._lock:
            self.transitions += transitions
            self.call_time_s += time_s

    @property
    def value(self) -> float:
        """Transitions per second of call time (0 before any call time)."""
        return self.transitions / self.call_time_s if self.call_time_s > 0 else 0.0


class ObjectivePlanner(CostAwareStepPlanner):
    """The cost-aware step planner with n* chosen by ``objective`` (module docstring).

    Learners shared by :meth:`for_run`: the predictor, the call-time model, the match rate
    (the library's) and the run rate (``renewal``'s lambda); round state is per run.
    """

    def __init__(
        self,
        predictor: Predictor,
        time_model: CallTimeModel | None = None,
        explore: Sequence[float] = EXPLORE,
        *,
        objective: str = "rollout",
        samples: int = 32,
        horizon: int = 40,
        seed: int = 0,
        match: MatchRate | None = None,
        rate: RunRate | None = None,
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"`objective` (={objective!r}) must be one of {OBJECTIVES}, e.g. 'rollout'")
        super().__init__(predictor, time_model, explore, samples=samples, horizon=horizon, seed=seed, match=match)
        self.objective = objective
        self.rate = rate if rate is not None else RunRate()

    # renewal's rate, readable and settable as the planner's own numbers (tests set them)
    @property
    def transitions(self) -> int:
        return self.rate.transitions

    @transitions.setter
    def transitions(self, value: int) -> None:
        self.rate.transitions = value

    @property
    def call_time_s(self) -> float:
        return self.rate.call_time_s

    @call_time_s.setter
    def call_time_s(self, value: float) -> None:
        self.rate.call_time_s = value

    def expected_transitions(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[float]:
        """E(n) for n = 0..len(batch): expected transitions of this round if the first n
        requests of ``batch`` are sent (``myopic``; also a diagnostic)."""
        T = ctx.root.length
        rank = {p.decision: j for j, p in enumerate(batch)}
        cuts: list[int] = []
        starts: list[int] = []  # starts[j]: depth index of request j
        for k in range(ctx.k0, ctx.k0 + ctx.remaining):
            cut = ctx.root_cut(k)
            if k in rank:
                starts.append(len(cuts))
            elif ctx.store.find(k, ctx.root.tokens, cut) is None:
                break
            cuts.append(cut)
        rates = transition_probabilities(cuts, [h_plus(self.predictor, c / T) for c in cuts], T)
        cumulative = list(itertools.accumulate(rates, initial=0.0))
        return [cumulative[s] for s in starts] + [cumulative[-1]]

    def renewal_values(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[float]:
        """V[n-1] = sum_{i<n} u_i - lambda t(n) for n = 1..N (lambda = measured rate, 0 before any call)."""
        cuts, _ = self._depths(ctx)
        T = ctx.root.length
        u = ever_used(cuts, [h_plus(self.predictor, c / T) for c in cuts])
        lam = self.rate.value
        value = list(itertools.accumulate(u[p.decision - ctx.k0] for p in batch))
        return [value[n - 1] - lam * self.time_model.predict([T - p.cut for p in batch[:n]]) for n in range(1, len(batch) + 1)]

    def choose(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> int:
        """n*: an exploration fraction during the first calls, else by the objective."""
        if self.objective == "rollout":
            return super().choose(ctx, batch)
        N = len(batch)
        calls = self.time_model.calls
        if calls < len(self.explore):
            return max(1, math.ceil(self.explore[calls] * N))
        if N == 1:
            return 1
        if self.objective == "renewal":
            V = self.renewal_values(ctx, batch)
            return max(range(1, N + 1), key=lambda n: V[n - 1])
        E = self.expected_transitions(ctx, batch)
        T = ctx.root.length
        return max(range(1, N + 1), key=lambda n: E[n] / self.time_model.predict([T - p.cut for p in batch[:n]]))

    def observe(self, feedback: RoundFeedback) -> None:
        """The library's feedback (time model, predictor), then the run rate."""
        super().observe(feedback)
        self.rate.add(len(feedback.decisions), feedback.time_s)
