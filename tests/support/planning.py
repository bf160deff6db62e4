"""Shared helpers of the planner tests: stub draws with forced cuts, round contexts on a
hand-built or random tree, and forced proposals (imported, never collected as tests)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from presto_sgl import ChainState
from presto_sgl.chain.keys import DecisionDraws, DecisionId
from presto_sgl.kernels import PowerMHKernel, Proposal
from presto_sgl.kernels.proposals import ProposalStore, StoredProposal
from presto_sgl.planners import RoundContext

KERNEL = PowerMHKernel(alpha=4.0, temperature=0.25)
"""The kernel of every hand-built round (PowerMH: the cut is the keyed uniform cut)."""


@dataclass(frozen=True)
class Forced:
    """Stub draws: a fixed cut and uniform per decision."""

    c: int
    uniform: float = 0.5
    seed: int = 0

    def cut(self, length: int) -> int:
        assert 0 <= self.c < length
        return self.c


def forced_draws(cuts: Mapping[Any, int]) -> Callable[[DecisionId], DecisionDraws]:
    """The draws of a round whose decision d has cut ``cuts[d]``: :class:`Forced` stands in for
    :class:`DecisionDraws` (it has what a PowerMH round reads of them: cut, uniform, seed)."""
    return lambda d: cast(DecisionDraws, Forced(cuts[d]))


def root_state(T: int = 10) -> ChainState:
    return ChainState((99,), tuple(range(T)), (-1.0,) * T, (-1.0,) * T)


def ctx(cuts: dict, *, root_path="", k0=0, remaining=3, budget=6, store=None, T=10, keying=None) -> RoundContext:
    """A round at ``root_state(T)`` whose decision d has cut ``cuts[d]``; path keys when the
    decisions are paths (strings), step keys when they are indices (unless ``keying``)."""
    if keying is None:
        keying = "path" if all(isinstance(d, str) for d in cuts) else "step"
    return RoundContext(
        root_state(T),
        root_path,
        k0,
        remaining,
        budget=budget,
        draws=forced_draws(cuts),
        store=store or ProposalStore(),
        kernel=KERNEL,
        keying=keying,
    )


# Hand-built tree (T = 10, root cut T). Decision cuts by node path:
CUTS = {
    "": 5,
    "1": 3,
    "0": 7,
    "11": 4,
    "10": 2,
    "01": 8,
    "00": 9,
    "110": 1,
    "010": 6,
    "101": 0,
    "100": 1,
    "001": 3,
    "000": 2,
}


def _prop(cut: int, good: bool, T: int = 10) -> Proposal:
    """A proposal forced to be accepted (p0 = 1 per token) or rejected (p0 = 0)."""
    n = T - cut
    lp = 0.0 if good else -math.inf
    return Proposal(cut, tuple(100 + cut + i for i in range(n)), (-1.0,) * n, (lp,) * n)


def stored(prefix: tuple[int, ...], proposal: Proposal, request: tuple[int, int] = (0, 0)) -> StoredProposal:
    """A one-draw stored proposal (PowerMH) sent as ``request`` = (call, index)."""
    return StoredProposal(prefix, (proposal,), (request,))


# -- random step-keyed rounds (cost-aware planner tests) -----------------------------------


def proposal(prefix: tuple[int, ...], T: int, fill: int) -> StoredProposal:
    c = len(prefix)
    return stored(prefix, Proposal(c, (fill,) * (T - c), (0.0,) * (T - c), (0.0,) * (T - c)))


def random_context(rng: random.Random) -> RoundContext:
    """A round with random cuts, budget and depth cap; some depths carried over, some stale."""
    T = rng.randint(2, 12)
    root = ChainState((99,), tuple(range(T)), (0.0,) * T, (0.0,) * T)
    k0, remaining = rng.randint(0, 3), rng.randint(1, 9)
    cuts = {k: rng.randrange(T) for k in range(k0, k0 + remaining)}
    store = ProposalStore()
    for k, c in cuts.items():
        if rng.random() < 0.3:  # carried over: generated from a prefix of this root
            store.add(k, proposal(root.tokens[:c], T, 100 + k))
        elif rng.random() < 0.2 and c > 0:  # stale: its prefix is not the root's
            store.add(k, proposal((-1,) + root.tokens[1:c], T, 100 + k))
    return RoundContext(
        root,
        "",
        k0,
        remaining,
        budget=rng.randint(1, 8),
        draws=forced_draws(cuts),
        store=store,
        kernel=KERNEL,
        keying="step",
    )


def random_theta(rng: random.Random) -> np.ndarray:
    return np.array(
        [rng.uniform(0, 1), rng.uniform(0, 0.2), rng.uniform(0, 0.3), rng.uniform(0, 0.1), rng.uniform(0, 0.2)]
    )
