"""The step rule: one shared request per depth, with carry-over (docs/design.md §5).

With step keys every node at depth d shares decision k0 + d, its cut and its draws, so
one request root[0:c_k] + suffix serves every node at that depth whose state still
starts with root[0:c_k]. Draws still valid from earlier rounds are carried over instead
of regenerated.
"""

from __future__ import annotations

from ..chain.keys import Keying
from .base import PlannedRequest, RoundContext, Stateless


class StepPlanner(Stateless):
    """The first ``budget`` depths without a carried-over proposal, from the root prefix."""

    keying: Keying | None = "step"
    carries_over = True

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        batch: list[PlannedRequest] = []
        for k in range(ctx.k0, ctx.k0 + ctx.remaining):
            if len(batch) >= ctx.budget:
                break
            cut = ctx.root_cut(k)
            if ctx.store.find(k, ctx.root.tokens, cut) is None:
                batch.append(PlannedRequest(k, cut))
        return batch
