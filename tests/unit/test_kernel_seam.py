"""The kernel seam: the executor runs any kernel through cut / prefetch_cut / suffix_draws /
decide, for every rule, with several draws per decision and with entropy requested."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from presto_sgl import CapabilityError, PowerMHKernel, Sampler, sampling_configs
from presto_sgl.chain.keys import hash64
from presto_sgl.engines.base import EngineCapabilities
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.kernels import SuffixDraw

pytestmark = pytest.mark.exactness  # pins an invariant the exactness proof rests on

RULES = ("sequential", "bfs", "predictive", "step")


@dataclass(frozen=True)
class TwoDrawKernel(PowerMHKernel):
    """PowerMH that also fetches a second, unused suffix per decision (as MultiTryMH's
    extra draws would be) and asks for entropy: the chain must equal PowerMH's."""

    name: ClassVar[str] = "two-draw"
    needs_entropy: ClassVar[bool] = True

    def suffix_draws(self, cut, length, draws):
        first = super().suffix_draws(cut, length, draws)[0]
        return (SuffixDraw(first.temperature, first.seed, True), SuffixDraw(1.0, hash64("extra", draws.seed), True))

    def decide(self, state, proposals, draws):
        assert len(proposals) == 2 and all(p.cut == proposals[0].cut for p in proposals)
        return super().decide(state, proposals[:1], draws)


def _engine() -> ReferenceEngine:
    return ReferenceEngine(ReferenceLM(8, sharpness=2.0, seed=3), seeded=True)


def _entropies(lm: ReferenceLM, prompt: tuple[int, ...], tokens: tuple[int, ...]) -> list[float]:
    out = []
    for t in range(len(tokens)):
        lp, _, _ = lm.distribution(list(prompt + tokens[:t]), 1.0)
        out.append(float(-np.sum(np.exp(lp) * lp)))
    return out


@pytest.mark.parametrize("rule", RULES)
def test_multi_draw_kernel_runs_through_every_rule(rule):
    config, presto = sampling_configs(rule, budget=5, alpha=4.0, max_new_tokens=12, block_size=6, steps=8)
    engine = _engine()
    prompt = [1, 2, 3]
    plain = Sampler(engine, config, presto).run(prompt, seed=5)
    two = Sampler(engine, config, presto, kernel=TwoDrawKernel(config.target.alpha, config.temperature)).run(
        prompt, seed=5
    )
    assert two.state.tokens == plain.state.tokens and two.state.logp == plain.state.logp
    assert two.metrics.transitions == plain.metrics.transitions
    assert two.metrics.model_calls == plain.metrics.model_calls
    assert two.metrics.requests_issued == 2 * plain.metrics.requests_issued  # both draws of every decision sent
    assert two.metrics.requests_realized == 2 * plain.metrics.requests_realized
    # the entropy path: every state carries p0 entropies from the pass that made its tokens
    assert plain.state.entropy is None
    assert two.state.entropy is not None and len(two.state.entropy) == two.state.length
    want = _entropies(engine.lm, tuple(prompt), two.state.tokens)
    assert max(abs(a - b) for a, b in zip(two.state.entropy, want)) < 1e-9


def test_entropy_kernel_on_an_engine_without_entropy_fails_before_any_call():
    class NoEntropy:
        def __init__(self):
            self.capabilities = EngineCapabilities(seeded=False, entropy=False, vocab_size=8)
            self.calls = 0

        def generate(self, requests):
            self.calls += 1
            raise AssertionError("no model call may happen")

    engine = NoEntropy()
    config, presto = sampling_configs("step", alpha=4.0, max_new_tokens=4, block_size=4, steps=2)
    with pytest.raises(CapabilityError, match="entropy"):
        Sampler(engine, config, presto, kernel=TwoDrawKernel(config.target.alpha, config.temperature))
    assert engine.calls == 0


def test_prefetch_cut_is_condition_1():
    """PowerMH's cut is keyed by T alone; it is requestable iff it lies within the shared prefix."""
    from presto_sgl import ChainState
    from presto_sgl.chain.keys import ChainKeys

    kernel = PowerMHKernel(4.0, 0.25)
    root = ChainState((1,), tuple(range(10)), (0.0,) * 10, (0.0,) * 10)
    for decision in range(50):
        d = ChainKeys(0).decision(1, decision)
        c = d.cut(10)
        assert kernel.cut(root, d) == c
        for shared in range(11):
            assert kernel.prefetch_cut(root, shared, d) == (c if c <= shared else None)


def test_keying_must_fit_the_rule():
    with pytest.raises(ValueError, match="keying"):
        sampling_configs("bfs", keying="step")
    assert sampling_configs("bfs")[1].keying == "path"
    assert sampling_configs("sequential")[1].keying == "step"
    assert sampling_configs("sequential", keying="path")[1].keying == "path"
    assert math.isclose(sampling_configs("step", alpha=2.0)[0].temperature, 0.5)


@pytest.mark.parametrize("beta", [-1.0, math.inf, math.nan, "4", True])
def test_entropycut_beta_is_validated(beta):
    from presto_sgl.kernels import EntropyCutKernel

    with pytest.raises(ValueError, match="beta"):
        sampling_configs(method="entropycut", beta=beta)[0]
    with pytest.raises(ValueError, match="beta"):
        EntropyCutKernel(4.0, 0.25, beta)


def test_entropycut_race_is_uniform_when_no_entropy_rises():
    """Every jump zero (non-increasing entropies): w_j = FLOOR for all j, so the exponential
    race gives uniform cuts; position 0 (Delta_0 = 0) is one of them."""
    from scipy import stats

    from presto_sgl.chain.keys import ChainKeys
    from presto_sgl.kernels.entropycut import race

    T = 6
    entropy = (2.0, 1.5, 1.5, 1.0, 0.5, 0.1)
    cuts = [race(entropy, 4.0, T, ChainKeys(1).decision(1, k)) for k in range(6000)]
    counts = np.bincount(cuts, minlength=T)
    assert stats.chisquare(counts).pvalue > 1e-3
    # a rise dominates: position 3 gets almost all the mass
    rising = (0.1, 0.1, 0.1, 1.1, 1.0, 0.9)
    cuts = [race(rising, 4.0, T, ChainKeys(1).decision(1, k)) for k in range(2000)]
    assert np.mean(np.array(cuts) == 3) > 0.99


def test_entropycut_prefetch_cut_races_over_the_shared_positions_only():
    from presto_sgl import ChainState
    from presto_sgl.chain.keys import ChainKeys
    from presto_sgl.kernels import EntropyCutKernel
    from presto_sgl.kernels.entropycut import race

    kernel = EntropyCutKernel(4.0, 0.25)
    h = (0.5, 0.9, 0.2, 1.4, 0.3, 2.0, 0.1, 0.8)
    root = ChainState((1,), tuple(range(8)), (0.0,) * 8, (0.0,) * 8, entropy=h)
    for k in range(200):
        d = ChainKeys(0).decision(1, k)
        assert kernel.cut(root, d) == kernel.prefetch_cut(root, 8, d) == race(h, 4.0, 8, d)
        assert kernel.prefetch_cut(root, 0, d) is None
        for shared in range(1, 8):
            c = kernel.prefetch_cut(root, shared, d)
            assert c == race(h[:shared], 4.0, shared, d) and c < shared
