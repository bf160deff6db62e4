"""EntropyCut: suffix resampling at cuts placed where the p0 entropy rises.

With h_t the p0 entropy of the next-token distribution at response position t (carried
in the state, from the pass that produced token t), the jump at t is
Delta_t = max(0, h_t - h_{t-1}) (Delta_0 = 0: the prompt's last entropy is not carried)
and the cut law is

    lambda(c; x) = w_c(x) / W(x),   w_j = Delta_j^beta + FLOOR,   W(x) = sum_{j<T} w_j(x).

The floor keeps every cut possible (lambda > 0), so the kernel is a valid MH kernel for
pi_alpha whatever the entropies; when every jump is zero the law is uniform. The reverse
move uses the same cut under the proposal's law, so the ratio gains the reverse-over-
forward term (docs/design.md §3):

    log A = min(0, PowerMH's log ratio + log lambda(c; y) - log lambda(c; x)),

computed by :func:`~presto_sgl.kernels.mh.log_acceptance` (its ``extra`` term,
through :func:`~presto_sgl.kernels.mh.mh_step`).

Prefetching (exponential race). The cut is c = argmin_j E_j / w_j(x) with per-decision
keyed E_j ~ Exp(1), which has law lambda(.; x). w_j depends on h_j and h_{j-1} only, so a
node whose state keeps the root's first ``shared`` positions knows w_j for j < shared:
:meth:`EntropyCutKernel.prefetch_cut` runs the race over them. The walker runs the full
race on the realized state; if a position of the state's own tail wins, no stored draw
matches and the decision is deferred to a later round -- never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ..chain.keys import DecisionDraws
from ..chain.state import ChainState
from ..errors import EngineError
from ..fields import Validated, number, option
from .base import Proposal, SuffixDraw, Transition
from .mh import mh_step

FLOOR = 1e-6
"""Weight added to every position's Delta^beta (nats^beta): keeps lambda > 0."""


def cut_weights(entropy: Sequence[float], beta: float, upto: int) -> list[float]:
    """w_j = max(0, h_j - h_{j-1})^beta + FLOOR for j < ``upto`` (Delta_0 = 0)."""
    return [(max(0.0, entropy[j] - entropy[j - 1]) if j else 0.0) ** beta + FLOOR for j in range(upto)]


def log_cut_ratio(current: Sequence[float], proposed: Sequence[float], cut: int, beta: float) -> float:
    """log lambda(c; y) - log lambda(c; x) from the entropies of the current state x and the
    proposed y (each over its own length: they differ under the EOS-terminated target)."""
    wx = cut_weights(current, beta, len(current))
    wy = cut_weights(proposed, beta, len(proposed))
    return (math.log(wy[cut]) - math.log(math.fsum(wy))) - (math.log(wx[cut]) - math.log(math.fsum(wx)))


def _entropy(state: ChainState) -> tuple[float, ...]:
    if state.entropy is None:
        raise EngineError("EntropyCut needs per-token entropy in the state; the engine returned none")
    return state.entropy


def race(entropy: Sequence[float], beta: float, upto: int, draws: DecisionDraws) -> int | None:
    """argmin_{j < upto} E_j / w_j, E_j = ``draws.exp1(j)``; None when ``upto`` is 0."""
    best, best_j = math.inf, None
    for j, (e, w) in enumerate(zip(draws.exp1s(upto), cut_weights(entropy, beta, upto))):
        v = e / w
        if v < best:
            best, best_j = v, j
    return best_j


BETA = number(0, strict=False, high=64, what="EntropyCut's cut-law power; Delta^beta must stay finite", example=4.0)


@dataclass(frozen=True)
class EntropyCutParams(Validated):
    """EntropyCut's own parameter: the cut law's power."""

    beta: float = option(4.0, "entropycut: power of the cut law, Delta^beta", BETA)


@dataclass(frozen=True)
class EntropyCutKernel:
    """EntropyCut as a :class:`~presto_sgl.kernels.base.Kernel` (module docstring)."""

    alpha: float
    temperature: float
    beta: float = 4.0
    ends: bool = field(default=False, kw_only=True)  # the EOS-terminated target (module docstring)
    name: ClassVar[str] = "entropycut"
    needs_entropy: ClassVar[bool] = True
    score_temperatures: ClassVar[tuple[float, ...]] = ()

    def __post_init__(self) -> None:
        BETA("beta", self.beta)

    def cut(self, state: ChainState, draws: DecisionDraws) -> int:
        c = race(_entropy(state), self.beta, state.length, draws)
        assert c is not None, "a stage has at least one response token"
        return c

    def prefetch_cut(self, root: ChainState, shared: int, draws: DecisionDraws) -> int | None:
        return race(_entropy(root), self.beta, min(shared, root.length), draws)

    def suffix_draws(self, cut: int, length: int, draws: DecisionDraws) -> tuple[SuffixDraw, ...]:
        return (SuffixDraw(self.temperature, draws.seed, entropy=True),)

    def decide(
        self, state: ChainState, proposals: Sequence[Proposal], draws: DecisionDraws
    ) -> tuple[ChainState, Transition]:
        if len(proposals) != 1:
            raise EngineError(f"EntropyCut decides on one proposal, got {len(proposals)}")
        p = proposals[0]
        current = _entropy(state)
        if p.entropy is None or len(p.entropy) != len(p.tokens):
            raise EngineError(f"proposal at cut {p.cut} needs {len(p.tokens)} entropies")
        extra = log_cut_ratio(current, current[: p.cut] + p.entropy, p.cut, self.beta)
        return mh_step(state, p, self.alpha, draws.uniform, extra, ends=self.ends)
