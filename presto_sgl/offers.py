"""What a chain asks of the shared scheduler: its candidate requests, grouped by decision."""

from __future__ import annotations

from dataclasses import dataclass

from .engines.base import Request


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
