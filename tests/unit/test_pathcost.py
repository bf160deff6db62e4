"""The cost-aware budget of the path-keyed rules (presto_sgl/planners/pathcost.py): the
rule's own predicted transitions per budget, the rate it maximizes, the exploration calls.
Exactness of the chains it plans is in tests/exactness (rules bfs-cost, predictive-cost)."""

from __future__ import annotations

import numpy as np
import pytest

from presto_sgl import PrestoConfig
from presto_sgl.planners import BFSPlanner, CostAwarePathPlanner
from presto_sgl.planners.predictive import allocate, candidate_tree
from presto_sgl.planners.timemodel import CallTimeModel
from presto_sgl.predictor.certainty import ConstantPredictor, h_plus
from presto_sgl.registry import make_planner
from tests.support.planning import CUTS, ctx

PRED = ConstantPredictor(0.2, 0.3, 0.5)  # h+ = 0.65 everywhere


class FixedTime(CallTimeModel):
    """theta given, already past exploration."""

    def __init__(self, theta) -> None:
        super().__init__()
        self.theta = np.array(theta, dtype=float)
        self.calls = 99


DEFER = {"": 3, "1": 6, "0": 2, "11": 4, "10": 1, "01": 5, "00": 1}  # "1" is deferred (6 > 3)


def test_bfs_options_are_prefixes_with_reaching_weights():
    round_ = ctx(DEFER, remaining=3, budget=6)
    options = CostAwarePathPlanner("bfs", PRED).options(round_)
    full = BFSPlanner().plan(round_)
    assert [b for _, b in options] == [full[: i + 1] for i in range(len(full))]
    assert options[0][0] == 1.0
    weights = [1.0]  # R(v): h+ or h- of each ancestor's cut, 0 below a deferred node
    for p in full[1:]:
        w = 1.0
        for i, bit in enumerate(p.decision):
            hh = h_plus(PRED, DEFER[p.decision[:i]] / 10)
            w *= hh if bit == "1" else 1 - hh
        weights.append(w if p.reachable else 0.0)
    assert [v for v, _ in options] == pytest.approx(np.cumsum(weights).tolist())
    assert any(not p.reachable for p in full) and any(0 < w < 1 for w in weights)


def test_predictive_options_are_the_dp_values():
    round_ = ctx(CUTS, remaining=3, budget=5)
    options = CostAwarePathPlanner("predictive", PRED).options(round_)
    nodes = candidate_tree(round_, PRED, 5)
    for b, (value, batch) in enumerate(options, start=1):
        v, sel = allocate(nodes, b)
        assert value == v and [p.decision for p in batch] == [n.path for n in sel]


@pytest.mark.parametrize("rule", ["bfs", "predictive"])
def test_the_budget_follows_the_cost_of_a_row(rule):
    round_ = ctx(CUTS, remaining=3, budget=6)
    per_call = CostAwarePathPlanner(rule, PRED, FixedTime([1.0, 0.0, 0.0, 0.0, 0.0]))  # rows are free: send all
    assert len(per_call.plan(round_)) == len(per_call.options(round_))
    per_row = CostAwarePathPlanner(rule, PRED, FixedTime([0.0, 1.0, 0.0, 0.0, 0.0]))  # E_b <= b: sequential's rate
    assert [p.decision for p in per_row.plan(round_)] == [""]
    mixed = CostAwarePathPlanner(rule, PRED, FixedTime([1.0, 0.5, 0.0, 0.0, 0.0]))
    n = len(mixed.plan(round_))
    options = mixed.options(round_)
    rates = [v / (1.0 + 0.5 * len(b)) for v, b in options]
    assert n == len(options[int(np.argmax(rates))][1]) and 1 < n < len(options)


def test_exploration_then_observe():
    planner = CostAwarePathPlanner("bfs", PRED)
    round_ = ctx(CUTS, remaining=3, budget=6)
    sizes = []
    for _ in range(4):
        sizes.append(len(planner.plan(round_)))
        planner.time_model.observe([5] * sizes[-1], 0.1 * sizes[-1])
    full = len(planner.options(round_))  # 5: BFS defers some of the 7 nodes above the depth cap
    assert sizes == [full, 1, 3, 2] and planner.time_model.calls == 4


def test_config_and_factory():
    assert isinstance(make_planner(PrestoConfig("bfs", cost_aware=True)), CostAwarePathPlanner)
    assert make_planner(PrestoConfig("predictive", cost_aware=True)).rule == "predictive"
    with pytest.raises(ValueError, match="cost_aware"):
        PrestoConfig("sequential", cost_aware=True)
    with pytest.raises(ValueError, match="`rule`"):
        CostAwarePathPlanner("step", PRED)
