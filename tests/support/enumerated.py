"""The enumerable setting of the exact-law tests (tests/exactness/test_enumerated_target.py,
test_deep_law.py, test_resume.py): the reference LM and prompt, the block schedules and
samplers, the cached exact law of a schedule under a kernel, and the chi-square test of
sampled final states against it."""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
from scipy import stats

from presto_sgl import PowerConfig
from presto_sgl.engines.reference import ReferenceLM
from presto_sgl.scheduling.runner import run_prompts
from presto_sgl.scheduling.scheduler import Scheduler
from tests.support import exact
from tests.support.cases import KERNELS, RULES, KernelCase

SIGNIFICANCE = 1e-3
CHAINS = 3000
PROMPT = (0, 1)
SCHEDULES = {"one-block": (3, 3, 3, 4), "two-blocks": (4, 2, 2, 3)}
"""(n, B, K, m): m is MultiTryMH's tries (the paper's 4 where the exact law stays cheap)."""
SAMPLERS = {  # name: (rule, budget)
    "sequential-path": (RULES["sequential-path"], 1),
    "sequential-step": (RULES["sequential-step"], 1),
    "bfs": (RULES["bfs"], 3),
    "step": (RULES["step"], 3),
    "bfs-20": (RULES["bfs"], 20),
    "step-1": (RULES["step"], 1),
    "predictive": (RULES["predictive"], 3),  # online cut-dependent test predictor
    "step-cost": (RULES["step-cost"], 3),  # and a synthetic clock
}


def lm() -> ReferenceLM:
    return ReferenceLM(3, sharpness=1.0, seed=1)


def config(schedule: str, alpha: float, sampler_name: str, kernel_case: KernelCase = KERNELS[0]):
    n, B, K, m = SCHEDULES[schedule]
    rule, budget = SAMPLERS[sampler_name]
    return rule.configs(budget, **kernel_case.options(alpha=alpha, max_new_tokens=n, block_size=B, steps=K, tries=m))


@functools.cache
def exact_law(kernel_case: KernelCase, cfg: PowerConfig) -> np.ndarray:
    """The exact law of the final state of the block schedule of ``cfg`` under the kernel
    (on :func:`lm`; cached: the law does not depend on the rule)."""
    model = lm()
    kernel = kernel_case.make(cfg)
    return exact.chain_law(
        model,
        PROMPT,
        cfg.target.max_new_tokens,
        cfg.target.block,
        cfg.kernel.steps,
        cfg.temperature,
        lambda T: kernel_case.matrix(model, PROMPT, T, kernel),
    )


def sample_counts(
    kernel_case: KernelCase, sampler_name: str, engine, cfg, presto, chains: int = CHAINS, scheduled: bool = False
) -> Counter:
    """Final states of ``chains`` independent chains from PROMPT (run seeds 1000 + i); ``scheduled``:
    8 at a time through the shared scheduler's merged calls."""
    rule, _ = SAMPLERS[sampler_name]
    sampler = rule.sampler(engine, cfg, presto, kernel_case.make(cfg))
    if scheduled:
        results = run_prompts(
            sampler.run,
            [PROMPT] * chains,
            seed=1000,
            workers=8,
            scheduler=Scheduler.for_method(sampler, dispatch="merged"),
        )
        return Counter(r.state.tokens for r in results)
    return Counter(sampler.run(PROMPT, seed=1000 + i).state.tokens for i in range(chains))


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
