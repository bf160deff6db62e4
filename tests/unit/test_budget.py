"""Budget policies composed with rules (presto_sgl/planners/budget.py): the path-keyed rules'
ranked batches and their predicted transitions, the rate the policy maximizes, the exploration
calls, and a rule registered here getting both budgets with no class of its own. Exactness of
the chains they plan is in tests/exactness (rules bfs-cost, predictive-cost)."""

from __future__ import annotations

import numpy as np
import pytest

from presto_sgl import PrestoConfig, planners
from presto_sgl.config import KernelConfig, PowerConfig, Target
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.planners import (
    BFSPlanner,
    CostAware,
    PlannedRequest,
    PlanOffer,
    PredictivePlanner,
    RatePolicy,
    RolloutPolicy,
    StepPlanner,
)
from presto_sgl.planners.base import Stateless
from presto_sgl.planners.predictive import allocate, candidate_tree
from presto_sgl.planners.timemodel import CallTimeModel
from presto_sgl.predictor.certainty import ConstantPredictor, h_plus
from presto_sgl.registry import RuleSpec, register_rule, unregister
from presto_sgl.samplers import Sampler, make_planner
from tests.support.planning import CUTS, ctx

PRED = ConstantPredictor(0.2, 0.3, 0.5)  # h+ = 0.65 everywhere


class FixedTime(CallTimeModel):
    """theta given, already past exploration."""

    def __init__(self, theta) -> None:
        super().__init__()
        self.theta = np.array(theta, dtype=float)
        self.calls = 99


def path_planner(rule: str, time_model: CallTimeModel | None = None) -> CostAware:
    """The cost-aware planner of a path-keyed rule on PRED."""
    return make_planner(PrestoConfig(rule, cost_aware=True), predictor=PRED, time_model=time_model)  # type: ignore[return-value]


def options(planner: CostAware, round_) -> list[tuple[float, list]]:
    """(V(n), the first n requests) of the planner's ranked batch, n = 1..N."""
    ranked = planner.ranked(round_)
    return [(v, ranked.batch[: i + 1]) for i, v in enumerate(ranked.values or ())]


DEFER = {"": 3, "1": 6, "0": 2, "11": 4, "10": 1, "01": 5, "00": 1}  # "1" is deferred (6 > 3)


def test_bfs_options_are_prefixes_with_reaching_weights():
    round_ = ctx(DEFER, remaining=3, budget=6)
    ranked = options(path_planner("bfs"), round_)
    full = BFSPlanner().plan(round_)
    assert [b for _, b in ranked] == [full[: i + 1] for i in range(len(full))]
    assert ranked[0][0] == 1.0
    weights = [1.0]  # R(v): h+ or h- of each ancestor's cut, 0 below a deferred node
    for p in full[1:]:
        w = 1.0
        for i, bit in enumerate(p.decision):
            hh = h_plus(PRED, DEFER[p.decision[:i]] / 10)
            w *= hh if bit == "1" else 1 - hh
        weights.append(w if p.reachable else 0.0)
    assert [v for v, _ in ranked] == pytest.approx(np.cumsum(weights).tolist())
    assert any(not p.reachable for p in full) and any(0 < w < 1 for w in weights)


def test_predictive_prefixes_are_optimal_selections_with_the_dp_values():
    round_ = ctx(CUTS, remaining=3, budget=5)
    ranked = options(path_planner("predictive"), round_)
    nodes = candidate_tree(round_, PRED, 5)
    assert len(ranked) == len(nodes) == 5
    for b, (value, batch) in enumerate(ranked, start=1):
        v, sel = allocate(nodes, b)
        assert value == pytest.approx(v) and {p.decision for p in batch} == {n.path for n in sel}


@pytest.mark.parametrize("rule", ["bfs", "predictive"])
def test_the_budget_follows_the_cost_of_a_row(rule):
    round_ = ctx(CUTS, remaining=3, budget=6)
    per_call = path_planner(rule, FixedTime([1.0, 0.0, 0.0, 0.0, 0.0]))  # rows are free: send all
    assert len(per_call.plan(round_)) == len(options(per_call, round_))
    per_row = path_planner(rule, FixedTime([0.0, 1.0, 0.0, 0.0, 0.0]))  # E_b <= b: sequential's rate
    assert [p.decision for p in per_row.plan(round_)] == [""]
    mixed = path_planner(rule, FixedTime([1.0, 0.5, 0.0, 0.0, 0.0]))
    n = len(mixed.plan(round_))
    ranked = options(mixed, round_)
    rates = [v / (1.0 + 0.5 * len(b)) for v, b in ranked]
    assert n == len(ranked[int(np.argmax(rates))][1]) and 1 < n < len(ranked)


def test_exploration_then_observe():
    planner = path_planner("bfs")
    round_ = ctx(CUTS, remaining=3, budget=6)
    sizes = []
    for _ in range(4):
        sizes.append(len(planner.plan(round_)))
        planner.time_model.observe([5] * sizes[-1], 0.1 * sizes[-1])
    full = len(options(planner, round_))  # 5: BFS defers some of the 7 nodes above the depth cap
    assert sizes == [full, 1, 3, 2] and planner.time_model.calls == 4


def test_every_rule_composes_with_its_budget_policy():
    for rule, kind, policy in [
        ("bfs", BFSPlanner, RatePolicy),
        ("predictive", PredictivePlanner, RatePolicy),
        ("step", StepPlanner, RolloutPolicy),
    ]:
        planner = make_planner(PrestoConfig(rule, cost_aware=True), predictor=PRED)
        assert isinstance(planner, CostAware) and type(planner.rule) is kind and type(planner.policy) is policy
        assert isinstance(make_planner(PrestoConfig(rule), predictor=PRED), kind)  # fixed: the rule alone
    with pytest.raises(ValueError, match="cost_aware"):
        PrestoConfig("sequential", cost_aware=True)
    with pytest.raises(AttributeError):  # 0.x: a rule x a budget policy now
        planners.CostAwarePathPlanner  # noqa: B018


class AcceptChain(Stateless):
    """A toy rule: the decisions of the all-accept path below the root, while Condition 1
    holds (each prefix is a valid batch), valued 1, 2, ... (every request a transition)."""

    keying = "path"
    carries_over = False

    def plan(self, ctx):
        path, shared, batch = ctx.root_path, ctx.root.length, []
        while len(batch) < ctx.budget and len(path) - len(ctx.root_path) < ctx.remaining:
            cut = ctx.cut(path, shared)
            if cut is None:
                break
            batch.append(PlannedRequest(path, cut))
            path, shared = path + "1", cut
        return batch

    def ranked(self, ctx):
        batch = self.plan(ctx)
        return PlanOffer(batch, tuple(float(i) for i in range(1, len(batch) + 1)))


@pytest.fixture
def accept_chain():
    register_rule(RuleSpec("acceptchain", "path", lambda predictor: AcceptChain(), "toy"))
    yield
    unregister("acceptchain")


def test_a_new_rule_gets_the_cost_aware_budget_without_a_class_and_stays_exact(accept_chain):
    engine = ReferenceEngine(ReferenceLM(16, sharpness=2.0, seed=3), seeded=True)
    config = PowerConfig(Target(alpha=4.0, max_new_tokens=16, block_size=8), KernelConfig(steps=6))
    reference = Sampler(engine, config, PrestoConfig("sequential", keying="path")).run([1, 2, 3], seed=5)
    for cost_aware in (False, True):
        presto = PrestoConfig("acceptchain", budget=4, cost_aware=cost_aware)
        sampler = Sampler(engine, config, presto, planner=make_planner(presto, predictor=PRED))
        assert isinstance(sampler.planner, CostAware) == cost_aware
        result = sampler.run([1, 2, 3], seed=5)
        assert result.state.tokens == reference.state.tokens
        assert result.metrics.transitions == reference.metrics.transitions
        assert result.metrics.model_calls < reference.metrics.model_calls
