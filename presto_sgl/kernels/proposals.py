"""Scored proposals waiting to be used, keyed by the decision they were drawn for.

The draws of decision d at cut c were generated after a prefix P of c response
tokens. They may serve any state whose first c tokens equal P and whose own cut for d
is c: that is the only validity rule (Condition 1 generalized to the longest common
prefix), and it depends on the path, never on the draws' content, so using them is
exact (docs/design.md §4). Each stored set is used at most once (a decision is walked once
per chain), so the values are checked when the walk takes them (:meth:`ProposalStore.take`):
draws that are never used are never read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..chain.keys import DecisionId
from .base import Proposal


@dataclass(frozen=True)
class StoredProposal:
    """The scored draws of one decision at one cut (one per :meth:`Kernel.suffix_draws`)."""

    prefix: tuple[int, ...]  # the c response tokens the draws were generated after
    proposals: tuple[Proposal, ...]
    requests: tuple[tuple[int, int], ...]  # (call index, request index in that call) of each draw

    @property
    def cut(self) -> int:
        return len(self.prefix)


class ProposalStore:
    """Scored draws by decision; at most one set per (decision, prefix). ``check`` (e.g. the
    engine output's value check) runs on each draw the walk takes."""

    def __init__(self, check: Callable[[Proposal], None] | None = None) -> None:
        self._by_decision: dict[DecisionId, list[StoredProposal]] = {}
        self._check = check

    def add(self, decision: DecisionId, stored: StoredProposal) -> None:
        entries = self._by_decision.setdefault(decision, [])
        if any(e.prefix == stored.prefix for e in entries):
            raise ValueError(f"decision {decision!r} already has a proposal for this prefix")
        entries.append(stored)

    def find(self, decision: DecisionId, tokens: tuple[int, ...], cut: int) -> StoredProposal | None:
        """The draws of ``decision`` valid for a state with response ``tokens`` and cut ``cut``."""
        for e in self._by_decision.get(decision, ()):
            if e.cut == cut and tokens[:cut] == e.prefix:
                return e
        return None

    def take(self, decision: DecisionId, tokens: tuple[int, ...], cut: int) -> StoredProposal | None:
        """:meth:`find` for the walk, which decides with the draws: each is checked first."""
        found = self.find(decision, tokens, cut)
        if found is not None and self._check is not None:
            for p in found.proposals:
                self._check(p)
        return found

    def discard_before(self, k: int) -> None:
        """Drop step-keyed proposals of decisions < k (they can no longer be used)."""
        for d in [d for d in self._by_decision if isinstance(d, int) and d < k]:
            del self._by_decision[d]

    def clear(self) -> None:
        self._by_decision.clear()

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_decision.values())
