"""The rest of a stage as the cost-aware planner simulates it (exact or sampled futures).

See :mod:`presto_sgl.planners.costaware` for how the planner uses it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from .timemodel import CallTimeModel, call_seconds, second_most

Outcome = tuple[int, tuple[int, ...], float, tuple[int, ...] | None]
"""One simulated future of the round's depths: (accept bitmask, match gap per depth, weight,
new tokens per depth or None: each depth's ``length - cut``)."""


class RoundModel:
    """The rest of a stage as the planner sees it, for exact or sampled rollouts.

    Depths 0..D-1 are decisions k0..k0+D-1 with keyed cuts ``cuts`` and predicted accept
    probabilities ``accept``. ``held`` is the bitmask of depths with a proposal valid for
    the root (carried over). A walk from depth ``pos`` takes every held depth in order and
    stops at the first one without a proposal; an accept at depth i with cut c_i
    invalidates every held proposal of a later depth j with c_j > c_i (its prefix
    root[0:c_j] no longer matches the state: generically, a fresh suffix differs at c_i).
    A call of base policy b requests the first b depths without a proposal from ``pos``
    (the step rule with budget b) and costs ``time(rows, steps, tokens, batched)``; a decision sends
    ``draws`` requests (MultiTryMH: 2m - 1), each of its depth's new tokens.
    """

    def __init__(
        self,
        cuts: Sequence[int],
        accept: Sequence[float],
        length: int,
        held: int,
        *,
        time_model: CallTimeModel,
        match: float = 0.0,
        draws: int = 1,
    ) -> None:
        self.cuts = list(cuts)
        self.draws = draws
        self.accept = list(accept)
        self.D = len(cuts)
        self.T = length
        self.held = held
        self.match = match
        self.theta = [float(x) for x in time_model.theta]
        self._new = [length - c for c in self.cuts]
        self._later: dict[tuple[int, int], int] = {}
        self._memos: dict[tuple[int, int, tuple[int, ...], tuple[int, ...] | None], dict[tuple[int, int], float]] = {}

    def call_time(self, depths: Sequence[int], outcome: Outcome | None = None) -> float:
        """Predicted time of a call requesting ``depths`` (new tokens from ``outcome`` if it has them)."""
        lengths = self._new if outcome is None or outcome[3] is None else outcome[3]
        new = [lengths[d] for d in depths]
        return self._time(len(new), max(new), sum(new), second_most(new))

    def expected_call_time(self, depths: Sequence[int], outcomes: Sequence[Outcome]) -> float:
        """E[call time] over weighted outcomes (the one deterministic time when none samples lengths)."""
        if all(o[3] is None for o in outcomes):
            return self.call_time(depths)
        return math.fsum(o[2] * self.call_time(depths, o) for o in outcomes)

    def _time(self, rows: int, steps: int, tokens: int, second: int) -> float:
        """A call of ``rows`` decisions (``draws`` requests each; ``steps`` and ``second`` the
        most and second most new tokens of a decision) on the round's snapshot of theta."""
        r = self.draws
        return call_seconds(self.theta, r * rows, steps, r * tokens, steps if r > 1 else second)

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

    def cost_to_go(
        self, pos: int, held: int, outcome: Outcome, budget: int, memo: dict[tuple[int, int], float] | None = None
    ) -> float:
        """Call time to walk depths pos..D-1 with the step rule at ``budget``, for one accept pattern.

        ``memo`` (one per outcome and budget) maps (pos, held >> pos) to the tail's call time:
        the rest of the walk reads no depth below pos, and rollouts from different first
        calls soon reach the same states. Tails are summed from the end, so a memoized value
        is the value computed afresh, bit for bit."""
        if memo is None:
            memo = {}
        D, later = self.D, self.later
        new = self._new if outcome[3] is None else outcome[3]
        bits, gaps = outcome[0], outcome[1]
        keys: list[tuple[int, int]] = []
        times: list[float] = []
        tail = 0.0
        while pos < D:
            key = (pos, held >> pos)
            if key in memo:
                tail = memo[key]
                break
            # one call: the first ``budget`` depths >= pos without a proposal (the step rule)
            rows = steps = second = tokens = 0
            d = pos
            while d < D and rows < budget:
                if not held >> d & 1:
                    held |= 1 << d
                    rows += 1
                    n = new[d]
                    tokens += n
                    if n > steps:
                        steps, second = n, steps
                    elif n > second:
                        second = n
                d += 1
            keys.append(key)
            times.append(self._time(rows, steps, tokens, second))
            while pos < D and held >> pos & 1:  # the walk (:meth:`walk`, inlined)
                if bits >> pos & 1:
                    held &= ~later(pos, gaps[pos])
                pos += 1
        for key, t in zip(reversed(keys), reversed(times)):
            tail = t + tail
            memo[key] = tail
        return tail

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
        out: list[Outcome] = []
        for bits in range(1 << self.D):
            w = math.prod(a if bits >> i & 1 else 1.0 - a for i, a in enumerate(self.accept))
            out.append((bits, zeros, w, None))
        return out

    def sampled_outcomes(
        self, samples: int, rng: random.Random, lengths: Callable[[random.Random, int], int] | None = None
    ) -> list[Outcome]:
        """``samples`` independent draws of (accept bits, match gaps[, new tokens]), weight
        1/samples each. A gap is geometric: P(gap >= g) = match^g. ``lengths(rng, cut)``
        draws a depth's new tokens (ending="eos": proposals end at their own length);
        without it every depth has ``length - cut``."""
        out = []
        for _ in range(samples):
            bits = sum(1 << i for i, a in enumerate(self.accept) if rng.random() < a)
            gaps = tuple(self._gap(rng) for _ in range(self.D))
            new = None if lengths is None else tuple(lengths(rng, c) for c in self.cuts)
            out.append((bits, gaps, 1.0 / samples, new))
        return out

    def _gap(self, rng: random.Random) -> int:
        if self.match <= 0.0:
            return 0
        if self.match >= 1.0:
            return self.T
        return min(int(math.log(1.0 - rng.random()) / math.log(self.match)), self.T)

    def expected_cost_to_go(
        self, pos_held: Sequence[tuple[int, int]], outcomes: Sequence[Outcome], budget: int
    ) -> float:
        """E[cost_to_go] over weighted outcomes, one start state each; tails are memoized per
        (budget, outcome) for the life of this model."""
        memos = [self._memos.setdefault((budget, o[0], o[1], o[3]), {}) for o in outcomes]
        return math.fsum(o[2] * self.cost_to_go(p, h, o, budget, m) for (p, h), o, m in zip(pos_held, outcomes, memos))
