"""eps-certainty of MH decisions, and the predictor protocol the planners use.

A scored decision with acceptance probability A is *eps-certain reject* if A <= eps,
*eps-certain accept* if A >= 1 - eps, else *uncertain* (eps = 0.01; paper §3.3).
A predictor maps a candidate decision's cut fraction c/T to the probabilities of the
three classes; planners turn them into the branch probability of the accept child

    h+ = (1 + P(accept) - P(reject)) / 2        (paper Eq. 14)

(an uncertain decision counts as a fair coin). Predictors only ever see decisions the
chain has already realized, never the content of an unused proposal, so planning with
them -- online refits included -- keeps the chain exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import ConfigError

EPS = 0.01
REJECT, UNCERTAIN, ACCEPT = 0, 1, 2
CLASSES = ("reject", "uncertain", "accept")


def certainty_class(log_accept: float, eps: float = EPS) -> int:
    """REJECT if A <= eps, ACCEPT if A >= 1 - eps, else UNCERTAIN (A = exp(log_accept))."""
    if not 0.0 < eps < 0.5:
        raise ConfigError("eps", eps, f"{{eps}} (={eps!r}) must lie in (0, 0.5), e.g. 0.01")
    if math.isnan(log_accept):
        raise ValueError("`log_accept` is NaN; the kernel never produces NaN acceptance")
    if log_accept <= math.log(eps):
        return REJECT
    if log_accept >= math.log1p(-eps):
        return ACCEPT
    return UNCERTAIN


@dataclass(frozen=True)
class Observation:
    """One realized decision: its cut fraction c/T and its eps-certainty class."""

    cut_fraction: float
    label: int
    group: str = ""  # the prompt it came from (held-out evaluation splits by group)


class Predictor(Protocol):
    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        """(P(reject), P(uncertain), P(accept)) for a decision with cut fraction c/T."""
        ...

    def observe(self, observations: Sequence[Observation]) -> None:
        """Decisions the run just realized (online predictors refit; others ignore them)."""
        ...


def h_plus(predictor: Predictor, cut_fraction: float) -> float:
    """Predicted probability that the decision accepts (paper Eq. 14)."""
    p_rej, _, p_acc = predictor.proba(cut_fraction)
    return 0.5 * (1.0 + p_acc - p_rej)


@dataclass(frozen=True)
class ConstantPredictor:
    """The same class probabilities for every decision (e.g. the class prior)."""

    p_reject: float = 0.6
    p_uncertain: float = 0.2
    p_accept: float = 0.2

    def __post_init__(self) -> None:
        ps = (self.p_reject, self.p_uncertain, self.p_accept)
        if any(not (0.0 <= p <= 1.0) for p in ps) or abs(sum(ps) - 1.0) > 1e-9:
            raise ValueError(f"class probabilities {ps} must lie in [0, 1] and sum to 1")

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        return (self.p_reject, self.p_uncertain, self.p_accept)

    def observe(self, observations: Sequence[Observation]) -> None:
        return None
