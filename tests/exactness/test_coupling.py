"""Layer 2: coupling (paper Prop. 1). For the same keys on a seeded engine, PreSTO-PowerMH
visits exactly the states of sequential PowerMH, transition by transition: tokens and
their per-token log q / log p0, bit for bit. Path keys couple BFS and the predictive rule
(with an online, cut-dependent test predictor) with the path-keyed sequential sampler;
step keys couple the step rule, plain and cost-aware (test predictor, synthetic clock),
with the step-keyed one.
"""

from __future__ import annotations

import io

import pytest
from tests.support.timing import presto_sampler

from presto_sgl import PowerConfig, PowerMH, PrestoConfig, PrestoPowerMH, TraceWriter, read_trace
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM

pytestmark = pytest.mark.exactness

# (max_new_tokens, block_size, steps K)
SCHEDULES = [(8, 8, 1), (16, 8, 6), (24, 8, 12), (30, 10, 25)]
BUDGETS = [1, 2, 5, 20]
RULES = ["bfs", "predictive", "step", "step-cost"]


def presto_config(rule: str, budget: int) -> PrestoConfig:
    """The PrestoConfig of a RULES entry ("step-cost": the step rule with ``cost_aware``)."""
    if rule == "step-cost":
        return PrestoConfig("step", budget=budget, cost_aware=True)
    return PrestoConfig(rule, budget=budget)


def run_states(sampler, prompt, seed):
    seen = []
    result = sampler.run(prompt, seed=seed, on_transition=lambda stage, k, st, tr: seen.append((stage, k, st, tr.accepted)))
    return seen, result


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: "n{}-B{}-K{}".format(*s))
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("alpha,sharpness", [(4.0, 2.0), (2.0, 0.7)])
def test_presto_visits_the_sequential_states(rule, budget, schedule, alpha, sharpness):
    n, B, K = schedule
    engine = ReferenceEngine(ReferenceLM(12, sharpness=sharpness, seed=3))
    presto = presto_config(rule, budget)
    cfg = PowerConfig(alpha=alpha, max_new_tokens=n, block_size=B, steps=K, keying=presto.keying)
    prompt = [1, 2, 3]
    for seed in (0, 1, 2):
        seq, seq_result = run_states(PowerMH(engine, cfg), prompt, seed)
        pre, pre_result = run_states(presto_sampler(engine, cfg, presto), prompt, seed)
        assert len(seq) == len(pre) == K * (n // B)
        for a, b in zip(seq, pre):
            assert a == b  # (stage, k, ChainState incl. logq/logp, accepted) identical
        assert pre_result.state == seq_result.state
        m = pre_result.metrics
        assert m.transitions == K * (n // B) == seq_result.metrics.model_calls
        assert m.model_calls <= seq_result.metrics.model_calls
        if budget == 1:
            assert m.model_calls == seq_result.metrics.model_calls


def test_some_chains_accept_and_reject():
    """Guard: the coupling configurations exercise both outcomes (else equality is trivial)."""
    engine = ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))
    cfg = PowerConfig(alpha=4.0, max_new_tokens=24, block_size=8, steps=12, keying="step")
    seen, _ = run_states(PowerMH(engine, cfg), [1, 2, 3], 0)
    outcomes = {acc for *_, acc in seen}
    assert outcomes == {True, False}


def test_keyings_give_different_chains():
    """Path and step keys are different randomizations: the check above is not vacuous."""
    engine = ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))
    states = {}
    for keying in ("path", "step"):
        cfg = PowerConfig(alpha=4.0, max_new_tokens=24, block_size=8, steps=12, keying=keying)
        states[keying] = PowerMH(engine, cfg).run([1, 2, 3], seed=0).state
    assert states["path"] != states["step"]


def test_coupling_runs_exercise_deferral_quirk_and_carry_over():
    """Guard: the rounds above really defer (BFS quirk) and carry proposals over (step)."""
    engine = ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))
    bfs_cfg = PowerConfig(alpha=4.0, max_new_tokens=30, block_size=10, steps=25, keying="path")
    bfs = PrestoPowerMH(engine, bfs_cfg, PrestoConfig("bfs", budget=20)).run([1, 2, 3], seed=0).metrics
    assert bfs.requests_unreachable > 0 and bfs.model_calls > 3  # several rounds per stage
    step_cfg = PowerConfig(alpha=4.0, max_new_tokens=30, block_size=10, steps=25, keying="step")
    carried = []
    sampler = PrestoPowerMH(engine, step_cfg, PrestoConfig("step", budget=5))
    buf = io.StringIO()
    sampler.run([1, 2, 3], seed=0, trace=TraceWriter(buf))
    for rec in read_trace(io.StringIO(buf.getvalue())):
        if rec["type"] == "node" and rec["request"][0] < rec["call"]:
            carried.append(rec)
    assert carried, "no proposal was carried over to a later round"


def test_coupling_runs_exercise_the_predictive_rule():
    """Guard: the predictive rule plans several rounds per stage and other requests than BFS,
    none unreachable, while its online predictor refits on the realized decisions."""
    engine = ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))
    cfg = PowerConfig(alpha=4.0, max_new_tokens=30, block_size=10, steps=25, keying="path")
    planned, metrics = {}, {}
    for rule in ("predictive", "bfs"):
        sampler = presto_sampler(engine, cfg, PrestoConfig(rule, budget=5))
        buf = io.StringIO()
        metrics[rule] = sampler.run([1, 2, 3], seed=0, trace=TraceWriter(buf)).metrics
        calls = [r for r in read_trace(io.StringIO(buf.getvalue())) if r["type"] == "call" and r["kind"] == "mh"]
        planned[rule] = [[q["decision"] for q in c["requests"]] for c in calls]
        if rule == "predictive":
            assert len(sampler.planner.predictor.observations) == metrics[rule].transitions
    assert len(planned["predictive"]) > 3 * 3 and metrics["predictive"].requests_unreachable == 0
    assert planned["predictive"] != planned["bfs"]


def test_coupling_runs_exercise_the_cost_aware_budget():
    """Guard: the cost-aware step rule sends batches of several sizes below the budget (the
    step rule's prefix), uses carried-over proposals, and feeds its predictor and clock."""
    engine = ReferenceEngine(ReferenceLM(12, sharpness=2.0, seed=3))
    cfg = PowerConfig(alpha=4.0, max_new_tokens=30, block_size=10, steps=25, keying="step")
    sampler = presto_sampler(engine, cfg, presto_config("step-cost", 20))
    buf = io.StringIO()
    metrics = sampler.run([1, 2, 3], seed=0, trace=TraceWriter(buf)).metrics
    records = read_trace(io.StringIO(buf.getvalue()))
    sizes = {len(r["requests"]) for r in records if r["type"] == "call" and r["kind"] == "mh"}
    assert len(sizes) >= 3 and min(sizes) < 5
    assert any(r["type"] == "node" and r["request"][0] < r["call"] for r in records)
    planner = sampler.planner
    assert len(planner.predictor.observations) == metrics.transitions
    assert planner.time_model.calls == metrics.model_calls
