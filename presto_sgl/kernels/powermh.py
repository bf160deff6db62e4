"""PowerMH: suffix resampling at a uniform cut c ~ Unif{0..T-1}, one candidate from q_tau per
decision, accepted by :func:`~presto_sgl.kernels.mh.log_acceptance` (paper Eq. 6).

EOS-terminated target (``ends``; docs/design.md §2.1): responses end at their first stop
token or at the stage horizon H, so lengths vary; the cut is uniform over the *current*
length, c ~ Unif{0..L(x)-1}, the suffix is drawn until a stop token or H, and the reverse
move's cut law adds log lambda(c; y) - log lambda(c; x) = log L(x) - log L(y) to the ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ..chain.keys import DecisionDraws
from ..chain.state import ChainState
from ..errors import EngineError
from ..fields import Validated
from .base import Proposal, SuffixDraw, Transition
from .mh import UniformCut, log_uniform_cut, mh_step


@dataclass(frozen=True)
class PowerMHParams(Validated):
    """PowerMH has no parameters beyond the schedule's (alpha, tau)."""


@dataclass(frozen=True)
class PowerMHKernel(UniformCut):
    """PowerMH as a :class:`~presto_sgl.kernels.base.Kernel`: uniform cut, one suffix from
    q_tau per decision, the acceptance of :func:`log_acceptance` (with the cut-law term of
    :func:`log_uniform_cut` when ``ends``)."""

    alpha: float
    temperature: float
    ends: bool = field(default=False, kw_only=True)  # the EOS-terminated target (module docstring)
    name: ClassVar[str] = "powermh"
    needs_entropy: ClassVar[bool] = False
    score_temperatures: ClassVar[tuple[float, ...]] = ()

    def suffix_draws(self, cut: int, length: int, draws: DecisionDraws) -> tuple[SuffixDraw, ...]:
        return (SuffixDraw(self.temperature, draws.seed),)

    def decide(
        self, state: ChainState, proposals: Sequence[Proposal], draws: DecisionDraws
    ) -> tuple[ChainState, Transition]:
        if len(proposals) != 1:
            raise EngineError(f"PowerMH decides on one proposal, got {len(proposals)}")
        p = proposals[0]
        if not self.ends:
            return mh_step(state, p, self.alpha, draws.uniform)
        extra = log_uniform_cut(p.cut + len(p.tokens)) - log_uniform_cut(state.length)
        return mh_step(state, p, self.alpha, draws.uniform, extra, ends=True)
