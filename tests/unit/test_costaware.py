"""The cost-aware step planner: the rollout values (call time of the round plus the
expected time to finish the stage with a fixed budget) against brute force with the real
ProposalStore and walk rule, the argmin choice, the match-rate estimate, the call-time
model, the prefix-of-the-step-rule property, feedback, per-run planners, and the
make_planner wiring. (Per-run planners of a subclass: tests/unit/test_costaware_subclass.py.)"""

from __future__ import annotations

import io
import itertools
import math
import random

import numpy as np
import pytest

import presto_sgl.predictor
from presto_sgl import ChainState, Sampler, TraceWriter, read_trace, sampling_configs
from presto_sgl.config import PrestoConfig
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.context import RunContext
from presto_sgl.kernels import Proposal
from presto_sgl.kernels.proposals import ProposalStore, StoredProposal
from presto_sgl.planners import CostAware, RoundContext, RoundFeedback, StepPlanner
from presto_sgl.planners.costaware import BASES, EndLengths, MatchRate
from presto_sgl.planners.timemodel import EXPLORE, MIN_TIME_S, CallTimeModel
from presto_sgl.predictor.certainty import ACCEPT, REJECT, UNCERTAIN, ConstantPredictor, Observation, h_plus
from presto_sgl.samplers import make_planner
from tests.support.planning import KERNEL, Forced, random_context, random_theta
from tests.support.predictors import CutPredictor
from tests.support.timing import CPU_LAW, SyntheticClock, law_time, presto_sampler, rollout_planner


def brute_force_cost(
    ctx: RoundContext,
    first: list,
    budget: int,
    theta: np.ndarray,
    bits: tuple[int, ...],
    new: tuple[int, ...] | None = None,
) -> float:
    """Call time to finish the stage: send ``first``, walk, then the step rule at ``budget``
    until depth K, with the real ProposalStore, StepPlanner and walk rule. Every proposal
    gets fresh tokens (never the state's), and depth k accepts iff bits[k - k0]; a call
    is priced with new[k - k0] tokens for decision k (default T - cut)."""
    T = ctx.root.length
    store = ProposalStore()
    for k in range(ctx.k0, ctx.k0 + ctx.remaining):
        found = ctx.store.find(k, ctx.root.tokens, ctx.draws(k).cut(T))
        if found is not None:
            store.add(k, found)
    tokens, k, end, fresh, total = ctx.root.tokens, ctx.k0, ctx.k0 + ctx.remaining, 1000, 0.0
    requests = first
    while k < end:
        counts = [T - p.cut if new is None else new[p.decision - ctx.k0] for p in requests]
        total += max(float(CallTimeModel.features(counts) @ theta), MIN_TIME_S)
        for p in requests:
            store.add(
                p.decision,
                StoredProposal(
                    tokens[: p.cut],
                    (
                        Proposal(
                            p.cut, tuple(range(fresh, fresh + T - p.cut)), (0.0,) * (T - p.cut), (0.0,) * (T - p.cut)
                        ),
                    ),
                    ((0, 0),),
                ),
            )
            fresh += T
        while k < end:
            found = store.find(k, tokens, ctx.draws(k).cut(T))
            if found is None:
                break
            if bits[k - ctx.k0]:
                tokens = tokens[: found.proposals[0].cut] + found.proposals[0].tokens
            k += 1
        store.discard_before(k)
        if k < end:
            state = ChainState((99,), tokens, (0.0,) * T, (0.0,) * T)
            requests = StepPlanner().plan(
                RoundContext(
                    state,
                    "",
                    k,
                    end - k,
                    budget=budget,
                    draws=ctx.draws,
                    store=store,
                    kernel=ctx.kernel,
                    keying=ctx.keying,
                )
            )
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
    planner = rollout_planner(predictor, model, explore=(), horizon=100)
    batch = StepPlanner().plan(ctx)
    if not batch:
        return
    outcomes = planner.policy.model(ctx, batch)[0].exact_outcomes()
    N = len(batch)
    bases = sorted({b for b in BASES if b < N} | {N})
    J = {b: brute_force_rollout(ctx, batch[:b], b, model.theta, predictor) for b in bases}
    for b in bases:
        base, Q = planner.policy.rollout_values(ctx, batch, outcomes, base=b)
        assert base == b and len(Q) == N
        for n in range(1, N + 1):
            assert Q[n - 1] == pytest.approx(brute_force_rollout(ctx, batch[:n], b, model.theta, predictor), rel=1e-9)
        assert Q[b - 1] == pytest.approx(J[b], rel=1e-9)  # sending b then continuing at b is the fixed rule b
    best, _ = planner.policy.rollout_values(ctx, batch, outcomes)
    assert J[best] == pytest.approx(min(J.values()), rel=1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_rollout_values_price_sampled_lengths(seed):
    """Futures that carry each depth's new tokens (ending="eos"): Q(n) = t(n) + J_b(after)
    of one future equals the store-level simulation with calls priced at those lengths."""
    rng = random.Random(seed)
    ctx = random_context(rng)
    model = CallTimeModel()
    model.theta = random_theta(rng)
    planner = rollout_planner(ConstantPredictor(0.5, 0.2, 0.3), model, explore=(), horizon=100)
    batch = StepPlanner().plan(ctx)
    if not batch:
        return
    rm = planner.policy.model(ctx, batch)[0]
    bits = tuple(rng.randint(0, 1) for _ in range(ctx.remaining))
    new = tuple(rng.randint(1, 3 * ctx.root.length) for _ in range(rm.D))
    future = [(sum(b << i for i, b in enumerate(bits[: rm.D])), (0,) * rm.D, 1.0, new)]
    for b in sorted({b for b in BASES if b < len(batch)} | {len(batch)}):
        _, Q = planner.policy.rollout_values(ctx, batch, future, base=b)
        for n in range(1, len(batch) + 1):
            assert Q[n - 1] == pytest.approx(brute_force_cost(ctx, batch[:n], b, model.theta, bits, new), rel=1e-9)


def test_end_lengths_sample_where_proposals_ended():
    """Ratios (c + n) / L of the requests seen; a draw at cut c is r L - c new tokens, at
    least 1, at most H - c; nothing before MIN_OBSERVED requests."""
    ends = EndLengths(keep=EndLengths.MIN_OBSERVED)
    ends.add(10, [(2, 3)] * (EndLengths.MIN_OBSERVED - 1))  # r = 0.5
    assert ends.sampler(10, 20) is None
    ends.add(10, [(4, 16), (4, 16)])  # r = 2.0 twice; the oldest 0.5 leaves (keep)
    assert sorted(ends._ratios) == [0.5] * (EndLengths.MIN_OBSERVED - 2) + [2.0, 2.0]
    draw = ends.sampler(20, 30)
    got = {draw(random.Random(i), 6) for i in range(200)}
    assert got == {10 - 6, 30 - 6}  # 0.5 * 20 = 10 tokens in all; 2.0 * 20 = 40, capped at H = 30
    assert {draw(random.Random(i), 15) for i in range(200)} == {1, 15}  # ends at least one token after the cut


class Ending:
    """The hand-built rounds' kernel (forced cuts) marked as the EOS-terminated target's."""

    ends = True

    def __getattr__(self, name: str):
        return getattr(KERNEL, name)


def test_only_the_eos_target_learns_end_lengths_and_samples_them():
    eos = Ending()
    for kernel, learns in ((KERNEL, False), (eos, True)):
        planner = rollout_planner(ConstantPredictor(), SyntheticClock(), explore=())
        ctx = random_context(random.Random(1))
        ctx = RoundContext(
            ctx.root,
            "",
            ctx.k0,
            ctx.remaining,
            budget=8,
            draws=ctx.draws,
            store=ctx.store,
            kernel=kernel,
            keying="step",
            horizon=40,
        )
        batch = StepPlanner().plan(ctx)
        for _ in range(EndLengths.MIN_OBSERVED):
            planner.plan(ctx)
            prompt = len(ctx.root.prompt)
            planner.observe(RoundFeedback(ctx.root.length, (), tuple((prompt + p.cut, 30 - p.cut) for p in batch), 1.0))
        assert (len(planner.policy.end_lengths._ratios) > 0) == learns
        futures = planner.policy.sampled_futures(ctx, planner.policy.model(ctx, batch)[0])
        assert all((o[3] is not None) == learns for o in futures)
        if learns:  # every request ended 30 tokens into the response: r = 30 / L, so n = 30 - c
            assert all(o[3] == tuple(30 - c for c in planner.policy.model(ctx, batch)[0].cuts) for o in futures)


def test_rollout_choice_is_the_argmin_and_varies():
    """Exploration off: the batch has the length n minimizing the sampled Q(n)."""
    sizes = set()
    for seed in range(40):
        rng = random.Random(seed)
        ctx = random_context(rng)
        model = CallTimeModel()
        model.theta = random_theta(rng)
        planner = rollout_planner(CutPredictor(), model, explore=())
        batch = StepPlanner().plan(ctx)
        got = planner.plan(ctx)
        assert got == batch[: len(got)]
        if len(batch) <= 1:
            assert len(got) == len(batch)
            continue
        base, Q = planner.policy.rollout_values(ctx, batch)
        assert Q[len(got) - 1] == min(Q) and planner.policy.last_base == base
        assert planner.plan(ctx) == got  # same history, same sampled futures, same choice
        sizes.add((len(got), len(batch)))
    assert any(n < N for n, N in sizes) and any(n == N > 1 for n, N in sizes)


def test_match_rate_is_learned_from_realized_roots():
    """Between two roots of a stage: smallest accepted cut m = 2, roots agree on 5 tokens: 3 matched."""
    planner = rollout_planner(ConstantPredictor(), explore=(1.0,) * 10)
    cuts = {0: 4, 1: 2, 2: 6, 3: 1, 4: 0}
    draws = lambda k: Forced(cuts[k])  # noqa: E731
    root = ChainState((99,), (0, 1, 2, 3, 4, 5, 6, 7), (0.0,) * 8, (0.0,) * 8)
    later = ChainState((99,), (0, 1, 2, 3, 4, 9, 9, 9), (0.0,) * 8, (0.0,) * 8)
    planner.plan(
        RoundContext(root, "", 0, 5, budget=3, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="step")
    )
    assert planner.policy.match == 0.0
    planner.plan(
        RoundContext(later, "110", 3, 2, budget=3, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="step")
    )  # accepts at cuts 4 and 2
    assert (planner.policy.match_rate.tokens, planner.policy.match_rate.ends) == (3, 1) and planner.policy.match == 0.75
    planner.plan(
        RoundContext(later, "1100", 4, 1, budget=3, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="step")
    )  # a reject: nothing to learn
    assert planner.policy.match == 0.75


def test_plan_is_a_prefix_of_the_step_rule_and_explores_first():
    for seed in range(30):
        ctx = random_context(random.Random(seed))
        batch = StepPlanner().plan(ctx)
        planner = rollout_planner(CutPredictor(), SyntheticClock())
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
    planner = rollout_planner(predictor, SyntheticClock())
    planner.observe(RoundFeedback(8, ((2, 0.0), (4, -20.0), (6, math.log(0.5))), ((5, 6), (3, 4)), 0.3))
    assert predictor.observations == [Observation(0.25, ACCEPT), Observation(0.5, REJECT), Observation(0.75, UNCERTAIN)]
    assert planner.time_model.calls == 1
    planner.observe(RoundFeedback(8, ((1, 0.0),), (), 0.0))  # a round without a call
    assert planner.time_model.calls == 1 and predictor.observations[-1] == Observation(0.125, ACCEPT)


def test_make_planner_loads_the_predictor(monkeypatch):
    loaded = []

    def load_predictor(spec: str, *, online: bool):
        loaded.append((spec, online))
        return ConstantPredictor()

    monkeypatch.setattr(presto_sgl.predictor, "load_predictor", load_predictor)  # the name the rules call
    planner = make_planner(PrestoConfig("step", predictor="mine.json", online=True, cost_aware=True))
    assert isinstance(planner, CostAware) and loaded == [("mine.json", True)]
    assert planner.keying == "step" and planner.carries_over
    assert type(make_planner(PrestoConfig("step"))) is StepPlanner
    assert loaded == [("mine.json", True)]  # the plain step rule loads no predictor


def test_for_run_shares_the_learners_and_not_the_round_state():
    """Per-run planners share predictor, time model and match rate; each learns the match
    from its own chain's consecutive roots only."""
    planner = rollout_planner(CutPredictor(), SyntheticClock(), explore=(1.0,) * 10, samples=8, horizon=12, seed=3)
    first, second = planner.for_run(), planner.for_run()
    for run in (first, second):
        assert run is not planner and type(run) is CostAware and run.policy is not planner.policy
        assert run.policy.predictor is planner.policy.predictor and run.time_model is planner.time_model
        assert run.policy.match_rate is planner.policy.match_rate
        assert (run.policy.explore, run.policy.samples, run.policy.horizon, run.policy.seed) == ((1.0,) * 10, 8, 12, 3)
    cuts = {0: 4, 1: 2, 2: 6, 3: 1, 4: 0}
    draws = lambda k: Forced(cuts[k])  # noqa: E731
    root = ChainState((99,), (0, 1, 2, 3, 4, 5, 6, 7), (0.0,) * 8, (0.0,) * 8)
    later = ChainState((99,), (0, 1, 2, 3, 4, 9, 9, 9), (0.0,) * 8, (0.0,) * 8)
    first.plan(RoundContext(root, "", 0, 5, budget=3, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="step"))
    second.plan(
        RoundContext(later, "110", 3, 2, budget=3, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="step")
    )  # no previous root
    assert planner.policy.match == 0.0 and (planner.policy.match_rate.tokens, planner.policy.match_rate.ends) == (0, 0)
    first.plan(
        RoundContext(later, "110", 3, 2, budget=3, draws=draws, store=ProposalStore(), kernel=KERNEL, keying="step")
    )
    assert (planner.policy.match_rate.tokens, planner.policy.match_rate.ends) == (3, 1) and second.policy.match == 0.75
    first.observe(RoundFeedback(8, ((2, 0.0),), ((5, 6),), 0.3))
    assert second.time_model.calls == 1 and planner.policy.predictor.observations == [Observation(0.25, ACCEPT)]


def test_match_rate_is_a_censored_geometric_mle():
    rate = MatchRate()
    assert rate.value == 0.0
    rate.add(3, True)
    rate.add(5, False)  # the match ran to T: censored, no end
    assert (rate.tokens, rate.ends) == (8, 1) and rate.value == 8 / 9


def synthetic_rate(sampler, seeds: range) -> float:
    """Transitions per synthetic second (``law_time`` of every MH call) over several chains."""
    transitions, seconds = 0, 0.0
    for seed in seeds:
        buf = io.StringIO()
        transitions += sampler.run(
            [1, 2, 3],
            seed=seed,
            context=RunContext(trace=TraceWriter(buf)),
        ).metrics.transitions
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
    power = dict(alpha=4.0, max_new_tokens=30, block_size=10, steps=25)
    one = synthetic_rate(Sampler(engine, *sampling_configs("step", budget=1, **power)), range(4))
    cfg, presto = sampling_configs("step", budget=20, cost_aware=True, **power)
    assert presto.keying == "step"
    sampler = presto_sampler(engine, cfg, presto)
    assert isinstance(sampler, Sampler) and isinstance(sampler.planner, CostAware)
    cost = synthetic_rate(sampler, range(4))
    assert cost > 1.5 * one
