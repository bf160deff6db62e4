"""The rollout budget policy, for rules whose proposals carry over (step keys): requests per
call by rollout (docs/design.md §5; the policies: :mod:`.budget`).

The step rule (:class:`~presto_sgl.planners.step.StepPlanner`) requests the first
N = budget depths without a carried-over proposal. This policy sends a prefix of that
batch, the first n* requests. A stage has a fixed number of transitions (K), so
maximizing transitions per second means minimizing the call time to finish the stage.
A one-step lookahead with a fixed-budget base policy:

    n* = argmin_{1 <= n <= N} t(n) + E[J_b*(state after sending n and walking)],

where J_b is the call time the step rule with fixed budget b needs to finish the stage
(depth cap, or ``horizon`` depths), and b* is the budget in BASES + {N} with the least
E[J_b] from the root. Since n = b* reproduces the base, the choice is never worse than
the best fixed budget *under the model* (rollout policy improvement), and the model
carries both effects a per-call ratio misses: requests not reached this round stay valid
for later rounds (carry-over), and a call's decode steps are set by its smallest cut, so
deferring a small cut only moves its steps to a later call.

The model (:class:`RoundModel`). Depth d is decision k0 + d with keyed cut c_d and
predicted accept probability a_d = h+(c_d / T), accepts independent. A walk takes every
depth that holds a proposal and stops at the first that does not. A proposal of depth j
with prefix root[0:c_j] stays valid until an accept at an earlier depth i with
c_j > c_i + G_i, where G_i is how many tokens after the cut the new suffix repeats the
old state: geometric with P(G >= g) = s^g, s estimated from realized roots and accept
bits (:class:`MatchRate`, shared by the runs). The expectation is a Monte-Carlo average
over ``samples`` futures (common to every n and b, seeded by the round); with exact
enumeration it equals a store-level simulation of the real step rule (tests).

Under ending="eos" a proposal ends at its own stop token, not at the root's length L: a
request at cut c decodes n = min(H, max(c + 1, r L)) - c tokens with r = (c + n) / L drawn
from the ratios realized by earlier requests of every run (:class:`EndLengths`; H the stage
horizon), sampled with each future, so the rollout prices E[longest row of a call], not the
longest of the mean lengths (one rambling proposal sets a lockstep call's decode steps).

Call time t(n): :class:`~presto_sgl.planners.timemodel.CallTimeModel`, fitted to the
calls of every run of the sampler. The first calls explore fixed fractions of N (the fit
needs different row counts to tell per-call from per-row cost). Measured numbers are in
benchmarks/RESULTS.md.

Planning reads only the root, the keyed cuts, the store's prefixes, realized decisions
and states, and call times -- never an unused proposal's content -- so the chain stays
exact.
"""

from __future__ import annotations

import collections
import copy
import itertools
import random
import threading
from collections.abc import Callable, Sequence
from typing import cast

from ..predictor.certainty import Predictor, h_plus
from .base import PlannedRequest, PlanOffer, RoundContext, RoundFeedback
from .budget import explored
from .rollout import Outcome, RoundModel
from .timemodel import EXPLORE, CallTimeModel

BASES = (1, 2, 4, 8, 16)
"""Fixed budgets the rollout compares as continuation policies (plus N itself)."""


class MatchRate:
    """How often a fresh suffix repeats the state it replaces, per token: a geometric MLE
    with censoring over the rounds of every run (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tokens = 0  # matched tokens after the smallest accepted cut, over rounds
        self.ends = 0  # rounds whose match ended before T (uncensored)

    def add(self, matched: int, ended: bool) -> None:
        with self._lock:
            self.tokens += matched
            self.ends += ended

    @property
    def value(self) -> float:
        """Estimated P(the next token also matches); 0 before any accept."""
        total = self.tokens + self.ends
        return self.tokens / total if total else 0.0


class EndLengths:
    """Where proposals end under ending="eos", relative to the root: r = (c + n) / L(root) of
    the last ``keep`` requests of every run (thread-safe). Lengths are known for every
    request sent (like the call-time model's counts), and they only shape the batch size."""

    MIN_OBSERVED = 8
    """Requests seen before the ratios are used (until then a request decodes L - c)."""

    def __init__(self, keep: int = 1024) -> None:
        self._lock = threading.Lock()
        self._ratios: collections.deque[float] = collections.deque(maxlen=keep)

    def add(self, length: int, ends: Sequence[tuple[int, int]]) -> None:
        """Requests (cut, new tokens) of one call from a root of ``length`` tokens."""
        with self._lock:
            self._ratios.extend((c + n) / length for c, n in ends)

    def sampler(self, length: int, horizon: int) -> Callable[[random.Random, int], int] | None:
        """``draw(rng, cut)`` -> new tokens, or None before MIN_OBSERVED requests."""
        with self._lock:
            ratios = tuple(self._ratios)
        if len(ratios) < self.MIN_OBSERVED:
            return None

        def draw(rng: random.Random, cut: int) -> int:
            return min(horizon, max(cut + 1, round(ratios[rng.randrange(len(ratios))] * length))) - cut

        return draw


class RolloutPolicy:
    """The step rule's budget: the n* requests of the rollout (module docstring).

    The object a sampler holds owns what is learned across runs: the predictor, the
    call-time model and the match rate. :meth:`for_run` gives a policy with the same
    learners and fresh round state (the previous root it learns the match rate from).
    """

    def __init__(
        self,
        predictor: Predictor,
        time_model: CallTimeModel | None = None,
        explore: Sequence[float] = EXPLORE,
        *,
        samples: int = 32,
        horizon: int = 40,
        seed: int = 0,
        match: MatchRate | None = None,
        ends: EndLengths | None = None,
    ) -> None:
        self.predictor = predictor
        self.time_model = time_model if time_model is not None else CallTimeModel()
        self.explore = tuple(explore)
        self.samples = samples
        self.horizon = horizon
        self.seed = seed
        self.match_rate = match if match is not None else MatchRate()
        self.end_lengths = ends if ends is not None else EndLengths()
        self.last_base: int | None = None  # b* of the last rollout choice (diagnostics)
        self._previous: RoundContext | None = None

    def for_run(self) -> RolloutPolicy:
        """A policy for one chain's run: every learner and setting shared (a subclass's
        too), the round state fresh."""
        run = copy.copy(self)
        run._previous = None
        run.last_base = None
        return run

    @property
    def match(self) -> float:
        return self.match_rate.value

    def _depths(self, ctx: RoundContext) -> tuple[list[int], int]:
        """Keyed cuts of depths k0..k0+remaining-1 and the mask of carried-over ones."""
        cuts, held = [], 0
        for i, k in enumerate(range(ctx.k0, ctx.k0 + ctx.remaining)):
            cut = ctx.root_cut(k)
            cuts.append(cut)
            if ctx.store.find(k, ctx.root.tokens, cut) is not None:
                held |= 1 << i
        return cuts, held

    def model(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> tuple[RoundModel, list[int]]:
        """The :class:`RoundModel` of the round (depths up to the horizon, at least through
        the batch) and the batch's depth indices."""
        cuts, held = self._depths(ctx)
        idx = [cast(int, p.decision) - ctx.k0 for p in batch]  # step keys: decisions are step indices
        D = min(len(cuts), max(self.horizon, max(idx, default=-1) + 1))
        T = ctx.root.length
        accept = [h_plus(self.predictor, c / T) for c in cuts[:D]]
        draws = len(ctx.kernel.suffix_draws(cuts[0], T, ctx.draws(ctx.k0))) if cuts else 1
        return RoundModel(
            cuts[:D], accept, T, held & ((1 << D) - 1), time_model=self.time_model, match=self.match, draws=draws
        ), idx

    def sampled_futures(self, ctx: RoundContext, rm: RoundModel) -> list[Outcome]:
        """``samples`` futures from a generator seeded by (seed, k0, remaining, T): the same
        draws for every n and b (common random numbers) and on a rerun of the same history."""
        rng = random.Random(f"{self.seed}/{ctx.k0}/{ctx.remaining}/{ctx.root.length}")
        T = ctx.root.length
        lengths = self.end_lengths.sampler(T, ctx.horizon or T) if ctx.ends else None
        return rm.sampled_outcomes(self.samples, rng, lengths)

    def rollout_values(
        self,
        ctx: RoundContext,
        batch: Sequence[PlannedRequest],
        outcomes: Sequence[Outcome] | None = None,
        base: int | None = None,
    ) -> tuple[int, list[float]]:
        """(b, Q) with Q[n-1] = t(n) + E[J_b(after sending batch[:n] and walking)], n = 1..N.

        b = ``base``, or b* = the budget in BASES (capped at N) with the least E[J_b] from
        the root. ``outcomes`` defaults to ``samples`` draws from a generator seeded by
        (seed, k0, remaining, T): the same draws for every n and b (common random numbers)
        and the same choice on a rerun of the same history.
        """
        N = len(batch)
        rm, idx = self.model(ctx, batch)
        if outcomes is None:
            outcomes = self.sampled_futures(ctx, rm)
        if base is None:
            root = [(0, rm.held)] * len(outcomes)
            bases = sorted({b for b in BASES if b < N} | {N})
            base = min(bases, key=lambda b: (rm.expected_cost_to_go(root, outcomes, b), -b))
        Q = []
        for n in range(1, N + 1):
            after = [rm.after(idx[:n], o) for o in outcomes]
            Q.append(rm.expected_call_time(idx[:n], outcomes) + rm.expected_cost_to_go(after, outcomes, base))
        return base, Q

    def choose(self, ctx: RoundContext, ranked: PlanOffer) -> int:
        """n* of the step rule's batch (the first depths without a carried-over proposal),
        after learning the match rate from the previous root to this one."""
        self._learn_match(ctx)
        return self.size(ctx, ranked.batch) if ranked.batch else 0

    def size(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> int:
        """n*: an exploration fraction during the first calls, else the rollout's argmin."""
        N = len(batch)
        n = explored(self.time_model.calls, self.explore, N)
        if n is not None:
            return n
        if N == 1:
            return 1
        self.last_base, Q = self.rollout_values(ctx, batch)
        return min(range(1, N + 1), key=lambda n: (Q[n - 1], n != self.last_base))

    def _learn_match(self, ctx: RoundContext) -> None:
        """From the previous root to this one (realized states and accept bits only): with
        m the smallest cut accepted in between, the roots agree on m + G tokens."""
        prev, self._previous = self._previous, ctx
        if prev is None or prev.root.length != ctx.root.length or ctx.k0 <= prev.k0:
            return
        if not ctx.root_path.startswith(prev.root_path) or len(ctx.root_path) - len(prev.root_path) != ctx.k0 - prev.k0:
            return
        T = ctx.root.length
        bits = ctx.root_path[len(prev.root_path) :]
        accepted = [prev.root_cut(k) for k, b in zip(range(prev.k0, ctx.k0), bits) if b == "1"]
        if not accepted:
            return
        m = min(accepted)
        a, b = prev.root.tokens, ctx.root.tokens
        lcp = m
        while lcp < T and a[lcp] == b[lcp]:
            lcp += 1
        self.match_rate.add(lcp - m, lcp < T)

    def use_probabilities(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[float]:
        """P(the proposal of each batch request is used), this round or a later one of the
        stage: no accept at an earlier depth i invalidates it (c_d > c_i + G_i), whatever
        the later rounds send. Over the same sampled futures as the rollout."""
        rm, idx = self.model(ctx, batch)
        outcomes = self.sampled_futures(ctx, rm)
        used = [0.0] * len(idx)
        for bits, gaps, w, _ in outcomes:
            dead = 0
            for i in range(max(idx, default=0)):
                if bits >> i & 1:
                    dead |= rm.later(i, gaps[i])
            for j, d in enumerate(idx):
                if not dead >> d & 1:
                    used[j] += w
        return used

    def values(self, ctx: RoundContext, ranked: PlanOffer) -> tuple[float, ...]:
        """V(n) = the sum of the first n use probabilities."""
        return tuple(itertools.accumulate(self.use_probabilities(ctx, ranked.batch)))

    def observe(self, feedback: RoundFeedback) -> None:
        """Refit the time model on the call; under ending="eos" add where its requests ended;
        pass the realized decisions to the predictor."""
        if feedback.requests and feedback.timed:
            self.time_model.observe([new for _, new in feedback.requests], feedback.time_s)
        ctx = self._previous  # this round's context (set by choose)
        if feedback.requests and ctx is not None and ctx.ends:
            prompt = len(ctx.root.prompt)
            self.end_lengths.add(feedback.length, [(prefix - prompt, new) for prefix, new in feedback.requests])
        self.predictor.observe(feedback.observations())
