"""Scored proposals waiting to be used, keyed by the decision they were drawn for.

A proposal for decision d with cut c was generated from a prefix P of c response
tokens. It may serve any state whose first c tokens equal P: that is the only
validity rule (Condition 1 generalized to the longest common prefix), and it depends
on the path, never on the proposal's content, so using it is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kernel import Proposal

DecisionId = int | str


@dataclass(frozen=True)
class StoredProposal:
    prefix: tuple[int, ...]  # the c response tokens the suffix was generated after
    proposal: Proposal
    request: tuple[int, int]  # (call index, request index in that call)


class ProposalStore:
    """Proposals by decision; at most one per (decision, prefix)."""

    def __init__(self) -> None:
        self._by_decision: dict[DecisionId, list[StoredProposal]] = {}

    def add(self, decision: DecisionId, stored: StoredProposal) -> None:
        entries = self._by_decision.setdefault(decision, [])
        if any(e.prefix == stored.prefix for e in entries):
            raise ValueError(f"decision {decision!r} already has a proposal for this prefix")
        entries.append(stored)

    def find(self, decision: DecisionId, tokens: tuple[int, ...], cut: int) -> StoredProposal | None:
        """The proposal of ``decision`` valid for a state with response ``tokens``, if any."""
        for e in self._by_decision.get(decision, ()):
            if e.proposal.cut == cut and tokens[:cut] == e.prefix:
                return e
        return None

    def discard_before(self, k: int) -> None:
        """Drop step-keyed proposals of decisions < k (they can no longer be used)."""
        for d in [d for d in self._by_decision if isinstance(d, int) and d < k]:
            del self._by_decision[d]

    def clear(self) -> None:
        self._by_decision.clear()

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_decision.values())
