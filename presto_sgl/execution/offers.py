"""A chain and the shared scheduler (:mod:`presto_sgl.scheduling.scheduler`): what the chain asks of it (an
:class:`Offer`: its candidate requests, grouped by decision) and the chain's :class:`Lane` to it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engines.base import Completion, Request

Served = tuple[int, list[Completion], float]
"""What the scheduler answers an offer: (groups taken, their completions in order, the call's seconds)."""


@dataclass(frozen=True)
class Offer:
    """A chain's candidate requests: ``groups[j]`` the draws of its j-th planned decision,
    ``values[n-1]`` = V(n) (None: send every group), ``preferred`` the chain's own n."""

    groups: tuple[tuple[Request, ...], ...]
    values: tuple[float, ...] | None = None
    preferred: int | None = None

    def __post_init__(self) -> None:
        if not self.groups or any(not g for g in self.groups):
            raise ValueError("an offer needs at least one group, each of at least one request")
        if self.values is not None and len(self.values) != len(self.groups):
            raise ValueError(f"{len(self.values)} values for {len(self.groups)} groups")
        if self.preferred is not None and not 1 <= self.preferred <= len(self.groups):
            raise ValueError(f"preferred {self.preferred} outside 1..{len(self.groups)}")


@dataclass(frozen=True)
class Lane:
    """A chain's place in a shared scheduler (:meth:`Scheduler.chain`), handed to the chain's
    method (``run(..., lane=...)``): its calls go to the scheduler's rounds (``send``, the
    scheduler's ``submit``) through it. ``check`` runs before each (a pool's cancellation of the
    chain's request: the scheduler calls the backend itself, not the chain's guarded engine);
    ``shares`` says whether the scheduler weighs the chains' offers now (:meth:`sharing`)."""

    send: Callable[[Offer], Served]
    check: Callable[[], None] | None = None
    shares: Callable[[], bool] = lambda: True

    def sharing(self) -> bool:
        """Whether this round's call is shared: the scheduler weighs the chain's ranked offer
        (its values and own pick) against the others'. False: the chain plans and calls its
        engine alone (the per-chain rule)."""
        return self.shares()

    def submit(self, offer: Offer) -> Served:
        """``send(offer)``, after ``check``."""
        if self.check is not None:
            self.check()
        return self.send(offer)
