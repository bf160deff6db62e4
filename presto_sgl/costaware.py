"""Cost-aware budget for step-keyed planning (DESIGN §7): requests per call by rollout.

The step rule (:class:`~presto_sgl.planner.StepPlanner`) requests the first N = budget
depths without a carried-over proposal. This planner sends a prefix of that batch, the
first n* requests. A stage has a fixed number of transitions (K), so maximizing
transitions per second means minimizing the call time to finish the stage. The default
objective (``rollout``) is a one-step lookahead with a fixed-budget base policy:

    n* = argmin_{1 <= n <= N} t(n) + E[J_b*(state after sending n and walking)],

where J_b is the call time the step rule with fixed budget b needs to finish the stage
(depth cap, or ``horizon`` depths), and b* is the budget in BASES + {N} with the least
E[J_b] from the root. Since n = b* reproduces the base, the choice is never worse than
the best fixed budget *under the model* (rollout policy improvement), and the model
carries both effects a per-call ratio misses: requests not reached this round stay valid
for later rounds (carry-over), and a call's decode steps are set by its smallest cut, so
deferring a small cut only moves its steps to a later call.

The model (:class:`RoundModel`). Depth d is decision k0 + d with keyed cut c_d and
predicted accept probability a_d = h+(c_d / T) (certainty.h_plus), accepts independent.
A walk takes every depth that holds a proposal and stops at the first that does not. A
proposal of depth j with prefix root[0:c_j] stays valid until an accept at an earlier
depth i with c_j > c_i + G_i, where G_i is how many tokens after the cut the new suffix
repeats the old state: geometric with P(G >= g) = s^g, s estimated from the run's own
realized roots and accept bits (:attr:`CostAwareStepPlanner.match`). With tau = 1/alpha
proposals repeat the state often (s ~ 0.85 on the reference LM), so s = 0 would
undervalue carry-over. The expectation is a Monte-Carlo average over ``samples`` futures
(common to every n and b, seeded by the round); with exact enumeration it equals a
store-level simulation of the real step rule (tests/test_costaware.py).

Call time t(n). :class:`CallTimeModel`: a linear law in (1, rows, decode steps, decoded
tokens) with non-negative coefficients, fitted to the run's own calls. Forks decode in
lockstep, so a call lasts max(new tokens) decode steps, and each step costs more with
more active rows (total decoded tokens). The first calls explore fixed fractions of N
(the fit needs different row counts to tell per-call from per-row cost).

Other objectives, kept for comparison: ``renewal`` (n* = argmax sum_{i<n} u_i - lambda
t(n), u_i = P(request i is ever used) with s = 0, lambda the run's measured rate) and
``myopic`` (n* = argmax E(n) / t(n), E(n) this round's expected transitions).

Measured (benchmarks/cost_aware_sim.py: reference LM V=32 sharpness 2, T=48, K=20,
alpha=4, 8 prompts x 5 seeds; transitions per synthetic second): rollout at N=20 vs the
best fixed budget: law A (embedded engine) 1.321 vs 1.321 (N=20, a tie); law B (CPU
SGLang server) 1.184 vs 1.149 (N=4); law C (GPU-like) 8.33 vs 8.57 (N=20) -- below it.
At N=10 vs the best fixed budget <= 10: A 1.215 vs 1.205, B 1.189 vs 1.149, C 7.05 vs
7.26 (below). ``myopic`` and ``renewal`` stay below the best fixed budget on A and C.
Planning costs ~10-30 ms per call here (pure Python).

Planning reads only the root, the keyed cuts, the store's prefixes, realized decisions
and states, and call times -- never an unused proposal's content -- so the chain stays
exact.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import numpy as np

from .certainty import Predictor, h_plus
from .planner import PlannedRequest, RoundContext, RoundFeedback, StepPlanner

EXPLORE = (1.0, 0.0, 0.5, 0.25)
"""Fractions of N sent by the first calls, n = max(1, ceil(f N)): full, 1, half, quarter."""

BASES = (1, 2, 4, 8, 16)
"""Fixed budgets the rollout compares as continuation policies (plus N itself)."""

MIN_TIME_S = 1e-6
"""Floor of a predicted call time (seconds), so that E(n) / t(n) is always defined."""


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


class CallTimeModel:
    """t = theta . (1, rows, steps, tokens) with theta >= 0, fitted by exact NNLS.

    For a call of requests with new-token counts L_1..L_n: rows = n, steps = max L_i
    (lockstep decode), tokens = sum L_i. Least squares over all observed calls with
    theta >= 0 is solved exactly from running sums (X^T X, X^T y): for each support S of
    the 4 features the unconstrained solution on S; the best non-negative one wins.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.theta = np.zeros(4)
        self._gram = np.zeros((4, 4))
        self._xty = np.zeros(4)

    @staticmethod
    def features(new_tokens: Sequence[int]) -> np.ndarray:
        return np.array([1.0, len(new_tokens), max(new_tokens), sum(new_tokens)], dtype=float)

    def predict(self, new_tokens: Sequence[int]) -> float:
        """Predicted seconds of a call with these new-token counts (at least MIN_TIME_S)."""
        return max(float(self.theta @ self.features(new_tokens)), MIN_TIME_S)

    def observe(self, new_tokens: Sequence[int], time_s: float) -> None:
        """Add one call (its requests' new-token counts and wall time) and refit."""
        x = self.features(new_tokens)
        self._gram += np.outer(x, x)
        self._xty += time_s * x
        self.calls += 1
        self.theta = self._nnls()

    def _nnls(self) -> np.ndarray:
        # ||X theta - y||^2 - ||y||^2 = theta' G theta - 2 theta' b; on the normal-equation
        # solution of a support S it equals -theta_S' b_S. Columns are scaled to unit norm
        # (D G D) so that rows and token counts of different magnitudes solve stably. If the
        # unconstrained solution (first support) is non-negative it is optimal: stop there.
        scale = 1.0 / np.sqrt(np.maximum(np.diag(self._gram), 1e-300))
        best, best_loss = np.zeros(4), 0.0  # theta = 0: loss 0 relative to ||y||^2
        for size in range(4, 0, -1):
            for support in itertools.combinations(range(4), size):
                s = list(support)
                d = scale[s]
                theta_s = d * (np.linalg.pinv(d[:, None] * self._gram[np.ix_(s, s)] * d) @ (d * self._xty[s]))
                loss = -float(theta_s @ self._xty[s])
                if np.all(theta_s >= 0.0) and loss < best_loss:
                    best, best_loss = np.zeros(4), loss
                    best[s] = theta_s
                    if size == 4:
                        return best
        return best


def ever_used(cuts: Sequence[int], accept: Sequence[float]) -> list[float]:
    """u_d = P(a proposal for depth d from the root is ever used) = prod_{j<d, c_j<c_d} (1 - a_j).

    Every depth is eventually walked (K transitions per stage). A proposal with prefix
    root[0:c_d] is valid at depth d iff no earlier depth accepted with a smaller cut (an
    accept at c_j >= c_d keeps root[0:c_d]; at c_j < c_d a fresh suffix generically
    changes token c_j). Used by the ``renewal`` objective.
    """
    return [math.prod(1.0 - a for c, a in zip(cuts[:d], accept[:d]) if c < cut) for d, cut in enumerate(cuts)]


Outcome = tuple[int, tuple[int, ...], float]
"""One simulated future of the round's depths: (accept bitmask, match gap per depth, weight)."""


class RoundModel:
    """The rest of a stage as the planner sees it, for exact or sampled rollouts.

    Depths 0..D-1 are decisions k0..k0+D-1 with keyed cuts ``cuts`` and predicted accept
    probabilities ``accept``. ``held`` is the bitmask of depths with a proposal valid for
    the root (carried over). A walk from depth ``pos`` takes every held depth in order and
    stops at the first one without a proposal; an accept at depth i with cut c_i
    invalidates every held proposal of a later depth j with c_j > c_i (its prefix
    root[0:c_j] no longer matches the state: generically, a fresh suffix differs at c_i).
    A call of base policy b requests the first b depths without a proposal from ``pos``
    (the step rule with budget b) and costs ``time(rows, steps, tokens)``.
    """

    def __init__(
        self,
        cuts: Sequence[int],
        accept: Sequence[float],
        length: int,
        held: int,
        time_model: CallTimeModel,
        match: float = 0.0,
    ) -> None:
        self.cuts = list(cuts)
        self.accept = list(accept)
        self.D = len(cuts)
        self.T = length
        self.held = held
        self.match = match
        self.theta = [float(x) for x in time_model.theta]
        self._later: dict[tuple[int, int], int] = {}

    def call_time(self, depths: Sequence[int]) -> float:
        new = [self.T - self.cuts[d] for d in depths]
        th = self.theta
        return max(th[0] + th[1] * len(new) + th[2] * max(new) + th[3] * sum(new), MIN_TIME_S)

    def later(self, i: int, gap: int) -> int:
        """Mask of depths j > i invalidated by an accept at depth i whose new suffix matches
        the old state on ``gap`` tokens after the cut: c_j > c_i + gap."""
        key = (i, gap)
        if key not in self._later:
            thr = self.cuts[i] + gap
            self._later[key] = sum(1 << j for j in range(i + 1, self.D) if self.cuts[j] > thr)
        return self._later[key]

    def walk(self, pos: int, held: int, outcome: Outcome) -> tuple[int, int]:
        """(first depth without a proposal, held mask after the walk) from depth ``pos``."""
        bits, gaps = outcome[0], outcome[1]
        while pos < self.D and held >> pos & 1:
            if bits >> pos & 1:
                held &= ~self.later(pos, gaps[pos])
            pos += 1
        return pos, held

    def missing(self, pos: int, held: int, budget: int) -> list[int]:
        """The first ``budget`` depths >= pos without a proposal (the step rule's batch)."""
        out = []
        for d in range(pos, self.D):
            if len(out) >= budget:
                break
            if not held >> d & 1:
                out.append(d)
        return out

    def cost_to_go(self, pos: int, held: int, outcome: Outcome, budget: int) -> float:
        """Call time to walk depths pos..D-1 with the step rule at ``budget``, for one accept pattern."""
        total = 0.0
        while pos < self.D:
            depths = self.missing(pos, held, budget)
            total += self.call_time(depths)
            for d in depths:
                held |= 1 << d
            pos, held = self.walk(pos, held, outcome)
        return total

    def after(self, depths: Sequence[int], outcome: Outcome) -> tuple[int, int]:
        """State (pos, held) after a call requesting ``depths`` from the root and its walk."""
        held = self.held
        for d in depths:
            held |= 1 << d
        return self.walk(0, held, outcome)

    def exact_outcomes(self) -> list[Outcome]:
        """All 2^D accept patterns with their probabilities (no token matches: ``match`` = 0)."""
        if self.match:
            raise ValueError("exact outcomes enumerate accept patterns only; use match = 0")
        zeros = (0,) * self.D
        out = []
        for bits in range(1 << self.D):
            w = math.prod(a if bits >> i & 1 else 1.0 - a for i, a in enumerate(self.accept))
            out.append((bits, zeros, w))
        return out

    def sampled_outcomes(self, samples: int, rng: random.Random) -> list[Outcome]:
        """``samples`` independent draws of (accept bits, match gaps), weight 1/samples each.
        A gap is geometric: P(gap >= g) = match^g."""
        out = []
        for _ in range(samples):
            bits = sum(1 << i for i, a in enumerate(self.accept) if rng.random() < a)
            gaps = tuple(self._gap(rng) for _ in range(self.D))
            out.append((bits, gaps, 1.0 / samples))
        return out

    def _gap(self, rng: random.Random) -> int:
        if self.match <= 0.0:
            return 0
        if self.match >= 1.0:
            return self.T
        return min(int(math.log(1.0 - rng.random()) / math.log(self.match)), self.T)

    def expected_cost_to_go(self, pos_held: Sequence[tuple[int, int]], outcomes: Sequence[Outcome], budget: int) -> float:
        return math.fsum(o[2] * self.cost_to_go(p, h, o, budget) for (p, h), o in zip(pos_held, outcomes))


OBJECTIVES = ("rollout", "renewal", "myopic")


class CostAwareStepPlanner(StepPlanner):
    """The step rule's batch cut to the n* requests chosen by ``objective``:

    * ``rollout`` (default): n* = argmin_n t(n) + E[J_b*(state after the call and walk)],
      J_b the call time to finish the stage with the step rule at fixed budget b, and b*
      the budget in BASES (capped at N) with the least E[J_b] from the root.
    * ``renewal``: n* = argmax_n sum_{i<n} u_i - lambda t(n), u_i = P(request i is ever
      used), lambda = the run's measured transitions per second of call time.
    * ``myopic``: n* = argmax_n E(n) / t(n) (this round's expected transitions).
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
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"`objective` (={objective!r}) must be one of {OBJECTIVES}, e.g. 'rollout'")
        self.predictor = predictor
        self.time_model = time_model if time_model is not None else CallTimeModel()
        self.explore = tuple(explore)
        self.objective = objective
        self.samples = samples
        self.horizon = horizon
        self.seed = seed
        self.transitions = 0  # realized transitions and call time of the run (renewal's lambda)
        self.call_time_s = 0.0
        self.last_base: int | None = None  # b* of the last rollout choice (diagnostics)
        self.match_tokens = 0  # matched tokens after the smallest accepted cut, over rounds
        self.match_ends = 0  # rounds whose match ended before T (uncensored)
        self._previous: RoundContext | None = None

    def _depths(self, ctx: RoundContext) -> tuple[list[int], int]:
        """Keyed cuts of depths k0..k0+remaining-1 and the mask of carried-over ones."""
        T = ctx.root.length
        cuts, held = [], 0
        for i, k in enumerate(range(ctx.k0, ctx.k0 + ctx.remaining)):
            cut = ctx.draws(k).cut(T)
            cuts.append(cut)
            if ctx.store.find(k, ctx.root.tokens, cut) is not None:
                held |= 1 << i
        return cuts, held

    def expected_transitions(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[float]:
        """E(n) for n = 0..len(batch): expected transitions of this round if the first n
        requests of ``batch`` are sent (``myopic``; also a diagnostic)."""
        T = ctx.root.length
        rank = {p.decision: j for j, p in enumerate(batch)}
        cuts: list[int] = []
        starts: list[int] = []  # starts[j]: depth index of request j
        for k in range(ctx.k0, ctx.k0 + ctx.remaining):
            cut = ctx.draws(k).cut(T)
            if k in rank:
                starts.append(len(cuts))
            elif ctx.store.find(k, ctx.root.tokens, cut) is None:
                break
            cuts.append(cut)
        rates = transition_probabilities(cuts, [h_plus(self.predictor, c / T) for c in cuts], T)
        cumulative = list(itertools.accumulate(rates, initial=0.0))
        return [cumulative[s] for s in starts] + [cumulative[-1]]

    def model(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> tuple[RoundModel, list[int]]:
        """The :class:`RoundModel` of the round (depths up to the horizon, at least through
        the batch) and the batch's depth indices."""
        cuts, held = self._depths(ctx)
        idx = [p.decision - ctx.k0 for p in batch]
        D = min(len(cuts), max(self.horizon, max(idx, default=-1) + 1))
        T = ctx.root.length
        accept = [h_plus(self.predictor, c / T) for c in cuts[:D]]
        return RoundModel(cuts[:D], accept, T, held & ((1 << D) - 1), self.time_model, self.match), idx

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
            rng = random.Random(f"{self.seed}/{ctx.k0}/{ctx.remaining}/{ctx.root.length}")
            outcomes = rm.sampled_outcomes(self.samples, rng)
        if base is None:
            root = [(0, rm.held)] * len(outcomes)
            bases = sorted({b for b in BASES if b < N} | {N})
            base = min(bases, key=lambda b: (rm.expected_cost_to_go(root, outcomes, b), -b))
        Q = []
        for n in range(1, N + 1):
            after = [rm.after(idx[:n], o) for o in outcomes]
            Q.append(rm.call_time(idx[:n]) + rm.expected_cost_to_go(after, outcomes, base))
        return base, Q

    def renewal_values(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> list[float]:
        """V[n-1] = sum_{i<n} u_i - lambda t(n) for n = 1..N (lambda = measured rate, 0 before any call)."""
        cuts, _ = self._depths(ctx)
        T = ctx.root.length
        u = ever_used(cuts, [h_plus(self.predictor, c / T) for c in cuts])
        lam = self.transitions / self.call_time_s if self.call_time_s > 0 else 0.0
        value = list(itertools.accumulate(u[p.decision - ctx.k0] for p in batch))
        return [value[n - 1] - lam * self.time_model.predict([T - p.cut for p in batch[:n]]) for n in range(1, len(batch) + 1)]

    def choose(self, ctx: RoundContext, batch: Sequence[PlannedRequest]) -> int:
        """n*: an exploration fraction during the first calls, else by the objective."""
        N = len(batch)
        if self.time_model.calls < len(self.explore):
            return max(1, math.ceil(self.explore[self.time_model.calls] * N))
        if N == 1:
            return 1
        if self.objective == "rollout":
            self.last_base, Q = self.rollout_values(ctx, batch)
            return min(range(1, N + 1), key=lambda n: (Q[n - 1], n != self.last_base))
        if self.objective == "renewal":
            V = self.renewal_values(ctx, batch)
            return max(range(1, N + 1), key=lambda n: V[n - 1])
        E = self.expected_transitions(ctx, batch)
        T = ctx.root.length
        return max(range(1, N + 1), key=lambda n: E[n] / self.time_model.predict([T - p.cut for p in batch[:n]]))

    @property
    def match(self) -> float:
        """Estimated probability that a fresh suffix repeats the replaced token, per token
        (geometric MLE with censoring over the rounds seen; 0 before any accept)."""
        total = self.match_tokens + self.match_ends
        return self.match_tokens / total if total else 0.0

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
        accepted = [ctx.draws(k).cut(T) for k, b in zip(range(prev.k0, ctx.k0), bits) if b == "1"]
        if not accepted:
            return
        m = min(accepted)
        a, b = prev.root.tokens, ctx.root.tokens
        lcp = m
        while lcp < T and a[lcp] == b[lcp]:
            lcp += 1
        self.match_tokens += lcp - m
        self.match_ends += lcp < T

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        self._learn_match(ctx)
        batch = super().plan(ctx)
        return batch[: self.choose(ctx, batch)] if batch else batch

    def observe(self, feedback: RoundFeedback) -> None:
        """Refit the time model on the call; pass the realized decisions to the predictor."""
        if feedback.requests:
            self.time_model.observe([new for _, new in feedback.requests], feedback.time_s)
        self.transitions += len(feedback.decisions)
        self.call_time_s += feedback.time_s
        self.predictor.observe(feedback.observations())
