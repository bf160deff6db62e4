"""Many chains through one sampler on threads (presto_sgl.scheduling.runner.run_prompts).

8 chains on 4 threads through one sampler give the same final states as the same rule
run one chain at a time and as sequential PowerMH with the same keys (seeded reference
engine), for every rule -- including the predictive rule with an online predictor and
the cost-aware step rule (online predictor, measured call times), whose learners are
shared by the chains, so that their planning depends on the order the chains run in
(exactness makes the states independent of it). Stateless rules also make the same
calls. A stress loop (more threads than chains, the same chain twice at once, a fast
GIL switch) must raise nothing and change nothing.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from presto_sgl import PrestoConfig, metrics_from_trace, read_trace, sampling_configs
from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.samplers import Sampler
from presto_sgl.scheduling.runner import run_prompts

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [2, 2], [3, 1, 4, 1], [5, 9], [11, 0, 7]]
SEED = 7
POWER: dict[str, Any] = dict(alpha=4.0, max_new_tokens=16, block_size=8, steps=10)
RULES: dict[str, dict[str, Any]] = {  # name: sampling_configs arguments
    "sequential": dict(rule="sequential"),
    "bfs": dict(rule="bfs", budget=5),
    "predictive-online": dict(rule="predictive", budget=5, online=True),
    "step": dict(rule="step", budget=5),
    "step-cost-online": dict(rule="step", budget=10, cost_aware=True, online=True),
}
STATELESS = {"sequential", "bfs", "step"}  # planning does not depend on other chains


@pytest.fixture
def engine(reference_engine):
    return reference_engine(ReferenceLM(12, sharpness=2.0, seed=3))


def sampler_of(engine, rule: str):
    cfg, presto = sampling_configs(**RULES[rule], **POWER)
    return Sampler(engine, cfg, presto)


def one_at_a_time(sampler):
    return [sampler.run(p, seed=SEED, prompt_id=i) for i, p in enumerate(PROMPTS)]


def calls(result):
    return (result.metrics.model_calls, result.metrics.transitions, result.metrics.requests_issued)


@pytest.mark.parametrize("rule", list(RULES))
def test_threaded_chains_equal_one_at_a_time_and_sequential(engine, rule):
    sampler = sampler_of(engine, rule)
    threaded = run_prompts(sampler.run, PROMPTS, seed=SEED, workers=4)
    alone = one_at_a_time(sampler_of(engine, rule))
    sequential = one_at_a_time(
        Sampler(engine, sampler.config, PrestoConfig("sequential", keying=sampler.presto.keying))
    )
    assert len(threaded) == len(alone) == len(sequential) == len(PROMPTS)
    for i, (t, a, s) in enumerate(zip(threaded, alone, sequential)):
        assert t.state.prompt == tuple(PROMPTS[i])
        assert t.state == a.state == s.state, f"chain {i} differs"
        if rule in STATELESS:
            assert calls(t) == calls(a)
    # guards: distinct chains with both outcomes; prefetching rules prefetch
    assert len({r.state for r in threaded}) == len(PROMPTS)
    accepted = sum(r.metrics.accepted for r in threaded)
    assert 0 < accepted < sum(r.metrics.transitions for r in threaded)
    if rule != "sequential":
        assert sum(r.metrics.model_calls for r in threaded) < sum(r.metrics.model_calls for r in sequential)
    planner = sampler.planner
    if rule == "predictive-online":
        assert planner.predictor.refits > 0  # the shared predictor refit during the threaded runs
    if rule == "step-cost-online":  # the shared clock saw every call of every chain
        assert planner.time_model.calls == sum(r.metrics.model_calls for r in threaded)
        assert planner.predictor.refits > 0


@pytest.fixture
def fast_gil_switch():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # switch threads often: interleave the chains finely
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.parametrize("rule", list(RULES))
def test_stress_many_threads_one_sampler(engine, rule, fast_gil_switch, tmp_path):
    """Repeatedly, two batches of the 8 chains at once on 8 threads each (16 threads, every
    chain twice at the same time) through one sampler: no exception, the same states (and
    calls, for stateless rules) every time, and each chain's trace gives its metrics."""
    sampler = sampler_of(engine, rule)
    expected = one_at_a_time(sampler_of(engine, rule))
    with ThreadPoolExecutor(max_workers=2) as outer:
        for rep in range(3):
            traces = tmp_path / f"rep{rep}"
            batches = [
                outer.submit(run_prompts, sampler.run, PROMPTS, seed=SEED, workers=8, trace_dir=traces),
                outer.submit(run_prompts, sampler.run, PROMPTS, seed=SEED, workers=8),
            ]
            for batch in batches:
                results = batch.result()  # re-raises any chain's exception
                assert [r.state for r in results] == [e.state for e in expected]
                if rule in STATELESS:
                    assert [calls(r) for r in results] == [calls(e) for e in expected]
            traced = batches[0].result()
            for i, result in enumerate(traced):
                with open(traces / f"prompt-{i}.jsonl", encoding="utf-8") as f:
                    assert metrics_from_trace(read_trace(f)) == [result.metrics]
