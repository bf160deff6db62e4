"""The pieces every suffix-resampling MH kernel shares: the acceptance of one proposal, in log
space, in one function (:func:`log_acceptance`); the MH decision (:func:`accepts`); one transition
(:func:`mh_step`); and the uniform cut law (:class:`UniformCut`, :func:`log_uniform_cut`).

For a state x, a cut c and a candidate y = (x_{0:c}, y_{c+1:T}) drawn from q_tau (paper Eq. 6,
derivation App. B.1; docs/design.md §2):

    log A = min(0, [log q(x_suf) - log q(y_suf)] + alpha [log p0(y_suf) - log p0(x_suf)] + extra)

where every term is a sum of per-token log-probabilities over positions c+1..T under the shared
prefix x_{0:c}, and ``extra`` is the cut law's log lambda(c; y) - log lambda(c; x) (0 for the
uniform cut at a fixed length). Accept iff u <= A with u ~ Unif(0, 1].
"""

from __future__ import annotations

import math

from ..chain.keys import DecisionDraws
from ..chain.state import ChainState
from ..errors import EngineError
from .base import Proposal, Transition

NEG_INF = float("-inf")


def log_acceptance(
    logq_current: float,
    logq_proposal: float,
    logp_current: float,
    logp_proposal: float,
    alpha: float,
    extra: float = 0.0,
) -> float:
    """log A in [-inf, 0] for suffix log-probabilities of the current state and the proposal.

    ``extra`` is a finite log-ratio term added inside the min: a kernel whose cut law
    depends on the state passes log lambda(c; y) - log lambda(c; x) (EntropyCut).

    Infinite cases follow the limits of the ratio A = [p(y)^a q(x)] / [p(x)^a q(y)]:
    a proposal impossible under p0 is rejected (-inf); one that leaves an impossible
    current state is accepted (0); a current suffix the proposal could not propose back
    (q(x) = 0) is rejected. NaN, +inf, or a proposal with q(y) = 0 (it could not have
    been sampled) is an engine error, never a silent accept.
    """
    values = (logq_current, logq_proposal, logp_current, logp_proposal)
    if any(math.isnan(v) or v == math.inf for v in values):
        raise EngineError(f"log-probabilities must be finite or -inf, got (logq_x, logq_y, logp_x, logp_y) = {values}")
    if logq_proposal == NEG_INF:
        raise EngineError("the proposal has log q_tau = -inf: the engine returned a suffix it could not have sampled")
    if logp_proposal == NEG_INF:
        return NEG_INF
    if logp_current == NEG_INF:
        return 0.0
    if logq_current == NEG_INF:
        return NEG_INF
    return min(0.0, (logq_current - logq_proposal) + alpha * (logp_proposal - logp_current) + extra)


def accepts(log_a: float, u: float) -> bool:
    """The MH decision: accept iff u <= A, with u in (0, 1]."""
    return log_a >= 0.0 or (log_a > NEG_INF and math.log(u) <= log_a)


def log_uniform_cut(length: int) -> float:
    """log lambda(c; z) = -log L(z) of the uniform cut over a state of ``length`` tokens."""
    return -math.log(length)


def mh_step(
    state: ChainState, proposal: Proposal, alpha: float, u: float, extra: float = 0.0, *, ends: bool = False
) -> tuple[ChainState, Transition]:
    """One suffix-resampling MH transition of ``state`` with a scored ``proposal`` and uniform
    ``u``; ``extra`` is :func:`log_acceptance`'s cut-law term (0 for PowerMH's uniform cut at
    a fixed length). ``ends``: the EOS-terminated target, whose proposal may have any length
    >= 1 (the engine checked it against its request); else it has the state's."""
    c = proposal.cut
    n = len(proposal.tokens)
    if (n < 1) if ends else (n != state.length - c):
        want = "at least 1" if ends else str(state.length - c)
        raise EngineError(f"proposal at cut {c} has {n} tokens, expected {want}")
    log_a = log_acceptance(
        state.suffix_logq(c),
        math.fsum(proposal.logq),
        state.suffix_logp(c),
        math.fsum(proposal.logp),
        alpha,
        extra,
    )
    accepted = accepts(log_a, u)
    new_state = (
        state.replace_suffix(c, proposal.tokens, proposal.logq, proposal.logp, proposal.entropy) if accepted else state
    )
    return new_state, Transition(cut=c, log_accept=log_a, uniform=u, accepted=accepted)


def uniform_race(upto: int, draws: DecisionDraws) -> int | None:
    """argmin_{j < upto} E_j of the decision's keyed Exp(1) variables (uniform on
    {0..upto-1}); None when ``upto`` is 0."""
    if upto < 1:
        return None
    e = draws.exp1s(upto)
    return min(range(upto), key=e.__getitem__)


class UniformCut:
    """The uniform cut c ~ Unif{0..L(x)-1} (PowerMH, MultiTryMH).

    Fixed length (L = T at every state of a stage): c = ``draws.cut(T)``, a function of T
    only, so a decision is prefetchable from any node whose state keeps the root's first
    ``shared`` >= c tokens (Condition 1). EOS-terminated target (``ends``): L varies with the
    state, so c is the exponential race argmin_{j < L(x)} E_j with keyed E_j ~ Exp(1); a node
    that keeps the root's first ``shared`` tokens knows the race over j < shared, and the
    walker reruns it on the realized state (a tail winner defers the decision, as EntropyCut's)."""

    ends: bool

    def cut(self, state: ChainState, draws: DecisionDraws) -> int:
        if self.ends:
            c = uniform_race(state.length, draws)
            assert c is not None, "a stage has at least one response token"
            return c
        return draws.cut(state.length)

    def prefetch_cut(self, root: ChainState, shared: int, draws: DecisionDraws) -> int | None:
        if self.ends:
            return uniform_race(min(shared, root.length), draws)
        c = draws.cut(root.length)
        return c if c <= shared else None
