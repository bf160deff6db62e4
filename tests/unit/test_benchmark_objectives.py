"""The cost-aware planner's retired objectives (benchmarks/objectives.py): this round's
E(n) and the ever-used probabilities against brute force with the real ProposalStore and
walk rule, the argmax choices of ``renewal`` and ``myopic``, ``rollout`` as the library's
choice, the run-rate bookkeeping, and per-run planners that share the learners."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from benchmarks.objectives import (
    OBJECTIVES,
    ObjectivePlanner,
    RunRate,
    ever_used,
    transition_probabilities,
)
from presto_sgl import ChainState
from presto_sgl.planners import CostAwareStepPlanner, RoundContext, RoundFeedback, StepPlanner
from presto_sgl.planners.costaware import EXPLORE
from presto_sgl.planners.timemodel import CallTimeModel
from presto_sgl.predictor.certainty import ACCEPT, REJECT, ConstantPredictor, Observation, h_plus
from presto_sgl.proposals import ProposalStore
from tests.support.predictors import CutPredictor
from tests.support.timing import SyntheticClock
from tests.unit.planning_helpers import KERNEL, Forced, proposal, random_context, random_theta


def brute_force_expected(ctx: RoundContext, requested: list, predictor) -> float:
    """E[transitions] by enumerating every accept/reject path of the real store and rule.

    The round's proposals (carried over plus ``requested``) sit in one ProposalStore; the
    walk takes decision k's proposal iff ``store.find`` accepts the current tokens, and an
    accept replaces the tokens from the cut on by the proposal's (fresh) tokens.
    """
    T = ctx.root.length
    store = ProposalStore()
    for k in range(ctx.k0, ctx.k0 + ctx.remaining):
        cut = ctx.draws(k).cut(T)
        found = ctx.store.find(k, ctx.root.tokens, cut)
        if found is not None:
            store.add(k, found)
    for p in requested:
        store.add(p.decision, proposal(ctx.root.tokens[: p.cut], T, 100 + p.decision))
    depths = range(ctx.k0, ctx.k0 + ctx.remaining)
    a = {k: h_plus(predictor, ctx.draws(k).cut(T) / T) for k in depths}
    total = 0.0
    for bits in itertools.product((0, 1), repeat=ctx.remaining):
        tokens, count, prob = ctx.root.tokens, 0, 1.0
        for k, bit in zip(depths, bits):
            prob *= a[k] if bit else 1.0 - a[k]
        for k, bit in zip(depths, bits):
            found = store.find(k, tokens, ctx.draws(k).cut(T))
            if found is None:
                break
            count += 1
            if bit:
                tokens = tokens[: found.proposals[0].cut] + found.proposals[0].tokens
        total += prob * count
    return total


@pytest.mark.parametrize("seed", range(40))
def test_expected_transitions_match_brute_force(seed):
    rng = random.Random(seed)
    ctx = random_context(rng)
    predictor = CutPredictor() if seed % 2 else ConstantPredictor(0.5, 0.2, 0.3)
    planner = ObjectivePlanner(predictor)
    batch = StepPlanner().plan(ctx)
    E = planner.expected_transitions(ctx, batch)
    assert len(E) == len(batch) + 1
    for n in range(len(batch) + 1):
        assert E[n] == pytest.approx(brute_force_expected(ctx, batch[:n], predictor), abs=1e-12)
    assert all(x <= y + 1e-15 for x, y in zip(E, E[1:]))


def test_random_instances_cover_carry_over():
    """Guard: the brute-force instances include free carried-over depths before and between requests."""
    carried_first = carried_between = 0
    for seed in range(40):
        ctx = random_context(random.Random(seed))
        E = ObjectivePlanner(ConstantPredictor()).expected_transitions(ctx, StepPlanner().plan(ctx))
        carried_first += E[0] > 0
        carried_between += any(y - x > 1 + 1e-9 for x, y in zip(E, E[1:]))
    assert carried_first >= 3 and carried_between >= 3


def test_transition_probabilities_by_hand():
    # T = 10, cuts 6, 3, 8: depth 1 (cut 3 <= 6) is always valid; depth 2 (cut 8) is valid
    # iff neither earlier decision accepted: (1 - a0)(1 - a1).
    a = [0.5, 0.25, 0.9]
    assert transition_probabilities([6, 3, 8], a, 10) == pytest.approx([1.0, 1.0, 0.5 * 0.75])
    assert transition_probabilities([4, 4, 4], [1.0, 1.0, 1.0], 10) == [1.0, 1.0, 1.0]  # equal cuts stay valid
    assert transition_probabilities([], [], 5) == []


@pytest.mark.parametrize("seed", range(20))
def test_ever_used_matches_brute_force(seed):
    """u_d = P(a proposal for depth d made from the root is valid when the walk reaches d)."""
    rng = random.Random(seed)
    D, T = rng.randint(1, 8), rng.randint(2, 10)
    cuts = [rng.randrange(T) for _ in range(D)]
    a = [rng.random() for _ in range(D)]
    root = tuple(range(T))
    want = [0.0] * D
    for bits in itertools.product((0, 1), repeat=D):
        p = math.prod(x if b else 1.0 - x for x, b in zip(a, bits))
        tokens = root
        for d, (c, b) in enumerate(zip(cuts, bits)):
            want[d] += p * (tokens[:c] == root[:c])
            if b:
                tokens = tokens[:c] + tuple(range(100 * (d + 1), 100 * (d + 1) + T - c))
    assert ever_used(cuts, a) == pytest.approx(want, abs=1e-12)


def test_renewal_choice_is_the_argmax():
    for seed in range(30):
        rng = random.Random(seed)
        ctx = random_context(rng)
        model = CallTimeModel()
        model.theta = random_theta(rng)
        planner = ObjectivePlanner(CutPredictor(), model, explore=(), objective="renewal")
        planner.transitions, planner.call_time_s = 7, rng.uniform(0.5, 20.0)
        batch = StepPlanner().plan(ctx)
        got = planner.plan(ctx)
        assert got == batch[: len(got)] and (len(got) >= 1) == bool(batch)
        if len(batch) > 1:
            V = planner.renewal_values(ctx, batch)
            assert V[len(got) - 1] == max(V)


def test_renewal_values_by_hand():
    """V[n-1] = sum_{i<n} u_i - lambda t(n), with lambda = transitions / call time."""
    cuts = {0: 5, 1: 2, 2: 7}
    root = ChainState((99,), tuple(range(10)), (0.0,) * 10, (0.0,) * 10)
    ctx = RoundContext(root, "", 0, 3, 3, lambda k: Forced(cuts[k]), ProposalStore(), KERNEL, "step")
    model = CallTimeModel()
    model.theta = random_theta(random.Random(1))
    predictor = ConstantPredictor(0.5, 0.2, 0.3)
    planner = ObjectivePlanner(predictor, model, explore=(), objective="renewal")
    planner.transitions, planner.call_time_s = 6, 3.0
    batch = StepPlanner().plan(ctx)
    a = [h_plus(predictor, cuts[k] / 10) for k in range(3)]
    u = [1.0, 1.0, (1.0 - a[0]) * (1.0 - a[1])]  # depth 2 (cut 7) survives no earlier accept
    want = [sum(u[:n]) - 2.0 * model.predict([10 - cuts[k] for k in range(n)]) for n in range(1, 4)]
    assert planner.renewal_values(ctx, batch) == pytest.approx(want, abs=1e-12)


def test_myopic_choice_is_the_argmax_of_rate():
    """Objective "myopic", exploration off: the batch has the length n maximizing E(n) / t(n)."""
    sizes = set()
    for seed in range(60):
        rng = random.Random(seed)
        ctx = random_context(rng)
        model = CallTimeModel()
        model.theta = random_theta(rng)
        planner = ObjectivePlanner(CutPredictor(), model, explore=(), objective="myopic")
        batch = StepPlanner().plan(ctx)
        got = planner.plan(ctx)
        if not batch:
            assert got == []
            continue
        E = planner.expected_transitions(ctx, batch)
        T = ctx.root.length
        rates = [E[n] / model.predict([T - p.cut for p in batch[:n]]) for n in range(1, len(batch) + 1)]
        assert rates[len(got) - 1] == max(rates)
        sizes.add((len(got), len(batch)))
    assert any(n < N for n, N in sizes) and any(n == N > 1 for n, N in sizes)


def test_rollout_objective_is_the_library_choice():
    for seed in range(20):
        rng = random.Random(seed)
        ctx = random_context(rng)
        theta = random_theta(rng)
        planners = []
        for cls in (ObjectivePlanner, CostAwareStepPlanner):
            model = CallTimeModel()
            model.theta = theta
            planners.append(cls(CutPredictor(), model, explore=(), samples=8))
        ours, library = planners
        assert ours.objective == "rollout"
        assert ours.plan(ctx) == library.plan(ctx) and ours.last_base == library.last_base


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_explores_first_and_plans_a_prefix_of_the_step_rule(objective):
    for seed in range(20):
        ctx = random_context(random.Random(seed))
        batch = StepPlanner().plan(ctx)
        planner = ObjectivePlanner(CutPredictor(), SyntheticClock(), objective=objective, samples=8)
        for i in range(len(EXPLORE) + 3):
            got = planner.plan(ctx)
            assert got == batch[: len(got)] and (len(got) >= 1) == bool(batch)
            if batch and i < len(EXPLORE):
                assert len(got) == max(1, math.ceil(EXPLORE[i] * len(batch)))
            planner.observe(RoundFeedback(ctx.root.length, ((0, 0.0),), tuple((0, ctx.root.length - p.cut) for p in got), 1.0))


def test_objective_is_checked():
    with pytest.raises(ValueError, match="objective"):
        ObjectivePlanner(ConstantPredictor(), objective="greedy")


def test_observe_keeps_the_run_rate_and_feeds_the_learners():
    predictor = CutPredictor()
    planner = ObjectivePlanner(predictor, SyntheticClock(), objective="renewal")
    assert (planner.transitions, planner.call_time_s, planner.rate.value) == (0, 0.0, 0.0)
    planner.observe(RoundFeedback(8, ((2, 0.0), (4, -20.0)), ((5, 6), (3, 4)), 0.5))
    planner.observe(RoundFeedback(8, ((6, 0.0),), (), 0.0))  # a round without a call
    assert (planner.transitions, planner.call_time_s) == (3, 0.5) and planner.rate.value == 6.0
    assert planner.time_model.calls == 1
    assert predictor.observations == [Observation(0.25, ACCEPT), Observation(0.5, REJECT), Observation(0.75, ACCEPT)]


class Clocked(ObjectivePlanner):
    """A subclass with its own constructor and settings (as benchmarks/cost_aware_sim.py has)."""

    def __init__(self, law: float, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.law = law


@pytest.mark.parametrize("cls", [ObjectivePlanner, Clocked])
def test_for_run_shares_the_learners_and_not_the_round_state(cls):
    args = (0.25,) if cls is Clocked else ()
    planner = cls(*args, CutPredictor(), SyntheticClock(), (1.0,) * 10, objective="myopic", samples=8, horizon=12, seed=3)
    run = planner.for_run()
    assert type(run) is cls and run is not planner
    assert run.predictor is planner.predictor and run.time_model is planner.time_model
    assert run.match_rate is planner.match_rate and run.rate is planner.rate
    assert (run.objective, run.explore, run.samples, run.horizon, run.seed) == ("myopic", (1.0,) * 10, 8, 12, 3)
    if cls is Clocked:
        assert run.law == 0.25
    # Round state is per run: a root planned by one run is not the other's previous root.
    cuts = {0: 4, 1: 2, 2: 6, 3: 1, 4: 0}
    draws = lambda k: Forced(cuts[k])  # noqa: E731
    root = ChainState((99,), (0, 1, 2, 3, 4, 5, 6, 7), (0.0,) * 8, (0.0,) * 8)
    later = ChainState((99,), (0, 1, 2, 3, 4, 9, 9, 9), (0.0,) * 8, (0.0,) * 8)
    run.plan(RoundContext(root, "", 0, 5, 3, draws, ProposalStore(), KERNEL, "step"))
    other = planner.for_run()
    other.plan(RoundContext(later, "110", 3, 2, 3, draws, ProposalStore(), KERNEL, "step"))
    assert planner.match == 0.0
    run.plan(RoundContext(later, "110", 3, 2, 3, draws, ProposalStore(), KERNEL, "step"))
    assert other.match == 0.75  # learned by one run, shared with all
    run.observe(RoundFeedback(8, ((2, 0.0),), ((5, 6),), 0.5))
    assert (other.transitions, other.call_time_s, other.time_model.calls) == (1, 0.5, 1)


def test_per_run_state_of_the_library_planner_is_what_for_run_resets():
    """Guard: ObjectivePlanner.for_run copies the planner and resets ``_previous`` and
    ``last_base``; a new per-run attribute of the library's planner must be reset too."""
    shared = {"predictor", "time_model", "explore", "samples", "horizon", "seed", "match_rate"}
    assert set(vars(CostAwareStepPlanner(ConstantPredictor()))) - shared == {"_previous", "last_base"}


def test_run_rate():
    rate = RunRate()
    assert rate.value == 0.0
    rate.add(4, 2.0)
    rate.add(2, 0.0)
    assert (rate.transitions, rate.call_time_s, rate.value) == (6, 2.0, 3.0)
