"""The paper's predictive rule (§3.3, App. C): budget allocation by predicted reaching weight.

Tree (path keys). Node v is a path of accept ("1") / reject ("0") bits. Its decision draws
the cut c_v of the proposal for its accept child v+; s_v is the cut that produced v's
state (T at the round's root, c_v at v+, s_v at v-). v is a *candidate* iff its depth
below the root is < K - k (depth cap), c_v <= s_v (Condition 1) and every strict
ancestor is a candidate: nothing is ever planned below a deferred node, so every
request is reachable in this batch.

Branch probabilities. From the predictor's class probabilities at the cut fraction c_v/T,

    h+(v) = (1 + P(accept) - P(reject)) / 2,   h-(v) = 1 - h+(v)      (Eq. 14)

and the reaching weight is R(root) = 1, R(v±) = R(v) h±(v) (Eq. 11). The predicted
number of transitions of an ancestor-closed selection I is sum_{v in I} R(v) (Lemma 1).

Allocation. The optimum over selections of at most N_pf candidates is V(root, N_pf) of

    V(v, b) = 0 if b = 0 or v is not a candidate,
    V(v, b) = 1 + max_{0<=m<b} [h+(v) V(v+, m) + h-(v) V(v-, b-1-m)]      (Eq. 19, Prop. 2)

Pruning. Since h± lie in [0, 1], R never increases along a path, so the N_pf candidates
of largest weight, taken best-first from the root (a child enters the frontier only after
its parent: they are ancestor-closed), carry the N_pf largest weights of the whole
candidate set and are themselves an optimal selection. The planner therefore runs the DP
on that tree of at most N_pf nodes, O(N_pf^2), instead of the exponential one; there it
keeps every node and returns the same V(root, N_pf) (tests check both trees against brute
force). Candidate generation draws at most 2 N_pf - 1 cuts.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import KW_ONLY, dataclass, field

from ..chain.keys import Keying
from ..predictor.certainty import Predictor, h_plus
from .base import PlannedRequest, PlanOffer, RoundContext, RoundFeedback, Stateless


@dataclass
class CandidateNode:
    """A candidate v: its path, decision cut c_v, h+(v) (Eq. 14) and weight R(v) (Eq. 11)."""

    path: str
    cut: int
    h: float
    weight: float
    _: KW_ONLY
    plus: CandidateNode | None = field(default=None, repr=False)
    minus: CandidateNode | None = field(default=None, repr=False)


def candidate_tree(ctx: RoundContext, predictor: Predictor, limit: int) -> list[CandidateNode]:
    """The ``limit`` heaviest candidates, best-first (parents before children; [0] is the root).

    Pops the heaviest frontier node; a deferred one (c_v > s_v) is dropped with its whole
    subtree, a candidate is kept and pushes its children with weights R h+ and R h-.
    ``limit`` large enough gives the whole candidate set (tests compare with brute force).
    """
    T = ctx.root.length
    depth_end = len(ctx.root_path) + ctx.remaining
    h_of: dict[int, float] = {}  # h+ by cut: one predictor call per distinct cut
    tie = itertools.count()  # equal weights pop in push order
    # (-R(v), tie, path of v, s_v, parent, v is the parent's accept child)
    frontier: list[tuple[float, int, str, int, CandidateNode | None, bool]] = []
    if ctx.remaining > 0:
        frontier.append((-1.0, next(tie), ctx.root_path, T, None, False))
    nodes: list[CandidateNode] = []
    while frontier and len(nodes) < limit:
        neg_weight, _, path, state_cut, parent, accepted = heapq.heappop(frontier)
        cut = ctx.cut(path, state_cut)
        if cut is None:  # Condition 1 fails: deferred, nothing below it
            continue
        if cut not in h_of:
            h_of[cut] = h_plus(predictor, cut / T)
        node = CandidateNode(path, cut, h_of[cut], -neg_weight)
        if parent is not None and accepted:
            parent.plus = node
        elif parent is not None:
            parent.minus = node
        nodes.append(node)
        if len(path) + 1 < depth_end:
            heapq.heappush(frontier, (neg_weight * node.h, next(tie), path + "1", cut, node, True))
            heapq.heappush(frontier, (neg_weight * (1.0 - node.h), next(tie), path + "0", state_cut, node, False))
    return nodes


def allocate(nodes: list[CandidateNode], budget: int) -> tuple[float, list[CandidateNode]]:
    """V(root, budget) of Eq. 19 over a candidate tree and a selection attaining it.

    ``nodes`` lists the tree parents-first (as :func:`candidate_tree` returns it). Each
    node's table V(v, 0..n_v) stops at its subtree size n_v (V is flat beyond), so the
    tables cost O(len(nodes) * budget). The selection is in ``nodes`` order.
    """
    if not nodes or budget < 1:
        return 0.0, []
    zero = [0.0]
    table: dict[int, list[float]] = {}  # id(v) -> V(v, b) for b = 0..min(n_v, budget)
    split: dict[int, list[int]] = {}  # id(v) -> the maximizing m for each b >= 1
    for v in reversed(nodes):  # children before parents
        vp = table[id(v.plus)] if v.plus is not None else zero
        vm = table[id(v.minus)] if v.minus is not None else zero
        n_p, n_m = len(vp) - 1, len(vm) - 1
        values, best_m = [0.0], [0]
        for b in range(1, min(n_p + n_m + 1, budget) + 1):
            best, arg = -1.0, 0
            for m in range(max(0, b - 1 - n_m), min(b - 1, n_p) + 1):
                value = v.h * vp[m] + (1.0 - v.h) * vm[b - 1 - m]
                if value > best:
                    best, arg = value, m
            values.append(1.0 + best)
            best_m.append(arg)
        table[id(v)], split[id(v)] = values, best_m
    root = nodes[0]
    chosen: set[int] = set()
    stack: list[tuple[CandidateNode | None, int]] = [(root, budget)]
    while stack:
        u, b = stack.pop()
        if u is None or b == 0:
            continue
        b = min(b, len(table[id(u)]) - 1)
        chosen.add(id(u))
        m = split[id(u)][b]
        stack += [(u.plus, m), (u.minus, b - 1 - m)]
    return table[id(root)][min(budget, len(table[id(root)]) - 1)], [v for v in nodes if id(v) in chosen]


class PredictivePlanner(Stateless):
    """Requests of the selection that maximizes the predicted transitions (Eqs. 14, 19).

    It has no round state: every run shares the one object and its predictor (an online
    predictor learns from every chain; its refits are thread-safe).
    """

    keying: Keying | None = "path"
    carries_over = False

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor

    def plan(self, ctx: RoundContext) -> list[PlannedRequest]:
        _, selection = allocate(candidate_tree(ctx, self.predictor, ctx.budget), ctx.budget)
        return [PlannedRequest(v.path, v.cut) for v in selection]

    def ranked(self, ctx: RoundContext) -> PlanOffer:
        """The candidates heaviest first: every prefix is an optimal selection of its size
        (Pruning, above), so V(n) = V(root, n) is the sum of the first n weights."""
        nodes = candidate_tree(ctx, self.predictor, ctx.budget)
        batch = [PlannedRequest(v.path, v.cut) for v in nodes]
        return PlanOffer(batch, tuple(itertools.accumulate(v.weight for v in nodes)))

    def observe(self, feedback: RoundFeedback) -> None:
        """Pass the realized decisions to the predictor as (c/T, eps-certainty class)."""
        self.predictor.observe(feedback.observations())
