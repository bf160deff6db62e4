"""The non-MH baselines (paper Case Study 8) on the reference engine: what they draw and keep."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from presto_sgl import BaselineConfig, ConfigError, Target, make_method
from presto_sgl.baselines import BestOfN, BestOfNParams
from presto_sgl.baselines.smc import pick, systematic
from presto_sgl.chain.keys import ChainKeys
from presto_sgl.engines.base import Request
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from tests.support.exact import per_token, sequences, target

PROMPT = (0, 1)


def engine(vocab: int = 8, seed: int = 0) -> ReferenceEngine:
    return ReferenceEngine(ReferenceLM(vocab, seed=seed))


def baseline(eng: ReferenceEngine, method: str, **options):
    """The baseline ``method`` with flat ``options``, as every front end builds it."""
    return make_method(eng, {"method": method, **options})


def test_low_temperature_is_one_keyed_draw_at_one_over_alpha():
    eng = engine()
    result = baseline(eng, "lowtemp", max_new_tokens=6, alpha=4.0).run(PROMPT, seed=3, prompt_id="p")
    (want,) = eng.generate([Request(PROMPT, 6, 0.25, ChainKeys(3, "p").extension_seed(1))])
    assert result.state.tokens == want.tokens and result.state.logq == want.logq
    m = result.metrics
    assert (m.model_calls, m.extend_calls, m.tokens_decoded, m.transitions) == (0, 1, 6, 0) and m.extend_time_s > 0


@pytest.mark.parametrize("select", ["logq", "logp"])
def test_best_of_n_keeps_the_highest_score_over_the_answer(select):
    eng = engine()
    stop = 3
    config = BaselineConfig(
        "bestofn", Target(max_new_tokens=8, block_size=None), params=BestOfNParams(best_of=6, select=select)
    )
    bon = BestOfN(eng, config, stop_token_ids=[stop])
    keys = ChainKeys(1, 0)
    draws = eng.generate([Request(PROMPT, 8, 0.25, keys.decision(1, f"best-of:{i}").seed) for i in range(6)])

    def score(c):
        vals = c.logq if select == "logq" else c.logp
        end = c.tokens.index(stop) + 1 if stop in c.tokens else len(c.tokens)
        return sum(vals[:end])

    best = max(draws, key=score)
    result = bon.run(PROMPT, seed=1)
    assert result.state.tokens == best.tokens and result.metrics.extend_calls == 1
    assert result.metrics.tokens_decoded == 48 and len({d.tokens for d in draws}) > 1


def test_systematic_resampling_and_pick():
    assert systematic([0.25, 0.25, 0.25, 0.25], 0.5) == [0, 1, 2, 3]
    assert systematic([0.0, 1.0, 0.0], 0.3) == [1, 1, 1]
    draws = [systematic([0.5, 0.3, 0.2], u) for u in np.linspace(0.001, 1, 1000)]
    assert all(d == sorted(d) and Counter(d)[0] in (1, 2) and Counter(d)[1] in (0, 1, 2) for d in draws)
    assert np.mean([Counter(d)[2] for d in draws]) == pytest.approx(0.2 * 3, abs=0.01)  # E[copies] = P w
    assert [pick([0.2, 0.3, 0.5], u) for u in (0.1, 0.2, 0.21, 0.5, 0.51, 1.0)] == [0, 0, 1, 1, 2, 2]


def test_power_smc_approaches_the_power_law_where_low_temperature_does_not():
    """V = 4, T = 2 response tokens in blocks of 1, alpha = 4, no ramp: with 32 particles the
    output law is within 0.08 in total variation of pi_alpha (800 keyed runs: sampling noise
    ~0.03), while the low-temperature law is 0.55 away."""
    lm = ReferenceLM(4, seed=0)
    eng = ReferenceEngine(lm)
    prompt, T, alpha = (0,), 2, 4.0
    pi = target(lm, prompt, T, alpha)
    xs = sequences(4, T)
    low = np.array([np.exp(sum(per_token(lm, prompt, x, 1 / alpha)[0])) for x in xs])
    smc = baseline(eng, "powersmc", particles=32, block_size=1, ramp_tokens=0, max_new_tokens=T, alpha=alpha)
    counts = Counter(smc.run(prompt, seed=s).state.tokens for s in range(800))
    law = np.array([counts[x] for x in xs]) / 800
    assert 0.5 * np.abs(law - pi).sum() < 0.08
    assert 0.5 * np.abs(low - pi).sum() > 0.5


def test_power_smc_ramp_resampling_and_cost():
    eng = engine()
    smc = baseline(eng, "powersmc", particles=4, block_size=4, ramp_tokens=8, max_new_tokens=16, alpha=4.0)
    assert [smc.exponent(t) for t in (0, 4, 8, 16)] == [1.0, 2.5, 4.0, 4.0]
    result = smc.run(PROMPT, seed=0)
    m = result.metrics
    assert (m.extend_calls, m.tokens_decoded, result.state.length) == (4, 64, 16)
    assert m.cached_tokens >= 0 and smc.describe()["particles"] == 4


@pytest.mark.parametrize(
    "kw, param, message",
    [
        ({"particles": 0}, "particles", "`particles`"),
        ({"block_size": 5}, "max_new_tokens", "multiple of `block_size`"),
        ({"ramp_tokens": -1}, "ramp_tokens", "`ramp_tokens`"),
        ({"ramp_tokens": 17}, "ramp_tokens", "<= `max_new_tokens`"),
        ({"ess_fraction": 0}, "ess_fraction", "`ess_fraction`"),
        ({"alpha": 0}, "alpha", "`alpha`"),
        ({"beta": 2.0}, "beta", "parameter of entropycut, not of 'powersmc'"),
        ({"rule": "bfs"}, "rule", "baseline"),
    ],
)
def test_bad_baseline_settings_are_named(kw, param, message):
    with pytest.raises(ConfigError, match=message) as info:
        baseline(engine(), "powersmc", **{"max_new_tokens": 16, "block_size": 4, **kw})
    assert info.value.param == param
    with pytest.raises(ConfigError, match="`select`"):
        baseline(engine(), "bestofn", best_of=2, select="best", max_new_tokens=4)
