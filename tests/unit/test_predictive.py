"""Layer 1 for the predictive rule: candidate nodes (Condition 1, depth cap, nothing below
a deferred node), the DP of Eq. 19 against brute force over all ancestor-closed
selections, the DP value as the walk's expected transition count, and observe()."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import pytest

import presto_sgl.predictor
from presto_sgl.config import PrestoConfig
from presto_sgl.execution.walker import walk
from presto_sgl.kernels.proposals import ProposalStore
from presto_sgl.planners import BFSPlanner, PlannedRequest, RoundContext, RoundFeedback
from presto_sgl.planners.predictive import PredictivePlanner, allocate, candidate_tree
from presto_sgl.predictor.certainty import ACCEPT, REJECT, UNCERTAIN, ConstantPredictor, Observation
from presto_sgl.samplers import make_planner
from tests.support.planning import CUTS, KERNEL, Forced, _prop, ctx, root_state, stored
from tests.support.predictors import CutPredictor

pytestmark = pytest.mark.exactness  # pins an invariant the exactness proof rests on


@dataclass(frozen=True)
class HashPredictor:
    """Pseudo-random class probabilities per cut fraction; some exactly certain (h+ = 0 or 1)."""

    seed: int

    def proba(self, cut_fraction: float) -> tuple[float, float, float]:
        rng = random.Random(f"{self.seed}/{cut_fraction}")
        if rng.random() < 0.1:
            return rng.choice([(1.0, 0.0, 0.0), (0.0, 0.0, 1.0)])
        a, b = sorted((rng.random(), rng.random()))
        return (a, b - a, 1.0 - b)

    def observe(self, observations) -> None:
        return None


def random_tree(seed: int, T: int = 1000) -> tuple[dict[str, int], RoundContext, HashPredictor, int]:
    """Random cuts on every path below a random root path, a depth cap and a budget."""
    rng = random.Random(seed)
    root_path = rng.choice(["", "1", "01"])
    remaining, budget = rng.randint(1, 5), rng.randint(1, 7)
    paths = ["".join(bits) for d in range(remaining + 1) for bits in itertools.product("10", repeat=d)]
    # skew toward small cuts so that Condition 1 holds often but not always
    cuts = {root_path + p: int(T * rng.random() ** 1.5) for p in paths}
    c = ctx(cuts, root_path=root_path, remaining=remaining, budget=budget, T=T)
    return cuts, c, HashPredictor(seed), budget


def h_of(predictor, cut: int, T: int) -> float:
    p_rej, _, p_acc = predictor.proba(cut / T)
    return 0.5 * (1.0 + p_acc - p_rej)


def brute_force(cuts, c: RoundContext, predictor, budget: int):
    """Candidate weights R(v), then the best value and all ancestor-closed selections attaining it."""
    T = c.root.length
    weight: dict[str, float] = {}

    def grow(path: str, state_cut: int, w: float) -> None:
        if len(path) - len(c.root_path) >= c.remaining or cuts[path] > state_cut:
            return
        weight[path], h = w, h_of(predictor, cuts[path], T)
        grow(path + "1", cuts[path], w * h)
        grow(path + "0", state_cut, w * (1.0 - h))

    grow(c.root_path, T, 1.0)

    def closed_sets(path: str, b: int) -> list[frozenset[str]]:
        if path not in weight or b == 0:
            return [frozenset()]
        out: list[frozenset[str]] = [frozenset()]
        plus, minus = path + "1", path + "0"
        for a in closed_sets(plus, b - 1):
            for m in closed_sets(minus, b - 1 - len(a)):
                out.append(frozenset({path}) | a | m)
        return out

    sets = closed_sets(c.root_path, budget)
    values = [sum(weight[p] for p in s) for s in sets]
    best = max(values)
    return weight, best, [s for s, v in zip(sets, values) if v > best - 1e-12]


def test_candidate_tree_is_condition1_and_depth_cap():
    for seed in range(200):
        cuts, c, pred, _ = random_tree(seed)
        weight, *_ = brute_force(cuts, c, pred, 1)
        full = candidate_tree(c, pred, 10**9)
        assert {v.path for v in full} == set(weight)
        for v in full:
            assert v.cut == cuts[v.path] and math.isclose(v.weight, weight[v.path], rel_tol=1e-12, abs_tol=1e-15)
        assert all(full.index(v) < full.index(ch) for v in full for ch in (v.plus, v.minus) if ch is not None)


@pytest.mark.parametrize("chunk", range(4))
def test_dp_equals_brute_force_on_random_trees(chunk):
    for seed in range(chunk * 150, (chunk + 1) * 150):
        cuts, c, pred, budget = random_tree(seed)
        weight, best, optima = brute_force(cuts, c, pred, budget)
        # The DP on the whole candidate tree, and on the pruned tree the planner uses.
        for limit in (10**9, budget):
            value, selection = allocate(candidate_tree(c, pred, limit), budget)
            assert math.isclose(value, best, rel_tol=1e-9, abs_tol=1e-12), (seed, limit)
            chosen = frozenset(v.path for v in selection)
            assert math.isclose(sum(weight[p] for p in chosen), best, rel_tol=1e-9, abs_tol=1e-12)
            if len(optima) == 1:
                assert chosen == optima[0], seed
        plan = PredictivePlanner(pred).plan(c)
        paths = [p.decision for p in plan]
        assert len(plan) <= budget and len(set(paths)) == len(paths)
        assert set(paths) <= set(weight)  # candidates only: never below a deferred node
        assert all(p[:-1] in paths for p in paths if len(p) > len(c.root_path))  # ancestor-closed
        assert all(p == PlannedRequest(p.decision, cuts[p.decision]) for p in plan)  # keyed cut, reachable
        assert math.isclose(sum(weight[p] for p in paths), best, rel_tol=1e-9, abs_tol=1e-12)


def test_dp_value_is_the_expected_number_of_walk_transitions():
    """Enumerate every accept/reject outcome of the selected proposals, weight it by the
    predicted h+, and walk the real store: the mean count is V(root, N_pf) (Lemma 1, Eq. 19).
    A wrong cut or prefix in a request would stop the walk early and lower the mean."""
    T = 40
    for seed in range(60):
        _, c, pred, budget = random_tree(seed, T)
        value, _ = allocate(candidate_tree(c, pred, budget), budget)
        plan = PredictivePlanner(pred).plan(c)
        root, draws = c.root, c.draws
        expected = 0.0
        for outcome in itertools.product((True, False), repeat=len(plan)):
            store = ProposalStore()
            prob = 1.0
            for j, (req, good) in enumerate(zip(plan, outcome)):
                store.add(req.decision, stored(root.tokens[: req.cut], _prop(req.cut, good, T), (0, j)))
                h = h_of(pred, req.cut, T)
                prob *= h if good else 1.0 - h
            res = walk(
                root, c.root_path, 0, c.remaining, kernel=KERNEL, decision_of=lambda p, k: p, draws=draws, store=store
            )
            expected += prob * len(res.steps)
        assert math.isclose(expected, value, rel_tol=1e-9, abs_tol=1e-12), seed


def test_hand_built_tree_follows_the_likely_branch_and_stops_at_deferred_nodes():
    # CUTS (planning_helpers): "11" (4 > 3) and "01" (8 > 7) are deferred.
    rejecty, accepty = ConstantPredictor(0.8, 0.1, 0.1), ConstantPredictor(0.1, 0.1, 0.8)  # h+ = 0.15, 0.85
    assert [p.decision for p in PredictivePlanner(rejecty).plan(ctx(CUTS, budget=3))] == ["", "0", "00"]
    assert [p.decision for p in PredictivePlanner(accepty).plan(ctx(CUTS, budget=3))] == ["", "1", "0"]
    for budget in range(1, 12):
        plan = PredictivePlanner(accepty).plan(ctx(CUTS, remaining=4, budget=budget))
        assert all(p.reachable and not p.decision.startswith(("11", "01")) for p in plan)
    # BFS spends requests below the deferred nodes (its quirk); the predictive rule never does.
    bfs = BFSPlanner().plan(ctx(CUTS, remaining=4, budget=20))
    assert any(not p.reachable for p in bfs)
    assert len(PredictivePlanner(accepty).plan(ctx(CUTS, remaining=4, budget=20))) == sum(p.reachable for p in bfs)


def test_candidate_generation_is_bounded_by_the_budget():
    """Best-first generation draws at most 2 N_pf - 1 cuts, whatever the depth cap."""
    cuts: dict[str, int] = {}
    looked: list[str] = []

    def draws(path: str) -> Forced:
        looked.append(path)
        return Forced(cuts.setdefault(path, random.Random(path).randrange(500)))

    for budget in (1, 20, 64):
        looked.clear()
        c = RoundContext(
            root_state(500), "", 0, 100, budget=budget, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="path"
        )
        plan = PredictivePlanner(ConstantPredictor()).plan(c)
        assert len(plan) == budget and len(looked) <= 2 * budget - 1


def test_depth_cap_and_budget():
    assert [p.decision for p in PredictivePlanner(ConstantPredictor()).plan(ctx(CUTS, remaining=1))] == [""]
    assert PredictivePlanner(ConstantPredictor()).plan(ctx(CUTS, remaining=0)) == []
    assert len(PredictivePlanner(ConstantPredictor()).plan(ctx(CUTS, remaining=3, budget=100))) == 5  # all candidates


def test_observe_feeds_the_predictor():
    pred = CutPredictor()
    planner = PredictivePlanner(pred)
    before = pred.proba(0.5)
    planner.observe(RoundFeedback(10, ((5, 0.0), (2, -10.0), (9, math.log(0.5)), (0, -math.inf)), ((3, 7),), 0.1))
    assert pred.observations == [
        Observation(0.5, ACCEPT),
        Observation(0.2, REJECT),
        Observation(0.9, UNCERTAIN),
        Observation(0.0, REJECT),
    ]
    assert pred.proba(0.5) != before  # the online test predictor refits


def test_make_planner_builds_the_predictive_rule(monkeypatch):
    loaded = []

    def load_predictor(spec: str, *, online: bool) -> ConstantPredictor:
        loaded.append((spec, online))
        return ConstantPredictor()

    monkeypatch.setattr(presto_sgl.predictor, "load_predictor", load_predictor)  # the name the rules call
    planner = make_planner(PrestoConfig("predictive", predictor="saved.json", online=True))
    assert isinstance(planner, PredictivePlanner) and planner.keying == "path" and not planner.carries_over
    assert loaded == [("saved.json", True)]
