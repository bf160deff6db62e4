"""MultiTryMH: multiple-try Metropolis (Liu et al. 2000) over suffixes, at a uniform cut.

The paper's "EGPS with random position" (App. D.1). Per transition of a state x:

1. cut c ~ Unif{0..T-1}, as in PowerMH; every draw keeps the prefix x_{0:c};
2. m candidate suffixes y_1..y_m, each from q_{tau_j}(. | x_{0:c}) with tau_j drawn
   uniformly (keyed) from the temperature set S. Marginally every draw comes from the
   one proposal Q(z) = (1/|S|) sum_{tau in S} q_tau(z_suf | x_{0:c}): a mixture over whole
   suffixes, the same law for every try;
3. select y = y_J with probability w(y_J) / sum_j w(y_j), where w is the importance weight

       w(z) = pi_alpha(z) / Q(z)  ∝  p0(z_suf | x_{0:c})^alpha / Q(z_suf)

   (the prefix factor p0(x_{0:c})^alpha is common to every draw and cancels);
4. m - 1 reference suffixes x*_1..x*_{m-1} from Q after the same prefix (y_{0:c} =
   x_{0:c}, so they need not wait for the selection: candidates and references go in one
   call), and x*_m = x;
5. accept y with log A = min(0, log sum_j w(y_j) - log sum_j w(x*_j))
   (:func:`log_multitry_acceptance`, log-sum-exp in log space).

Key step of the derivation (detailed balance for a fixed c). With W = w(y) + S_1 and
W* = w(x) + S_2, S_1, S_2 the weight sums of the other m - 1 candidates and of the
references (i.i.d. with the same law, both drawn from Q at the shared prefix),

    pi(x) P(x -> y) = m pi(x) Q(y) w(y) E[ (1/W) min(1, W/W*) ] = m pi(x) pi(y) E[ 1/max(W, W*) ]

(the m slots J may take, each with y drawn from Q), because Q(y) w(y) = pi(y). Both
factors are symmetric under the swap x <-> y, S_1 <-> S_2. So each cut's kernel is pi-reversible, and so is their
uniform mixture. The weights need Q of the current suffix too, i.e. log q_tau of x at
every tau in S: states carry per-token ``logq_at`` from the pass that produced them
(engines return it for the request's ``score_temperatures``; the SGLang plugin returns
the per-position log-normalizers log sum_u p0(u)^(1/tau)), so no candidate is ever
rescored.

EOS-terminated target (``ends``): the cut law lambda(c; z) = 1/L(z) depends on the state,
so the weight carries it, w(z) = pi_alpha(z) lambda(c; z) / Q(z); then Q(y) w(y) =
pi(y) lambda(c; y) and the same swap argument gives pi(x) lambda(c; x) P_c(x -> y) symmetric.
Draws and the current suffix may have different lengths (L(z) = c + |z_suf|).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ..chain.keys import SEED_MASK, DecisionDraws, randbelow, uniform01
from ..chain.state import ChainState
from ..errors import EngineError
from ..fields import Validated, integer, option, temperatures
from .base import Proposal, SuffixDraw, Transition
from .mh import NEG_INF, UniformCut, accepts, log_uniform_cut


def logsumexp(values: Sequence[float]) -> float:
    """log sum exp(v), -inf for no values or all -inf."""
    top = max(values, default=NEG_INF)
    if top == NEG_INF:
        return NEG_INF
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def log_weight(logp: Sequence[float], logq_at: Sequence[Sequence[float]], alpha: float) -> float:
    """log w(z) = alpha log p0(z_suf) - log Q(z_suf), Q the uniform temperature mixture;
    ``logq_at[t][i]`` is log q at temperature i of suffix token t."""
    k = len(logq_at[0]) if logq_at else 1
    per_temp = [math.fsum(row[i] for row in logq_at) for i in range(k)]
    lp = math.fsum(logp)
    if lp == NEG_INF:
        return NEG_INF
    return alpha * lp - (logsumexp(per_temp) - math.log(k))


def log_multitry_acceptance(candidates: Sequence[float], back: Sequence[float]) -> float:
    """The multiple-try log A = min(0, logsumexp(candidates) - logsumexp(back)) in [-inf, 0].

    ``candidates`` are log w(y_1..y_m), ``back`` log w(x*_1..x*_{m-1}, x). Candidates all
    impossible under p0 reject (-inf); a back set of weight 0 (an impossible current state
    and references) accepts (0). NaN or +inf is an engine error, never a silent accept.
    """
    values = (*candidates, *back)
    if any(math.isnan(v) or v == math.inf for v in values):
        raise EngineError(f"multiple-try log weights must be finite or -inf, got {values}")
    num, den = logsumexp(candidates), logsumexp(back)
    if num == NEG_INF:
        return NEG_INF
    if den == NEG_INF:
        return 0.0
    return min(0.0, num - den)


def select(log_weights: Sequence[float], u: float) -> int:
    """The index j with probability w_j / sum w, by inverse CDF at u in (0, 1]."""
    total = logsumexp(log_weights)
    if total == NEG_INF:
        return 0
    acc = 0.0
    for j, lw in enumerate(log_weights):
        acc += math.exp(lw - total)
        if u <= acc:
            return j
    return max(j for j, lw in enumerate(log_weights) if lw > NEG_INF)  # rounding: the last possible try


def _logq_at(name: str, values: tuple[tuple[float, ...], ...] | None, n: int, k: int) -> tuple[tuple[float, ...], ...]:
    if values is None or len(values) != n or any(len(row) != k for row in values):
        raise EngineError(f"MultiTryMH needs log q at {k} temperatures for each of the {n} tokens of the {name}")
    return values


TRIES = integer(1, "MultiTryMH's candidates per transition", 4)
TEMPERATURES = temperatures("(0.25, 0.5, 1.0)")


@dataclass(frozen=True)
class MultiTryParams(Validated):
    """MultiTryMH's own parameters: m and the temperature set S."""

    tries: int = option(4, "multitry: candidate suffixes per transition, m", TRIES)
    try_temperatures: tuple[float, ...] = option(
        (0.25, 0.5, 1.0), "multitry: the set each draw's temperature is drawn from", TEMPERATURES, metavar="T1,T2,..."
    )


@dataclass(frozen=True)
class MultiTryKernel(UniformCut):
    """MultiTryMH as a :class:`~presto_sgl.kernels.base.Kernel` (module docstring).

    ``tries`` is m; ``temperatures`` the set S each draw's temperature is drawn from.
    A decision sends 2m - 1 draws: the m candidates, then the m - 1 references.
    """

    alpha: float
    temperatures: tuple[float, ...] = (0.25, 0.5, 1.0)
    tries: int = 4
    ends: bool = field(default=False, kw_only=True)  # the EOS-terminated target (module docstring)
    name: ClassVar[str] = "multitry"
    needs_entropy: ClassVar[bool] = False

    def __post_init__(self) -> None:
        TRIES("tries", self.tries)
        object.__setattr__(self, "temperatures", TEMPERATURES("temperatures", self.temperatures))

    @property
    def score_temperatures(self) -> tuple[float, ...]:
        return self.temperatures

    def suffix_draws(self, cut: int, length: int, draws: DecisionDraws) -> tuple[SuffixDraw, ...]:
        S = self.temperatures
        return tuple(
            SuffixDraw(
                S[randbelow(draws.subkey("temperature", i), len(S))],
                draws.subkey("seed", i) & SEED_MASK,
                score_temperatures=S,
            )
            for i in range(2 * self.tries - 1)
        )

    def decide(
        self, state: ChainState, proposals: Sequence[Proposal], draws: DecisionDraws
    ) -> tuple[ChainState, Transition]:
        m, k = self.tries, len(self.temperatures)
        if len(proposals) != 2 * m - 1:
            raise EngineError(f"MultiTryMH with m={m} decides on {2 * m - 1} draws, got {len(proposals)}")
        c = proposals[0].cut
        n = state.length - c
        for p in proposals:
            if p.cut != c or ((len(p.tokens) < 1) if self.ends else (len(p.tokens) != n)):
                want = "at least 1" if self.ends else str(n)
                raise EngineError(
                    f"a MultiTryMH draw at cut {p.cut} has {len(p.tokens)} tokens, expected {want} at cut {c}"
                )
        current = _logq_at("current state", state.logq_at, state.length, k)[c:]
        lw = [log_weight(p.logp, _logq_at("draw", p.logq_at, len(p.tokens), k), self.alpha) for p in proposals]
        lw_x = log_weight(state.logp[c:], current, self.alpha)
        if self.ends:  # the cut law 1/L(z) of each state (module docstring)
            lw = [w + log_uniform_cut(c + len(p.tokens)) for w, p in zip(lw, proposals)]
            lw_x += log_uniform_cut(state.length)
        candidates, references = lw[:m], lw[m:]
        u = draws.uniform
        log_a = log_multitry_acceptance(candidates, [*references, lw_x])
        j = select(candidates, uniform01(draws.subkey("select")))
        accepted = accepts(log_a, u)
        y = proposals[j]
        new_state = state.replace_suffix(c, y.tokens, y.logq, y.logp, y.entropy, y.logq_at) if accepted else state
        return new_state, Transition(cut=c, log_accept=log_a, uniform=u, accepted=accepted, selected=j)
