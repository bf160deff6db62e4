"""The paper's breadth-first rule (§3.2) over the path-keyed tree, quirk included.

Root cut T; expanding node v forms the request of its decision; it is feasible iff the
kernel's cut for v is decided by, and within, the tokens v's state keeps from the root
(for PowerMH: c_v <= the cut that produced v's state; Condition 1). Feasible: add it and
enqueue the accept child. Infeasible: defer (the cut is kept: it is keyed). The reject
child is enqueued either way -- the paper's quirk: requests below a deferred node are
issued but unreachable in this batch. Depth cap K - k, budget N_pf.
"""

from __future__ import annotations

from collections import deque

from ..config import Keying
from .base import PlannedRequest, RoundContext, Stateless


class BFSPlanner(Stateless):
    """Breadth-first requests of the path-keyed tree, up to the budget."""

    keying: Keying | None = "path"
    carries_over = False

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        T = ctx.root.length
        depth0 = len(ctx.root_path)
        # (node path, tokens its state keeps from the root, reachable in this batch)
        queue: deque[tuple[str, int, bool]] = deque([(ctx.root_path, T, True)])
        batch: list[PlannedRequest] = []
        while queue and len(batch) < ctx.budget:
            path, shared, reachable = queue.popleft()
            if len(path) - depth0 >= ctx.remaining:
                continue
            cut = ctx.cut(path, shared)
            if cut is not None:
                batch.append(PlannedRequest(path, cut, reachable))
                queue.append((path + "1", cut, reachable))
            queue.append((path + "0", shared, reachable and cut is not None))
        return batch
