"""Bad input gives ValueErrors that name the argument; the reference engine keeps its
contract; bad engine results raise EngineError before the chain moves."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest

from presto_sgl import (
    EngineError,
    KernelConfig,
    PowerConfig,
    PrestoConfig,
    Request,
    Sampler,
    Target,
    TraceWriter,
    metrics_from_trace,
    read_trace,
    sampling_configs,
)
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.context import RunContext
from presto_sgl.planners import BFSPlanner, SequentialPlanner, StepPlanner


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": math.inf}, "alpha"),
        ({"alpha": math.nan}, "alpha"),
        ({"tau": 0.0}, "tau"),
        ({"tau": -0.5}, "tau"),
        ({"steps": -1}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"max_new_tokens": 20, "block_size": 16}, "max_new_tokens"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"block_size": 0}, "block_size"),
    ],
)
def test_power_config_errors_name_the_argument(kwargs, name):
    """Each object checks its own fields: the target's, the kernel's."""
    owner = KernelConfig if name in ("tau", "steps") else Target
    with pytest.raises(ValueError, match=f"`{name}`") as err:
        owner(**kwargs)
    assert repr(next(iter(kwargs.values())))[:3] in str(err.value)  # the bad value is shown


def test_remainder_message_suggests_a_fix():
    with pytest.raises(ValueError, match="max_new_tokens=32"):
        PowerConfig(Target(max_new_tokens=20, block_size=16))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"budget": 0}, "budget"),
        ({"budget": -3}, "budget"),
        ({"rule": "dfs"}, "rule"),
        ({"rule": "sequential", "cost_aware": True}, "cost_aware"),
        ({"online": 1}, "online"),
        ({"predictor": ""}, "predictor"),
        ({"keying": "tree"}, "keying"),
    ],
)
def test_presto_config_errors(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        PrestoConfig(**kwargs)


def test_rule_and_keying_must_match():
    with pytest.raises(ValueError, match="keying='path'"):
        PrestoConfig("bfs", keying="step")
    assert PrestoConfig("bfs").keying == "path" and PrestoConfig("sequential").keying == "step"


@pytest.mark.parametrize(
    "rule, kwargs, name",
    [
        ("bfs", {"keying": "step"}, "keying"),
        ("step", {"keying": "path"}, "keying"),
        ("dfs", {}, "rule"),
        ("step", {"budget": 0}, "budget"),
        ("sequential", {"steps": -1}, "steps"),
        ("step", {"alpha": 0.0}, "alpha"),
    ],
)
def test_sampling_configs_errors_name_the_argument(rule, kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        sampling_configs(rule, **kwargs)


def test_sampling_configs_pick_the_rule_keying_and_make_sampler_its_planner():
    engine = ReferenceEngine()
    for rule, keying, planner in [
        ("sequential", "step", SequentialPlanner),
        ("bfs", "path", BFSPlanner),
        ("step", "step", StepPlanner),
    ]:
        config, presto = sampling_configs(rule, budget=5, max_new_tokens=8, block_size=4, steps=3)
        assert (presto.keying, presto.rule, presto.budget, config.target.max_new_tokens) == (keying, rule, 5, 8)
        sampler = Sampler(engine, config, presto)
        assert type(sampler.planner) is planner and sampler.name == "powermh" and sampler.describe()["rule"] == rule
    config, presto = sampling_configs("sequential", keying="path")  # sequential runs with either keying
    assert presto.keying == "path" and presto.sequential


def test_injected_planner_and_configs_are_checked():
    engine = ReferenceEngine()
    config, presto = sampling_configs("sequential", keying="path")
    with pytest.raises(ValueError, match="keying='step'"):
        Sampler(engine, config, presto, planner=StepPlanner())  # the planner's keys, not the rule's
    planner = BFSPlanner()
    assert Sampler(engine, config, presto, planner=planner).planner is planner
    with pytest.raises(TypeError, match="`config`"):
        Sampler(engine, presto, presto)
    with pytest.raises(TypeError, match="`presto`"):
        Sampler(engine, config, config)


@pytest.mark.parametrize(
    "prompt, match", [([], "empty"), ([0, 32], "outside the vocabulary"), ([-1], "outside"), ([1.0], "outside")]
)
def test_prompt_errors(prompt, match):
    with pytest.raises(ValueError, match=match):
        Sampler(
            ReferenceEngine(),
            PowerConfig(Target(max_new_tokens=4, block_size=4), KernelConfig(steps=1)),
            PrestoConfig("sequential"),
        ).run(prompt, seed=0)


def test_seed_must_be_an_integer():
    with pytest.raises(ValueError, match="`seed`"):
        Sampler(
            ReferenceEngine(),
            PowerConfig(Target(max_new_tokens=4, block_size=4), KernelConfig(steps=1)),
            PrestoConfig("sequential"),
        ).run([1], seed="x")


# -- the reference engine --------------------------------------------------------------


def test_reference_engine_scores_match_the_lm_and_seeds_reproduce():
    lm = ReferenceLM(10, seed=2)
    eng = ReferenceEngine(lm)
    reqs = [Request((1, 2, 3), 6, 0.25, seed=11, return_entropy=True), Request((1, 2), 5, 1.0, seed=12)]
    a = eng.generate(reqs)
    b = eng.generate(reqs[::-1])[::-1]  # another batch order: same tokens
    c = eng.generate(reqs[:1])
    assert [x.tokens for x in a] == [x.tokens for x in b] and a[0].tokens == c[0].tokens
    for req, comp in zip(reqs, a):
        assert len(comp.tokens) == req.max_new_tokens
        lp, lq = lm.score(req.prefix, comp.tokens, req.temperature)
        assert math.fsum(comp.logp) == pytest.approx(lp, abs=1e-12)
        assert math.fsum(comp.logq) == pytest.approx(lq, abs=1e-12)
    ctx = list(reqs[0].prefix)
    for t, h in zip(a[0].tokens, a[0].entropy):
        assert h == pytest.approx(lm.entropy(ctx))
        ctx.append(t)
    assert a[1].entropy is None


def test_reference_engine_sampling_law():
    """Seeded draws over many seeds follow q_tau (chi-square), so keyed seeds are fresh draws."""
    from scipy import stats

    lm = ReferenceLM(5, seed=2)
    eng = ReferenceEngine(lm)
    toks = [c.tokens[0] for c in eng.generate([Request((1, 2), 1, 0.5, seed=s) for s in range(5000)])]
    q = np.exp(lm.distribution((1, 2), 0.5)[1])
    assert stats.chisquare(np.bincount(toks, minlength=5), q * 5000).pvalue > 1e-3


def test_unseeded_engine_draws_fresh_and_cache_accounting():
    eng = ReferenceEngine(ReferenceLM(10), seeded=False, rng_seed=1)
    r = Request((1, 2, 3, 4), 12, 1.0, seed=5)
    first, second = eng.generate([r, r])
    assert first.tokens != second.tokens  # seeds ignored: fresh draws
    assert first.cached_tokens == 0 and second.cached_tokens == 4  # the prefix was inserted by the first
    assert eng.generate([Request((1, 2, 9), 1, 1.0)])[0].cached_tokens == 2


# -- engine errors never move the chain ----------------------------------------------------


class FaultyEngine:
    """Wraps the reference engine and corrupts row ``row`` of the ``bad_call``-th call."""

    def __init__(self, mode: str, bad_call: int, row: int = 0):
        self.inner = ReferenceEngine(ReferenceLM(12, seed=3))
        self.capabilities = self.inner.capabilities
        self.mode, self.bad_call, self.row, self.calls = mode, bad_call, row, 0

    def generate(self, requests):
        out = self.inner.generate(requests)
        self.calls += 1
        if self.calls != self.bad_call:
            return out
        row = self.row % len(out)
        c = out[row]
        bad = {
            "short": dataclasses.replace(c, tokens=c.tokens[:-1], logq=c.logq[:-1], logp=c.logp[:-1]),
            "logq-length": dataclasses.replace(c, logq=c.logq[:-1]),
            "nan": dataclasses.replace(c, logp=(math.nan,) + c.logp[1:]),
            "token": dataclasses.replace(c, tokens=(10_000,) + c.tokens[1:]),
            "count": None,
        }[self.mode]
        if bad is None:
            return out[:row] + out[row + 1 :]
        return out[:row] + [bad] + out[row + 1 :]


def _faulty_sampler(rule, engine):
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=16, block_size=8), KernelConfig(steps=6))
    return (
        Sampler(engine, cfg, PrestoConfig("sequential"))
        if rule is None
        else Sampler(engine, cfg, PrestoConfig(rule, budget=4))
    )


@pytest.mark.parametrize("mode", ["short", "logq-length", "nan", "token", "count"])
@pytest.mark.parametrize("rule", [None, "bfs", "step"])
def test_bad_engine_results_raise_and_do_not_advance(mode, rule):
    """The first row of a round is the root's decision, which the walk always takes."""
    good: list = []
    _faulty_sampler(rule, FaultyEngine(mode, bad_call=10**9)).run(
        [1, 2], seed=4, on_transition=lambda *a: good.append(a[2])
    )
    seen: list = []
    with pytest.raises(EngineError):
        _faulty_sampler(rule, FaultyEngine(mode, bad_call=4)).run(
            [1, 2], seed=4, on_transition=lambda *a, seen=seen: seen.append(a[2])
        )
    assert seen == good[: len(seen)] and len(seen) < len(good)  # nothing committed from bad data


@pytest.mark.parametrize("mode", ["nan", "token"])
@pytest.mark.parametrize("rule", ["bfs", "step"])
def test_bad_values_are_caught_where_the_walk_uses_them(mode, rule):
    """Lengths are checked on every row, values on the rows the walk takes: a bad value in a
    prefetched row is an EngineError exactly when the chain would use it, and otherwise never
    reaches the chain, which ends as an uninterrupted one."""
    good: list = []
    _faulty_sampler(rule, FaultyEngine(mode, bad_call=10**9)).run(
        [1, 2], seed=4, on_transition=lambda *a: good.append(a[2])
    )
    outcomes = set()
    for bad_call in range(2, 9):
        seen: list = []
        try:
            _faulty_sampler(rule, FaultyEngine(mode, bad_call, row=-1)).run(
                [1, 2], seed=4, on_transition=lambda *a, seen=seen: seen.append(a[2])
            )
            assert seen == good
            outcomes.add("unused")
        except EngineError:
            assert seen == good[: len(seen)] and len(seen) < len(good)
            outcomes.add("used")
    assert outcomes == {"used", "unused"}


# -- metrics recomputed from the trace ----------------------------------------------------


@pytest.mark.parametrize("rule", [None, "bfs", "step"])
def test_trace_reproduces_metrics(rule):
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=32, block_size=16), KernelConfig(steps=12))
    eng = ReferenceEngine()
    sampler = (
        Sampler(eng, cfg, PrestoConfig("sequential"))
        if rule is None
        else Sampler(eng, cfg, PrestoConfig(rule, budget=6))
    )
    buf = io.StringIO()
    results = [
        sampler.run(
            [1, 2, 3],
            seed=s,
            context=RunContext(trace=TraceWriter(buf)),
        )
        for s in (0, 1)
    ]
    records = read_trace(io.StringIO(buf.getvalue()))
    assert metrics_from_trace(records) == [r.metrics for r in results]
    m = results[0].metrics
    assert m.transitions == 24 and m.extend_calls == 2
    calls = [r for r in records if r["type"] == "call" and r["kind"] == "mh"]
    assert all(len(c["requests"]) <= 6 for c in calls)
    assert m.requests_issued == sum(len(c["requests"]) for c in calls[: m.model_calls])
    assert m.requests_realized + m.requests_wasted == m.requests_issued
    assert m.requests_realized == m.transitions  # every transition used its own request
    if rule is None:
        assert m.model_calls == 24 and m.transitions_per_call == 1.0
    else:
        assert m.model_calls < 24 and m.transitions_per_call == pytest.approx(24 / m.model_calls)
