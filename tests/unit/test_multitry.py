"""MultiTryMH's pieces: validation, keyed draws, selection, the multiple-try acceptance,
and ``decide`` against the formula written out here (forced outcomes, no engine)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from presto_sgl import CapabilityError, EngineError, MultiTryKernel, PowerMHKernel, Request, Sampler, sampling_configs
from presto_sgl.chain.keys import ChainKeys, DecisionDraws
from presto_sgl.chain.state import ChainState
from presto_sgl.engines.base import EngineCapabilities
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.kernels import Proposal
from presto_sgl.kernels.multitry import log_multitry_acceptance, log_weight, select

pytestmark = pytest.mark.exactness  # pins an invariant the exactness proof rests on


@pytest.mark.parametrize("tries", [0, -1, 1.5, "4", True, None])
def test_tries_is_validated(tries):
    with pytest.raises(ValueError, match="`tries`"):
        sampling_configs(method="multitry", tries=tries)[0]
    with pytest.raises(ValueError, match="`tries`"):
        MultiTryKernel(4.0, (0.5,), tries)


@pytest.mark.parametrize("temps", [(), [], (0.0,), (-0.5, 1.0), (math.inf,), (math.nan,), "0.5", (0.5, 0.5), (True,)])
def test_temperature_set_is_validated(temps):
    with pytest.raises(ValueError, match="`try_temperatures`"):
        sampling_configs(method="multitry", try_temperatures=temps)[0]
    with pytest.raises(ValueError, match="`temperatures`"):
        MultiTryKernel(4.0, temps)


def test_config_defaults_are_the_papers():
    cfg = sampling_configs(method="multitry")[0]
    assert (cfg.kernel.params.tries, cfg.kernel.params.try_temperatures) == (4, (0.25, 0.5, 1.0))
    assert sampling_configs(method="multitry", try_temperatures=[1, 2])[0].kernel.params.try_temperatures == (1.0, 2.0)


def test_draws_are_keyed_candidates_then_references():
    kernel = MultiTryKernel(4.0, (0.25, 0.5, 1.0), tries=4)
    keys = ChainKeys(7, "p")
    temps, seeds = Counter(), set()
    for k in range(300):
        draws = kernel.suffix_draws(3, 10, keys.decision(1, k))
        assert len(draws) == 7 and all(d.score_temperatures == (0.25, 0.5, 1.0) for d in draws)
        assert draws == kernel.suffix_draws(3, 10, keys.decision(1, k))  # a pure function of the key
        temps.update(d.temperature for d in draws)
        seeds.update(d.seed for d in draws)
    assert set(temps) == {0.25, 0.5, 1.0} and min(temps.values()) > 600  # uniform over S: ~700 each
    assert len(seeds) == 7 * 300  # every request its own engine seed


def test_select_is_proportional_to_the_weights():
    lw = [math.log(1.0), math.log(3.0), float("-inf"), math.log(6.0)]
    us = (np.arange(10_000) + 0.5) / 10_000
    counts = Counter(select(lw, float(u)) for u in us)
    assert counts[2] == 0
    assert abs(counts[0] / 10_000 - 0.1) < 1e-3 and abs(counts[1] / 10_000 - 0.3) < 1e-3
    assert select([float("-inf")] * 3, 0.5) == 0


def test_log_acceptance_edge_cases():
    ninf = float("-inf")
    assert log_multitry_acceptance([0.0, 0.0], [0.0, math.log(4.0)]) == pytest.approx(math.log(2.0 / 5.0))
    assert log_multitry_acceptance([math.log(5.0)], [0.0]) == 0.0
    assert log_multitry_acceptance([ninf, ninf], [0.0]) == ninf  # every candidate impossible under p0
    assert log_multitry_acceptance([0.0], [ninf, ninf]) == 0.0  # leaves an impossible state
    for bad in (math.nan, math.inf):
        with pytest.raises(EngineError):
            log_multitry_acceptance([bad], [0.0])


def _proposal(cut, tokens, logp, logq_at):
    return Proposal(
        cut, tuple(tokens), tuple(r[0] for r in logq_at), tuple(logp), entropy=None, logq_at=tuple(map(tuple, logq_at))
    )


def test_decide_follows_the_formula():
    """Weights w = p0^alpha / Q with Q the mean over temperatures of whole-suffix q; the
    selected try and log A = log(sum w(y) / sum w(x*, x)) as written here."""
    rng = np.random.default_rng(0)
    alpha, temps, m, T, c = 3.0, (0.5, 1.0), 3, 5, 2
    n = T - c

    def scored():
        lp = np.log(rng.uniform(0.05, 0.9, size=n))
        lq = np.log(rng.uniform(0.05, 0.9, size=(n, len(temps))))
        return lp, lq

    x_lp, x_lq = scored()
    state = ChainState(
        (1,),
        (0, 1, 2, 3, 4),
        (0.0,) * c + tuple(x_lq[:, 0]),
        (-1.0,) * c + tuple(x_lp),
        logq_at=((-1.0, -1.0),) * c + tuple(map(tuple, x_lq)),
    )
    draws = [scored() for _ in range(2 * m - 1)]
    proposals = [_proposal(c, [5 + i] * n, lp, lq) for i, (lp, lq) in enumerate(draws)]

    def w(lp, lq):
        return math.exp(alpha * lp.sum()) / np.mean(np.exp(lq.sum(axis=0)))

    cand = np.array([w(*d) for d in draws[:m]])
    back = sum(w(*d) for d in draws[m:]) + w(x_lp, x_lq)
    want_log_a = min(0.0, math.log(cand.sum() / back))
    kernel = MultiTryKernel(alpha, temps, m)
    for u in (1e-9, 0.5, 1.0):
        key = DecisionDraws(cut_key=11, seed=0, uniform=u)
        new, tr = kernel.decide(state, proposals, key)
        assert tr.log_accept == pytest.approx(want_log_a, abs=1e-12)
        j = tr.selected
        assert new == (
            state.replace_suffix(
                c, proposals[j].tokens, proposals[j].logq, proposals[j].logp, None, proposals[j].logq_at
            )
            if tr.accepted
            else state
        )
        assert tr.accepted == (math.log(u) <= want_log_a)
    # the selection is the inverse CDF of w(y_j) / sum w at the decision's keyed selection uniform
    sel = [
        kernel.decide(state, proposals, DecisionDraws(cut_key=key, seed=0, uniform=1.0))[1].selected
        for key in range(3000)
    ]
    freq = np.bincount(sel, minlength=m) / len(sel)
    assert np.abs(freq - cand / cand.sum()).max() < 0.03


def test_log_weight_is_the_mixture_importance_weight():
    logp = [math.log(0.5), math.log(0.25)]
    logq_at = [[math.log(0.8), math.log(0.5)], [math.log(0.5), math.log(0.25)]]
    q_mix = (0.8 * 0.5 + 0.5 * 0.25) / 2
    assert log_weight(logp, logq_at, 2.0) == pytest.approx(2.0 * math.log(0.125) - math.log(q_mix))


def test_decide_rejects_malformed_draws():
    kernel = MultiTryKernel(4.0, (0.5, 1.0), tries=2)
    state = ChainState((1,), (0, 1), (-1.0, -1.0), (-1.0, -1.0), logq_at=((-1.0, -1.0),) * 2)
    good = _proposal(0, [1, 1], [-1.0, -1.0], [[-1.0, -1.0]] * 2)
    key = DecisionDraws(cut_key=0, seed=0, uniform=0.5)
    with pytest.raises(EngineError, match="3 draws"):
        kernel.decide(state, [good, good], key)
    with pytest.raises(EngineError, match="2 temperatures"):
        kernel.decide(state, [good, good, _proposal(0, [1, 1], [-1.0, -1.0], [[-1.0]] * 2)], key)
    with pytest.raises(EngineError, match="current state"):
        kernel.decide(ChainState((1,), (0, 1), (-1.0, -1.0), (-1.0, -1.0)), [good] * 3, key)


def test_one_try_at_one_temperature_is_powermh():
    """m = 1 and S = {tau}: the multiple-try acceptance is PowerMH's ratio, on real draws."""
    engine = ReferenceEngine(ReferenceLM(8, sharpness=2.0, seed=3))
    tau, prompt = 0.25, (1, 2, 3)
    mtm, pmh = MultiTryKernel(4.0, (tau,), tries=1), PowerMHKernel(4.0, tau)
    (x,) = engine.generate([Request(prompt, 6, tau, 1, score_temperatures=(tau,))])
    state = ChainState(prompt, x.tokens, x.logq, x.logp, logq_at=x.logq_at)
    outcomes = set()
    for i in range(60):
        c = i % 6
        (y,) = engine.generate([Request(prompt + x.tokens[:c], 6 - c, tau, 100 + i, score_temperatures=(tau,))])
        p = Proposal(c, y.tokens, y.logq, y.logp, entropy=None, logq_at=y.logq_at)
        key = DecisionDraws(cut_key=c, seed=0, uniform=0.9)
        (s1, t1), (s2, t2) = mtm.decide(state, [p], key), pmh.decide(state, [p], key)
        assert t1.log_accept == pytest.approx(t2.log_accept, abs=1e-9) and t1.accepted == t2.accepted
        assert s1.tokens == s2.tokens
        outcomes.add(t1.accepted)
    assert outcomes == {True, False}


def test_engine_without_score_temperatures_fails_before_any_call():
    class NoScores:
        def __init__(self):
            self.capabilities = EngineCapabilities(seeded=False, entropy=True, vocab_size=8, score_temperatures=(0.25,))
            self.calls = 0

        def generate(self, requests):
            raise AssertionError("no model call may happen")

    cfg, presto = sampling_configs("step", method="multitry")
    with pytest.raises(CapabilityError, match=r"temperatures \[0.25, 0.5, 1.0\]"):
        Sampler(NoScores(), cfg, presto)
    fine = sampling_configs("step", method="multitry", try_temperatures=(0.25,))[0]
    Sampler(NoScores(), fine, presto)  # a set the engine covers is accepted
