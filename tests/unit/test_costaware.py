"""The cost-aware step planner: the rollout values (call time of the round plus the
expected time to finish the stage with a fixed budget) and the ever-used probabilities
against brute force with the real ProposalStore and walk rule, the argmin/argmax choices
of the three objectives, this round's E(n), the match-rate estimate, the call-time model,
the prefix-of-the-step-rule property, feedback, and the make_planner wiring."""

from __future__ import annotations

import io
import itertools
import math
import random
import sys
import types

import numpy as np
import pytest
from tests.support.predictors import CutPredictor
from tests.support.timing import CPU_LAW, SyntheticClock, law_time, presto_sampler

from presto_sgl import ChainState, PowerConfig, PrestoConfig, PrestoPowerMH, TraceWriter, read_trace
from presto_sgl.predictor.certainty import ACCEPT, REJECT, UNCERTAIN, ConstantPredictor, Observation, h_plus
from presto_sgl.costaware import (
    BASES,
    EXPLORE,
    MIN_TIME_S,
    CallTimeModel,
    CostAwareStepPlanner,
    ever_used,
    transition_probabilities,
)
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.kernels import Proposal
from presto_sgl.planners import RoundContext, RoundFeedback, StepPlanner, make_planner
from presto_sgl.proposals import ProposalStore, StoredProposal


class Forced:
    """Stub draws: a fixed cut per decision."""

    def __init__(self, c: int) -> None:
        self.c = c

    def cut(self, length: int) -> int:
        return self.c


def proposal(prefix: tuple[int, ...], T: int, fill: int) -> StoredProposal:
    c = len(prefix)
    return StoredProposal(prefix, Proposal(c, (fill,) * (T - c), (0.0,) * (T - c), (0.0,) * (T - c)), (0, 0))


def random_context(rng: random.Random) -> RoundContext:
    """A round with random cuts, budget and depth cap; some depths carried over, some stale."""
    T = rng.randint(2, 12)
    root = ChainState((99,), tuple(range(T)), (0.0,) * T, (0.0,) * T)
    k0, remaining = rng.randint(0, 3), rng.randint(1, 9)
    cuts = {k: rng.randrange(T) for k in range(k0, k0 + remaining)}
    store = ProposalStore()
    for k, c in cuts.items():
        if rng.random() < 0.3:  # carried over: generated from a prefix of this root
            store.add(k, proposal(root.tokens[:c], T, 100 + k))
        elif rng.random() < 0.2 and c > 0:  # stale: its prefix is not the root's
            store.add(k, proposal((-1,) + root.tokens[1:c], T, 100 + k))
    return RoundContext(root, "", k0, remaining, rng.randint(1, 8), lambda k: Forced(cuts[k]), store)


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
                tokens = tokens[: found.proposal.cut] + found.proposal.tokens
        total += prob * count
    return total


@pytest.mark.parametrize("seed", range(40))
def test_expected_transitions_match_brute_force(seed):
    rng = random.Random(seed)
    ctx = random_context(rng)
    predictor = CutPredictor() if seed % 2 else ConstantPredictor(0.5, 0.2, 0.3)
    planner = CostAwareStepPlanner(predictor)
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
        E = CostAwareStepPlanner(ConstantPredictor()).expected_transitions(ctx, StepPlanner().plan(ctx))
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


def random_theta(rng: random.Random) -> np.ndarray:
    return np.array([rng.uniform(0, 1), rng.uniform(0, 0.2), rng.uniform(0, 0.3), rng.uniform(0, 0.1)])


def brute_force_cost(ctx: RoundContext, first: list, budget: int, theta: np.ndarray, bits: tuple[int, ...]) -> float:
    """Call time to finish the stage: send ``first``, walk, then the step rule at ``budget``
    until depth K, with the real ProposalStore, StepPlanner and walk rule. Every proposal
    gets fresh tokens (never the state's), and depth k accepts iff bits[k - k0]."""
    T = ctx.root.length
    store = ProposalStore()
    for k in range(ctx.k0, ctx.k0 + ctx.remaining):
        found = ctx.store.find(k, ctx.root.tokens, ctx.draws(k).cut(T))
        if found is not None:
            store.add(k, found)
    tokens, k, end, fresh, total = ctx.root.tokens, ctx.k0, ctx.k0 + ctx.remaining, 1000, 0.0
    requests = first
    while k < end:
        total += max(float(CallTimeModel.features([T - p.cut for p in requests]) @ theta), MIN_TIME_S)
        for p in requests:
            store.add(p.decision, StoredProposal(tokens[: p.cut], Proposal(p.cut, tuple(range(fresh, fresh + T - p.cut)), (0.0,) * (T - p.cut), (0.0,) * (T - p.cut)), (0, 0)))
            fresh += T
        while k < end:
            found = store.find(k, tokens, ctx.draws(k).cut(T))
            if found is None:
                break
            if bits[k - ctx.k0]:
                tokens = tokens[: found.proposal.cut] + found.proposal.tokens
            k += 1
        store.discard_before(k)
        if k < end:
            state = ChainState((99,), tokens, (0.0,) * T, (0.0,) * T)
            requests = StepPlanner().plan(RoundContext(state, "", k, end - k, budget, ctx.draws, store))
    return total


def brute_force_rollout(ctx, first, budget, theta, predictor) -> float:
    T = ctx.root.length
    a = [h_plus(predictor, ctx.draws(k).cut(T) / T) for k in range(ctx.k0, ctx.k0 + ctx.remaining)]
    return math.fsum(
        math.prod(x if b else 1.0 - x for x, b in zip(a, bits)) * brute_force_cost(ctx, first, budget, theta, bits)
        for bits in itertools.product((0, 1), repeat=ctx.remaining)
    )


@pytest.mark.parametrize("seed", range(30))
def test_rollout_values_match_brute_force(seed):
    """Exact outcomes (all accept patterns): Q(n) = t(n) + E[J_b(after)] equals the store-level
    simulation for every n and every base budget, and b* is the base with the least E[J_b]."""
    rng = random.Random(seed)
    ctx = random_context(rng)
    predictor = CutPredictor() if seed % 2 else ConstantPredictor(0.5, 0.2, 0.3)
    model = CallTimeModel()
    model.theta = random_theta(rng)
    planner = CostAwareStepPlanner(predictor, model, explore=(), horizon=100)
    batch = StepPlanner().plan(ctx)
    if not batch:
        return
    outcomes = planner.model(ctx, batch)[0].exact_outcomes()
    N = len(batch)
    bases = sorted({b for b in BASES if b < N} | {N})
    J = {b: brute_force_rollout(ctx, batch[:b], b, model.theta, predictor) for b in bases}
    for b in bases:
        base, Q = planner.rollout_values(ctx, batch, outcomes, base=b)
        assert base == b and len(Q) == N
        for n in range(1, N + 1):
            assert Q[n - 1] == pytest.approx(brute_force_rollout(ctx, batch[:n], b, model.theta, predictor), rel=1e-9)
        assert Q[b - 1] == pytest.approx(J[b], rel=1e-9)  # sending b then continuing at b is the fixed rule b
    best, _ = planner.rollout_values(ctx, batch, outcomes)
    assert J[best] == pytest.approx(min(J.values()), rel=1e-9)


def test_rollout_choice_is_the_argmin_and_varies():
    """Exploration off: the batch has the length n minimizing the sampled Q(n)."""
    sizes = set()
    for seed in range(40):
        rng = random.Random(seed)
        ctx = random_context(rng)
        model = CallTimeModel()
        model.theta = random_theta(rng)
        planner = CostAwareStepPlanner(CutPredictor(), model, explore=())
        batch = StepPlanner().plan(ctx)
        got = planner.plan(ctx)
        assert got == batch[: len(got)]
        if len(batch) <= 1:
            assert len(got) == len(batch)
            continue
        base, Q = planner.rollout_values(ctx, batch)
        assert Q[len(got) - 1] == min(Q) and planner.last_base == base
        assert planner.plan(ctx) == got  # same history, same sampled futures, same choice
        sizes.add((len(got), len(batch)))
    assert any(n < N for n, N in sizes) and any(n == N > 1 for n, N in sizes)


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
        planner = CostAwareStepPlanner(CutPredictor(), model, explore=(), objective="renewal")
        planner.transitions, planner.call_time_s = 7, rng.uniform(0.5, 20.0)
        batch = StepPlanner().plan(ctx)
        got = planner.plan(ctx)
        if len(batch) > 1:
            V = planner.renewal_values(ctx, batch)
            assert V[len(got) - 1] == max(V)


def test_match_rate_is_learned_from_realized_roots():
    """Between two roots of a stage: smallest accepted cut m = 2, roots agree on 5 tokens: 3 matched."""
    planner = CostAwareStepPlanner(ConstantPredictor(), explore=(1.0,) * 10)
    cuts = {0: 4, 1: 2, 2: 6, 3: 1, 4: 0}
    draws = lambda k: Forced(cuts[k])  # noqa: E731
    root = ChainState((99,), (0, 1, 2, 3, 4, 5, 6, 7), (0.0,) * 8, (0.0,) * 8)
    later = ChainState((99,), (0, 1, 2, 3, 4, 9, 9, 9), (0.0,) * 8, (0.0,) * 8)
    planner.plan(RoundContext(root, "", 0, 5, 3, draws, ProposalStore()))
    assert planner.match == 0.0
    planner.plan(RoundContext(later, "110", 3, 2, 3, draws, ProposalStore()))  # accepts at cuts 4 and 2
    assert (planner.match_tokens, planner.match_ends) == (3, 1) and planner.match == 0.75
    planner.plan(RoundContext(later, "1100", 4, 1, 3, draws, ProposalStore()))  # a reject: nothing to learn
    assert planner.match == 0.75


def test_objective_is_checked():
    with pytest.raises(ValueError, match="objective"):
        CostAwareStepPlanner(ConstantPredictor(), objective="greedy")



def test_myopic_choice_is_the_argmax_of_rate():
    """Objective "myopic", exploration off: the batch has the length n maximizing E(n) / t(n)."""
    sizes = set()
    for seed in range(60):
        rng = random.Random(seed)
        ctx = random_context(rng)
        model = CallTimeModel()
        model.theta = np.array([rng.uniform(0, 1), rng.uniform(0, 0.2), rng.uniform(0, 0.3), rng.uniform(0, 0.1)])
        planner = CostAwareStepPlanner(CutPredictor(), model, explore=(), objective="myopic")
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


def test_plan_is_a_prefix_of_the_step_rule_and_explores_first():
    for seed in range(30):
        ctx = random_context(random.Random(seed))
        batch = StepPlanner().plan(ctx)
        planner = CostAwareStepPlanner(CutPredictor(), SyntheticClock())
        for i in range(len(EXPLORE) + 3):
            got = planner.plan(ctx)
            assert got == batch[: len(got)] and (len(got) >= 1) == bool(batch)
            if batch and i < len(EXPLORE):
                assert len(got) == max(1, math.ceil(EXPLORE[i] * len(batch)))
            planner.observe(RoundFeedback(ctx.root.length, (), tuple((0, ctx.root.length - p.cut) for p in got), 1.0))


def test_time_model_recovers_a_linear_law_and_stays_positive():
    rng = np.random.default_rng(0)
    calls = [[int(x) for x in rng.integers(1, 49, size=rng.integers(1, 21))] for _ in range(40)]
    model = CallTimeModel()
    assert model.predict([5]) == MIN_TIME_S  # before any call: defined and positive
    for new in calls:
        model.observe(new, law_time(new))
    assert model.theta == pytest.approx(CPU_LAW, rel=1e-6)
    noisy = CallTimeModel()
    for new in calls:
        noisy.observe(new, law_time(new) * float(rng.lognormal(0.0, 0.05)))
    for new in calls[:10]:
        assert noisy.predict(new) == pytest.approx(law_time(new), rel=0.1)
    # A law with a negative per-row term: the fit keeps theta >= 0 and t(n) monotone, positive.
    neg = CallTimeModel()
    for new in calls:
        neg.observe(new, 0.5 - 0.01 * len(new) + 0.001 * max(new))
    assert (neg.theta >= 0).all()
    ts = [neg.predict([30] * n) for n in range(1, 21)]
    assert all(t > 0 for t in ts) and ts == sorted(ts)


def test_observe_feeds_the_time_model_and_the_predictor():
    predictor = CutPredictor()
    planner = CostAwareStepPlanner(predictor, SyntheticClock())
    planner.observe(RoundFeedback(8, ((2, 0.0), (4, -20.0), (6, math.log(0.5))), ((5, 6), (3, 4)), 0.3))
    assert predictor.observations == [Observation(0.25, ACCEPT), Observation(0.5, REJECT), Observation(0.75, UNCERTAIN)]
    assert planner.time_model.calls == 1
    planner.observe(RoundFeedback(8, ((1, 0.0),), (), 0.0))  # a round without a call
    assert planner.time_model.calls == 1 and predictor.observations[-1] == Observation(0.125, ACCEPT)


def test_make_planner_loads_the_predictor_lazily(monkeypatch):
    loaded = []
    fake = types.ModuleType("presto_sgl.predictor")

    def load_predictor(spec: str, *, online: bool):
        loaded.append((spec, online))
        return ConstantPredictor()

    fake.load_predictor = load_predictor
    monkeypatch.setitem(sys.modules, "presto_sgl.predictor", fake)
    planner = make_planner(PrestoConfig("step", predictor="mine.json", online=True, cost_aware=True))
    assert isinstance(planner, CostAwareStepPlanner) and loaded == [("mine.json", True)]
    assert planner.keying == "step" and planner.carries_over
    assert type(make_planner(PrestoConfig("step"))) is StepPlanner


def synthetic_rate(sampler, seeds: range) -> float:
    """Transitions per synthetic second (``law_time`` of every MH call) over several chains."""
    transitions, seconds = 0, 0.0
    for seed in seeds:
        buf = io.StringIO()
        transitions += sampler.run([1, 2, 3], seed=seed, trace=TraceWriter(buf)).metrics.transitions
        calls = [r for r in read_trace(io.StringIO(buf.getvalue())) if r["type"] == "call" and r["kind"] == "mh"]
        seconds += sum(law_time([r["new_tokens"] for r in c["requests"]]) for c in calls)
    return transitions / seconds


def test_rate_on_a_cpu_like_clock():
    """The planner varies n and beats one request per call (sequential cost) on the synthetic clock.

    Not asserted: beating the full fixed budget. On this short run (4 chains, 4 exploration
    calls, the stub CutPredictor) it measured 5.09 transitions/s against 5.70 for N = 20
    and 4.67 for N = 10; benchmarks/cost_aware_sim.py measures longer runs.
    """
    engine = ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))
    cfg = PowerConfig(alpha=4.0, max_new_tokens=30, block_size=10, steps=25, keying="step")
    one = synthetic_rate(PrestoPowerMH(engine, cfg, PrestoConfig("step", budget=1)), range(4))
    cost = synthetic_rate(presto_sampler(engine, cfg, PrestoConfig("step", budget=20, cost_aware=True)), range(4))
    assert cost > 1.5 * one
