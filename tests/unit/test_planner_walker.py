"""Layer 1: Condition 1, the BFS visiting order on a hand-built tree, the step rule's
shared requests and carry-over, and the walk with forced outcomes."""

from __future__ import annotations

import pytest

from presto_sgl.execution.walker import walk
from presto_sgl.kernels import Proposal
from presto_sgl.kernels.proposals import ProposalStore, StoredProposal
from presto_sgl.planners import BFSPlanner, PlannedRequest, StepPlanner
from tests.support.planning import CUTS, KERNEL, Forced, _prop, ctx, root_state, stored

pytestmark = pytest.mark.exactness  # pins an invariant the exactness proof rests on


def test_bfs_order_condition1_deferral_and_quirk():
    # Depth 0-2: ""(5<=10 ok) "1"(3<=5 ok) "0"(7<=10 ok) "11"(4>3 DEFER) "10"(2<=5 ok)
    # "01"(8>7 DEFER) "00"(9<=10 ok). Depth 3 (cap 4): "110" and "010" hang below the
    # deferred "11" and "01" (the quirk): issued but unreachable in this batch.
    got = BFSPlanner().plan(ctx(CUTS, remaining=4, budget=20))
    assert got == [
        PlannedRequest("", 5),
        PlannedRequest("1", 3),
        PlannedRequest("0", 7),
        PlannedRequest("10", 2),
        PlannedRequest("00", 9),
        PlannedRequest("110", 1, reachable=False),
        PlannedRequest("101", 0),
        PlannedRequest("100", 1),
        PlannedRequest("010", 6, reachable=False),
        PlannedRequest("001", 3),
        PlannedRequest("000", 2),
    ]
    # Depth cap 3: nothing at depth 3 is expanded.
    assert [p.decision for p in BFSPlanner().plan(ctx(CUTS, remaining=3, budget=20))] == ["", "1", "0", "10", "00"]


def test_bfs_budget_and_depth_cap():
    assert [p.decision for p in BFSPlanner().plan(ctx(CUTS, budget=3))] == ["", "1", "0"]
    assert [p.decision for p in BFSPlanner().plan(ctx(CUTS, remaining=1))] == [""]
    # A later round: node paths continue from the root path; the root's own cut is T again.
    cuts = {"10" + p: c for p, c in CUTS.items()}
    assert [p.decision for p in BFSPlanner().plan(ctx(cuts, root_path="10", budget=2))] == ["10", "101"]


def test_condition1_is_against_the_cut_that_made_the_state():
    # Node "1" (accept child of the root) was made by cut 5: its decision's cut 5 is
    # feasible (c' <= c), cut 6 is deferred.
    assert PlannedRequest("1", 5) in BFSPlanner().plan(ctx({**CUTS, "1": 5}, remaining=2))
    assert [p.decision for p in BFSPlanner().plan(ctx({**CUTS, "1": 6}, remaining=2))] == ["", "0"]
    # Node "0" (reject child) keeps the root's state: its cut 9 is checked against T = 10.
    assert PlannedRequest("0", 9) in BFSPlanner().plan(ctx({**CUTS, "0": 9}, remaining=2))


def test_step_planner_one_request_per_depth_and_carry_over():
    cuts = dict(enumerate([5, 8, 2, 9, 4]))
    store = ProposalStore()
    plan = StepPlanner().plan(ctx(cuts, k0=1, remaining=4, budget=3, store=store))
    assert plan == [PlannedRequest(1, 8), PlannedRequest(2, 2), PlannedRequest(3, 9)]
    # A proposal for decision 2 generated from this root's prefix is carried over.
    root = root_state()
    store.add(2, StoredProposal(root.tokens[:2], (Proposal(2, (0,) * 8, (-1.0,) * 8, (-1.0,) * 8),), ((0, 0),)))
    plan = StepPlanner().plan(ctx(cuts, k0=1, remaining=4, budget=3, store=store))
    assert plan == [PlannedRequest(1, 8), PlannedRequest(3, 9), PlannedRequest(4, 4)]


def test_walk_follows_forced_outcomes_and_stops_at_missing_proposal():
    root = root_state()
    store = ProposalStore()
    plan = {"": (5, True), "1": (3, False), "10": (2, True)}  # accept, reject, accept
    for i, (path, (cut, good)) in enumerate(plan.items()):
        store.add(path, stored(root.tokens[:cut], _prop(cut, good), (0, i)))
    cuts = {"": 5, "1": 3, "10": 2, "101": 1}
    res = walk(root, "", 0, 10, kernel=KERNEL, decision_of=lambda p, k: p, draws=lambda d: Forced(cuts[d]), store=store)
    assert res.path == "101"  # stopped at "101": its proposal is not in the batch
    assert [s.decision for s in res.steps] == ["", "1", "10"]
    assert [s.transition.accepted for s in res.steps] == [True, False, True]
    assert [s.requests for s in res.steps] == [((0, 0),), ((0, 1),), ((0, 2),)]
    assert res.state.tokens == root.tokens[:2] + _prop(2, True).tokens
    capped = walk(
        root, "", 0, 2, kernel=KERNEL, decision_of=lambda p, k: p, draws=lambda d: Forced(cuts[d]), store=store
    )
    assert capped.path == "10" and len(capped.steps) == 2


def test_walk_uses_a_step_proposal_only_where_its_prefix_matches():
    root = root_state()
    store = ProposalStore()
    store.add(0, stored(root.tokens[:3], _prop(3, True), (0, 0)))  # accept at cut 3
    store.add(1, stored(root.tokens[:6], _prop(6, True), (0, 1)))  # prefix 0..5 now changed
    cuts = {0: 3, 1: 6}
    res = walk(root, "", 0, 5, kernel=KERNEL, decision_of=lambda p, k: k, draws=lambda d: Forced(cuts[d]), store=store)
    assert len(res.steps) == 1  # decision 1 needs the new state's prefix: deferred
    store.add(1, stored(res.state.tokens[:6], _prop(6, False), (1, 0)))
    res2 = walk(
        res.state,
        res.path,
        1,
        5,
        kernel=KERNEL,
        decision_of=lambda p, k: k,
        draws=lambda d: Forced(cuts.get(d, 0)),
        store=store,
    )
    assert res2.steps[0].requests == ((1, 0),) and not res2.steps[0].transition.accepted


def test_store_rejects_duplicate_prefix():
    store = ProposalStore()
    sp = stored((1, 2), _prop(2, True))
    store.add(0, sp)
    with pytest.raises(ValueError, match="already has a proposal"):
        store.add(0, sp)
