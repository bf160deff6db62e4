"""The walker: which path MH takes through the prefetched proposals.

From the round's root, at each decision take the proposal valid for the current
state (same cut, same kept prefix), draw the decision's uniform, accept (left) or
reject (right). Stop at the first decision with no valid proposal -- it is deferred
to the next round with its keyed cut -- or after ``max_steps`` transitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .kernel import Transition, mh_step
from .keys import DecisionDraws
from .proposals import DecisionId, ProposalStore
from .state import ChainState


@dataclass(frozen=True)
class Step:
    decision: DecisionId
    request: tuple[int, int]
    transition: Transition
    state: ChainState  # the state after this transition


@dataclass(frozen=True)
class WalkResult:
    state: ChainState
    path: str  # bits from the stage start, extended by this walk
    steps: tuple[Step, ...]


def walk(
    root: ChainState,
    root_path: str,
    k0: int,
    max_steps: int,
    *,
    alpha: float,
    decision_of: Callable[[str, int], DecisionId],
    draws: Callable[[DecisionId], DecisionDraws],
    store: ProposalStore,
) -> WalkResult:
    state, path = root, root_path
    steps: list[Step] = []
    for k in range(k0, k0 + max_steps):
        decision = decision_of(path, k)
        d = draws(decision)
        found = store.find(decision, state.tokens, d.cut(state.length))
        if found is None:
            break
        state, tr = mh_step(state, found.proposal, alpha, d.uniform)
        path += "1" if tr.accepted else "0"
        steps.append(Step(decision, found.request, tr, state))
    return WalkResult(state, path, tuple(steps))
