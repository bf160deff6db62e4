"""Layer 3: the samplers' final states follow the exact K-step law of PowerMH.

On a reference LM with vocab 3 and responses of 3-4 tokens every law is enumerable:
``exact.chain_law`` pushes the block extensions through P^K. Many independent chains
(independent run seeds) are compared with that law by a chi-square test at
significance 0.001 (cells with expected count < 5 pooled). Seeds are fixed, so each
test is deterministic; a deliberately wrong acceptance fails it (last tests).
"""

from __future__ import annotations

import math
from collections import Counter

from tests.support import exact
import numpy as np
import pytest
from scipy import stats
from tests.support.timing import presto_sampler

from presto_sgl import PowerConfig, PowerMH, PrestoConfig, kernel
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM

pytestmark = pytest.mark.exactness

SIGNIFICANCE = 1e-3
CHAINS = 3000
PROMPT = (0, 1)
SCHEDULES = {"one-block": (3, 3, 3), "two-blocks": (4, 2, 2)}  # (n, B, K)
SAMPLERS = {
    "sequential-path": ("path", None),
    "sequential-step": ("step", None),
    "bfs": ("path", PrestoConfig("bfs", budget=3)),
    "step": ("step", PrestoConfig("step", budget=3)),
    "bfs-20": ("path", PrestoConfig("bfs", budget=20)),
    "step-1": ("step", PrestoConfig("step", budget=1)),
    "predictive": ("path", PrestoConfig("predictive", budget=3)),  # online cut-dependent test predictor
    "step-cost": ("step", PrestoConfig("step", budget=3, cost_aware=True)),  # and a synthetic clock
}


def lm() -> ReferenceLM:
    return ReferenceLM(3, sharpness=1.0, seed=1)


def final_law_pvalue(sampler_name: str, schedule: str, alpha: float, *, seeded: bool = True, chains: int = CHAINS):
    n, B, K = SCHEDULES[schedule]
    keying, presto = SAMPLERS[sampler_name]
    model = lm()
    engine = ReferenceEngine(model, seeded=seeded, rng_seed=12345)
    cfg = PowerConfig(alpha=alpha, max_new_tokens=n, block_size=B, steps=K, keying=keying)
    sampler = PowerMH(engine, cfg) if presto is None else presto_sampler(engine, cfg, presto)
    counts = Counter(sampler.run(PROMPT, seed=1000 + i).state.tokens for i in range(chains))
    law = exact.chain_law(model, PROMPT, n, B, K, alpha, 1.0 / alpha)
    return chi_square_pvalue(counts, law, exact.sequences(model.vocab_size, n), chains)


def chi_square_pvalue(counts: Counter, law: np.ndarray, seqs: list, chains: int) -> tuple[float, float]:
    """(p-value, total variation) of observed ``counts`` against ``law``; small cells pooled."""
    expected = law * chains
    observed = np.array([counts.get(s, 0) for s in seqs], dtype=float)
    assert observed.sum() == chains
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp_ = np.append(expected[big], expected[~big].sum())
    if exp_[-1] < 5:  # fold a still-small pooled cell into the smallest big one
        j = int(np.argmin(exp_[:-1]))
        obs[j] += obs[-1]
        exp_[j] += exp_[-1]
        obs, exp_ = obs[:-1], exp_[:-1]
    chi2 = float(((obs - exp_) ** 2 / exp_).sum())
    tv = 0.5 * float(np.abs(observed / chains - law).sum())
    return float(stats.chi2.sf(chi2, len(obs) - 1)), tv


@pytest.mark.parametrize("alpha", [2.0, 4.0])
@pytest.mark.parametrize("length", [3, 4])
def test_enumerated_kernel_leaves_target_invariant(alpha, length):
    model = lm()
    P = exact.mh_kernel(model, PROMPT, length, alpha, 1.0 / alpha)
    pi = exact.target(model, PROMPT, length, alpha)
    assert np.allclose(P.sum(axis=1), 1.0, atol=1e-12) and P.min() >= 0
    assert np.abs(pi @ P - pi).max() < 1e-12
    flow = pi[:, None] * P  # detailed balance: pi_x P_xy = pi_y P_yx
    assert np.abs(flow - flow.T).max() < 1e-12


@pytest.mark.parametrize("alpha", [2.0, 4.0])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("sampler_name", sorted(SAMPLERS))
def test_final_states_follow_exact_law(sampler_name, schedule, alpha):
    p, tv = final_law_pvalue(sampler_name, schedule, alpha)
    assert p > SIGNIFICANCE, f"chi-square p={p:.2e} (TV={tv:.3f}) rejects the exact K-step law"


@pytest.mark.parametrize("sampler_name", ["bfs", "predictive", "step", "step-cost"])
def test_unseeded_engine_is_exact_in_law(sampler_name):
    """Without per-request seeds (SGLang on CPU) every request is a fresh draw: still exact."""
    p, tv = final_law_pvalue(sampler_name, "two-blocks", 4.0, seeded=False)
    assert p > SIGNIFICANCE, f"chi-square p={p:.2e} (TV={tv:.3f})"


def _flipped_q_term(lq_x, lq_y, lp_x, lp_y, alpha, _orig=kernel.log_acceptance):
    return _orig(lq_y, lq_x, lp_x, lp_y, alpha)  # sign of the proposal term flipped


def test_wrong_acceptance_breaks_invariance(monkeypatch):
    monkeypatch.setattr(kernel, "log_acceptance", _flipped_q_term)
    model = lm()
    P = exact.mh_kernel(model, PROMPT, 3, 4.0, 0.25)
    pi = exact.target(model, PROMPT, 3, 4.0)
    assert np.abs(pi @ P - pi).max() > 1e-3


@pytest.mark.parametrize("sampler_name", ["sequential-step", "step", "bfs"])
def test_wrong_acceptance_fails_the_chi_square(monkeypatch, sampler_name):
    """The test has power: the sampler with a flipped q-term is rejected against the true law."""
    n, B, K = SCHEDULES["one-block"]
    model = lm()
    law = exact.chain_law(model, PROMPT, n, B, K, 4.0, 0.25)  # computed with the correct kernel
    monkeypatch.setattr(kernel, "log_acceptance", _flipped_q_term)
    keying, presto = SAMPLERS[sampler_name]
    cfg = PowerConfig(alpha=4.0, max_new_tokens=n, block_size=B, steps=K, keying=keying)
    engine = ReferenceEngine(model)
    sampler = PowerMH(engine, cfg) if presto is None else presto_sampler(engine, cfg, presto)
    counts = Counter(sampler.run(PROMPT, seed=1000 + i).state.tokens for i in range(CHAINS))
    p, tv = chi_square_pvalue(counts, law, exact.sequences(3, n), CHAINS)
    assert p < SIGNIFICANCE and not math.isnan(tv), f"wrong acceptance not detected: p={p:.2e}, TV={tv:.3f}"
