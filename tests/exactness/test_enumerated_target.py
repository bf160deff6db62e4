"""Layer 3: the samplers' final states follow the exact K-step law of their MH kernel.

On a reference LM with vocab 3 and responses of 3-4 tokens every law is enumerable:
``exact.chain_law`` pushes the block extensions through P^K, P the kernel's exact
transition matrix (:attr:`cases.KernelCase.matrix`). Many independent chains
(independent run seeds) are compared with that law by a chi-square test at significance
0.001 (cells with expected count < 5 pooled), for every kernel x rule on an unseeded engine
and every kernel x sequential keying on a seeded one (a seeded PreSTO chain is the sequential
chain: test_coupling.py). Seeds are fixed, so each test is deterministic, except that the
unseeded predictive and cost-aware step chains run 8 at a time through the shared
scheduler, whose merged calls draw from the engine's generator in the order the threads
arrive (those test at 1e-4). A deliberately wrong acceptance fails it (last tests).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support import exact
from tests.support.cases import KERNELS
from tests.support.enumerated import (
    CHAINS,
    PROMPT,
    SCHEDULES,
    SIGNIFICANCE,
    chi_square_pvalue,
    config,
    exact_law,
    lm,
    sample_counts,
)

pytestmark = pytest.mark.exactness

TRIES = {3: 4, 4: 3}  # response length -> m for the single-block kernel checks
UNSEEDED = ["sequential-path", "sequential-step", "bfs", "predictive", "step", "step-cost"]
SCHEDULED = {"predictive", "step-cost"}
"""Unseeded rules whose chains run 8 at a time through the shared scheduler (merged calls,
requests per chain chosen from the predicted values): the law holds with it too."""


@pytest.mark.parametrize("alpha", [2.0, 4.0])
@pytest.mark.parametrize("length", [3, 4])
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_enumerated_kernel_leaves_target_invariant(kernel_case, alpha, length):
    model = lm()
    cfg = kernel_case.config(alpha=alpha, max_new_tokens=length, block_size=length, tries=TRIES[length])
    P = kernel_case.matrix(model, PROMPT, length, kernel_case.make(cfg))
    pi = exact.target(model, PROMPT, length, alpha)
    assert np.allclose(P.sum(axis=1), 1.0, atol=1e-12) and P.min() >= 0
    assert np.abs(pi @ P - pi).max() < 1e-12
    flow = pi[:, None] * P  # detailed balance: pi_x P_xy = pi_y P_yx
    assert np.abs(flow - flow.T).max() < 1e-12


SENTINELS = {f"{kernel}-sequential-step-one-block-a2.0-seeded" for kernel in KERNELS} | {
    "powermh-sequential-path-two-blocks-a4.0-unseeded"
}
"""Law cases tier 1 runs too (the rest are marked ``law``, tier 2): per kernel the cheapest seeded
chain, which fails under a wrong acceptance, cut or kernel parameter in seconds, and PowerMH's
unseeded one, which also fails under a content-dependent redraw (``python -m benchmarks.mutations``)."""


def law_cases():
    """Seeded: the sequential samplers (both keyings) at both alphas and on both schedules. On a
    seeded engine a PreSTO chain *is* the sequential chain of the same keys: test_coupling.py
    proves it bit for bit for every kernel x rule (tier 1's covering design, tier 2's full
    products), so its law is the sequential law tested here (seeded PreSTO law cases were
    dropped in issue 38 as redundant). Unseeded, where PreSTO's draws differ from sequential's:
    every rule."""

    def param(kernel, name, schedule, alpha, seeded, tag=""):
        case = f"{name}-{schedule}-a{alpha}-{'seeded' if seeded else 'unseeded'}"
        marks = () if f"{kernel}-{case}" in SENTINELS else (pytest.mark.law,)
        return pytest.param(kernel, name, schedule, alpha, seeded, id=f"{kernel}-{case}{tag}", marks=marks)

    for kernel in KERNELS:
        for name in ("sequential-path", "sequential-step"):
            for schedule in sorted(SCHEDULES):
                for alpha in (2.0, 4.0):
                    yield param(kernel, name, schedule, alpha, True)
        for name in UNSEEDED:  # without per-request seeds (SGLang on CPU) every request is a fresh draw
            yield param(kernel, name, "two-blocks", 4.0, False, "-scheduled" if name in SCHEDULED else "")


@pytest.mark.parametrize("kernel_case,sampler_name,schedule,alpha,seeded", law_cases())
def test_final_states_follow_exact_law(reference_engine, kernel_case, sampler_name, schedule, alpha, seeded):
    model = lm()
    cfg, presto = config(schedule, alpha, sampler_name, kernel_case)
    scheduled = not seeded and sampler_name in SCHEDULED
    counts = sample_counts(
        kernel_case, sampler_name, reference_engine(model, seeded=seeded), cfg, presto, scheduled=scheduled
    )
    law = exact_law(kernel_case, cfg)
    p, tv = chi_square_pvalue(counts, law, exact.sequences(model.vocab_size, cfg.target.max_new_tokens), CHAINS)
    level = SIGNIFICANCE / 10 if scheduled else SIGNIFICANCE  # thread order: not a fixed draw
    assert p > level, f"chi-square p={p:.2e} (TV={tv:.3f}) rejects the exact K-step law"


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_wrong_acceptance_breaks_invariance(monkeypatch, kernel_case):
    kernel_case.sabotage(monkeypatch)
    model = lm()
    cfg = kernel_case.config(alpha=4.0, max_new_tokens=3, block_size=3, tries=TRIES[3])
    P = kernel_case.sabotaged_matrix(model, PROMPT, 3, kernel_case.make(cfg))
    pi = exact.target(model, PROMPT, 3, 4.0)
    assert np.abs(pi @ P - pi).max() > 1e-3


@pytest.mark.law
@pytest.mark.parametrize("sampler_name", ["sequential-step", "step", "bfs"])
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_wrong_acceptance_fails_the_chi_square(monkeypatch, reference_engine, kernel_case, sampler_name):
    """The test has power: the sampler with a sabotaged acceptance is rejected against the true law."""
    model = lm()
    cfg, presto = config("one-block", 4.0, sampler_name, kernel_case)
    law = exact_law(kernel_case, cfg)  # computed with the correct kernel
    kernel_case.sabotage(monkeypatch)
    counts = sample_counts(kernel_case, sampler_name, reference_engine(model), cfg, presto)
    p, tv = chi_square_pvalue(counts, law, exact.sequences(model.vocab_size, cfg.target.max_new_tokens), CHAINS)
    assert p < SIGNIFICANCE and not math.isnan(tv), f"wrong acceptance not detected: p={p:.2e}, TV={tv:.3f}"


@pytest.mark.parametrize("tries", [2, 3])
def test_multitry_exact_matrix_matches_brute_force(tries):
    """The closed form of ``exact.multitry_matrix`` against the algorithm enumerated slot by
    slot: every candidate tuple, every selection J, every reference tuple (vocab 3, T = 2)."""
    import itertools

    from presto_sgl.kernels import MultiTryKernel

    model, T, alpha, temps = lm(), 2, 3.0, (0.5, 1.0)
    kernel = MultiTryKernel(alpha, temps, tries)
    seqs = exact.sequences(model.vocab_size, T)
    index = {s: i for i, s in enumerate(seqs)}
    brute = np.zeros((len(seqs), len(seqs)))
    for c in range(T):
        for prefix in exact.sequences(model.vocab_size, c):
            sufs, Q, W = exact._mixture_weights(model, PROMPT + prefix, T - c, alpha, temps, False)
            for ix in range(len(sufs)):
                x = index[prefix + sufs[ix]]
                refs = [
                    (np.prod(Q[list(r)]), W[list(r)].sum())
                    for r in itertools.product(range(len(sufs)), repeat=tries - 1)
                ]
                for ys in itertools.product(range(len(sufs)), repeat=tries):
                    pc, Wy = np.prod(Q[list(ys)]), W[list(ys)].sum()
                    for J in range(tries):
                        accept = sum(pr * min(1.0, Wy / (Ws + W[ix])) for pr, Ws in refs)
                        brute[x, index[prefix + sufs[ys[J]]]] += pc * W[ys[J]] / Wy * accept / T
    brute[np.diag_indices_from(brute)] += 1.0 - brute.sum(axis=1)
    assert np.abs(brute - exact.multitry_matrix(model, PROMPT, T, kernel)).max() < 1e-12
