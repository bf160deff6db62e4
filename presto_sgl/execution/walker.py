"""The walker: which path MH takes through the prefetched proposals.

From the round's root, at each decision ask the kernel for its cut at the current
state, take the draws valid for that state (same cut, same kept prefix), and let the
kernel decide: accept (left) or reject (right). Stop at the first decision with no
valid draws -- it is deferred to the next round with its keyed randomness -- or after
``max_steps`` transitions (docs/design.md §4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..chain.keys import DecisionDraws, DecisionId
from ..chain.state import ChainState
from ..kernels.base import Kernel, Transition
from ..kernels.proposals import ProposalStore


@dataclass(frozen=True)
class Step:
    decision: DecisionId
    requests: tuple[tuple[int, int], ...]  # (call, request index) of the draws used
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
    kernel: Kernel,
    decision_of: Callable[[str, int], DecisionId],
    draws: Callable[[DecisionId], DecisionDraws],
    store: ProposalStore,
) -> WalkResult:
    state, path = root, root_path
    steps: list[Step] = []
    for k in range(k0, k0 + max_steps):
        decision = decision_of(path, k)
        d = draws(decision)
        found = store.take(decision, state.tokens, kernel.cut(state, d))
        if found is None:
            break
        state, tr = kernel.decide(state, found.proposals, d)
        path += "1" if tr.accepted else "0"
        steps.append(Step(decision, found.requests, tr, state))
    return WalkResult(state, path, tuple(steps))
