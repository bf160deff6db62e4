"""The EOS-terminated target (``ending="eos"``; docs/design.md §2.1) is exact for every
kernel and rule.

States end at their first stop token or at the stage horizon, so they have different
lengths; each kernel's matrix is written from the definition in ``tests/support/exact.py``
(cut law over the current length, the reverse-over-forward cut term) on an enumerable
reference LM (vocab 3, token 2 the stop token, alpha 2: about half the mass of the K-step
law ends before the horizon). Checked here:

* each matrix leaves pi_alpha invariant and is reversible; without the length term it is not;
* many independent chains of the block schedule (two blocks of 2, K = 2: a state that ended
  in the first block is not extended) follow the exact law by a chi-square at 0.001, every
  kernel x rule on an unseeded engine and every kernel sequentially on a seeded one, and a
  kernel without the length term is rejected by the same test;
* the coupling chains (test_coupling.py runs them under ``ending="eos"``) end early and at the
  horizon, move between lengths and defer race cuts; an interrupted chain resumes exactly.
"""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest

from presto_sgl import PowerConfig, TraceWriter, read_trace
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.context import RunContext
from tests.conftest import UNSEEDED_RNG
from tests.support import exact
from tests.support.cases import KERNELS, RULES, KernelCase
from tests.support.coupling import COUPLING_SCHEDULES, COUPLING_STOP
from tests.support.enumerated import SAMPLERS, SIGNIFICANCE, chi_square_pvalue, sample_counts

pytestmark = pytest.mark.exactness

STOP = 2
PROMPT = (0, 1)
ALPHA = 2.0
SCHEDULE = {"max_new_tokens": 4, "block_size": 2, "steps": 2, "tries": 3}
CHAINS = 2000
UNSEEDED = ["sequential-path", "sequential-step", "bfs", "predictive", "step", "step-cost"]
SEEDED = ["sequential-step"]
"""Seeded: sequential with either keying gives the same law (the unseeded cases run both), and a
seeded PreSTO chain is the sequential chain of its keys (test_coupling.py, target eos), so its
law is this one (seeded PreSTO cases dropped in issue 38 as redundant)."""
SCHEDULED = {"predictive", "step-cost"}  # unseeded: 8 chains at a time through the shared scheduler


def lm() -> ReferenceLM:
    return ReferenceLM(3, sharpness=1.0, seed=1)


def engine(model: ReferenceLM, seeded: bool = True) -> ReferenceEngine:
    return ReferenceEngine(model, seeded=seeded, rng_seed=None if seeded else UNSEEDED_RNG, stop_ids=(STOP,))


def config(kernel_case: KernelCase, sampler_name: str):
    rule, budget = SAMPLERS[sampler_name]
    return rule.configs(budget, **kernel_case.options(alpha=ALPHA, ending="eos", **SCHEDULE))


@functools.cache
def exact_law(kernel_case: KernelCase, cfg: PowerConfig, sabotaged: bool = False) -> np.ndarray:
    model, kernel, stop = lm(), kernel_case.make(cfg), frozenset({STOP})
    return exact.ending_chain_law(
        model,
        PROMPT,
        cfg.target.max_new_tokens,
        cfg.target.block,
        cfg.kernel.steps,
        cfg.temperature,
        stop,
        lambda H: kernel_case.ending(model, PROMPT, H, stop, kernel, sabotaged),
    )


def states() -> list[tuple[int, ...]]:
    return exact.continuations(3, SCHEDULE["max_new_tokens"], frozenset({STOP}))


@pytest.mark.parametrize("horizon", [3, 4])
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_ending_kernel_leaves_target_invariant(kernel_case, horizon):
    model, stop = lm(), frozenset({STOP})
    cfg, _ = config(kernel_case, "sequential-step")
    pi = exact.ending_target(model, PROMPT, horizon, stop, ALPHA)
    lengths = np.array([len(s) for s in exact.continuations(3, horizon, stop)])
    assert 0.01 < pi[lengths == horizon].sum() < 0.99  # guard: both ended and full-length states carry mass
    P = kernel_case.ending(model, PROMPT, horizon, stop, kernel_case.make(cfg))
    assert np.allclose(P.sum(axis=1), 1.0, atol=1e-12) and P.min() >= 0
    assert np.abs(pi @ P - pi).max() < 1e-12
    flow = pi[:, None] * P
    assert np.abs(flow - flow.T).max() < 1e-12
    bad = kernel_case.ending(model, PROMPT, horizon, stop, kernel_case.make(cfg), True)
    assert np.abs(pi @ bad - pi).max() > 1e-3  # the length term matters


SENTINEL = "sequential-step-seeded"
"""The law case tier 1 runs too, per kernel (the rest are marked ``law``, tier 2): it fails in
seconds when a kernel loses its length term (``python -m benchmarks.mutations``)."""


def law_cases():
    for kernel in KERNELS:
        for name in SEEDED:
            marks = () if f"{name}-seeded" == SENTINEL else (pytest.mark.law,)
            yield pytest.param(kernel, name, True, id=f"{kernel}-{name}-seeded", marks=marks)
        for name in UNSEEDED:
            tag = "-scheduled" if name in SCHEDULED else ""
            yield pytest.param(kernel, name, False, id=f"{kernel}-{name}-unseeded{tag}", marks=(pytest.mark.law,))


@pytest.mark.parametrize("kernel_case,sampler_name,seeded", law_cases())
def test_ending_chains_follow_exact_law(kernel_case, sampler_name, seeded):
    cfg, presto = config(kernel_case, sampler_name)
    scheduled = not seeded and sampler_name in SCHEDULED
    counts = sample_counts(kernel_case, sampler_name, engine(lm(), seeded), cfg, presto, CHAINS, scheduled)
    law = exact_law(kernel_case, cfg)
    p, tv = chi_square_pvalue(counts, law, states(), CHAINS)
    level = SIGNIFICANCE / 10 if scheduled else SIGNIFICANCE  # thread order: not a fixed draw
    assert p > level, f"chi-square p={p:.2e} (TV={tv:.3f}) rejects the exact K-step law of the EOS target"


@pytest.mark.law
@pytest.mark.parametrize("sampler_name", ["sequential-step", "step"])
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_dropping_the_length_term_fails_the_chi_square(monkeypatch, kernel_case, sampler_name):
    cfg, presto = config(kernel_case, sampler_name)
    law = exact_law(kernel_case, cfg)
    kernel_case.ending_sabotage(monkeypatch)
    counts = sample_counts(kernel_case, sampler_name, engine(lm()), cfg, presto, CHAINS)
    p, tv = chi_square_pvalue(counts, law, states(), CHAINS)
    assert p < SIGNIFICANCE, f"the missing length term was not detected: p={p:.2e}, TV={tv:.3f}"
    p_bad, _ = chi_square_pvalue(counts, exact_law(kernel_case, cfg, sabotaged=True), states(), CHAINS)
    assert p_bad > SIGNIFICANCE  # and the sabotaged chain follows the sabotaged law: the test sees this term


# -- coupling -----------------------------------------------------------------------------------

COUPLING_LM = (12, 2.0, 3)  # vocab, sharpness, seed of the reference LM


def coupling_engine():
    vocab, sharpness, seed = COUPLING_LM
    return ReferenceEngine(ReferenceLM(vocab, sharpness=sharpness, seed=seed), stop_ids=(COUPLING_STOP,))


@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_ending_coupling_runs_exercise_variable_lengths(kernel_case):
    """Guard: the coupling chains end early and at the horizon, move between lengths, accept
    and reject, prefetch several decisions per call, and defer race cuts a state's tail won."""
    n, B, K = COUPLING_SCHEDULES[20]
    eng = coupling_engine()
    cfg, presto = RULES["bfs"].configs(
        20, **kernel_case.options(alpha=4.0, max_new_tokens=n, block_size=B, steps=K, ending="eos")
    )
    sampler = RULES["bfs"].sampler(eng, cfg, presto, kernel_case.make(cfg))
    lengths, finals, outcomes, deferred, calls, transitions = set(), set(), set(), False, 0, 0
    for seed in range(3):
        buf = io.StringIO()
        result = sampler.run(
            [1, 2, 3],
            seed=seed,
            context=RunContext(trace=TraceWriter(buf)),
            on_transition=lambda s, k, st, tr: (lengths.add(st.length), outcomes.add(tr.accepted)),
        )
        finals.add((result.state.length, result.state.tokens[-1] == COUPLING_STOP))
        records = read_trace(io.StringIO(buf.getvalue()))
        requested = {
            (c["stage"], r["decision"], r["cut"]) for c in records if c["type"] == "call" for r in c["requests"]
        }
        realized = {(x["stage"], x["decision"]): x["cut"] for x in records if x["type"] == "node"}
        deferred |= any((s, d) in realized and realized[s, d] != c for s, d, c in requested if d is not None)
        calls += result.metrics.model_calls
        transitions += result.metrics.transitions
    assert len(lengths) >= 3 and outcomes == {True, False}
    assert any(ended and length < n for length, ended in finals)
    assert deferred and transitions > calls


@pytest.mark.parametrize("rule", ["sequential-step", "bfs", "step-cost"])
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_ending_run_interrupted_anywhere_resumes_to_the_same_chain(tmp_path, kernel_case, rule):
    """Exact resume under the EOS target: trace writes cut mid-line and engine calls that die,
    at random points; the resumed chain is the uninterrupted one, transition for transition."""
    import random

    from tests.exactness.test_resume import CutStream, DyingEngine, Interrupted, nodes, resume_from

    rc = RULES[rule]
    n, B, K = COUPLING_SCHEDULES[2]
    cfg, presto = rc.configs(4, **kernel_case.options(alpha=4.0, max_new_tokens=n, block_size=B, steps=K, ending="eos"))

    def make(eng=None):
        return rc.sampler(eng or coupling_engine(), cfg, presto, kernel_case.make(cfg))

    full_stream = io.StringIO()
    full = make().run(
        [1, 2, 3],
        seed=7,
        context=RunContext(trace=TraceWriter(full_stream)),
    )
    full_text = full_stream.getvalue()
    calls = full.metrics.model_calls + full.metrics.extend_calls
    rng = random.Random(f"{kernel_case}-{rule}")
    for i in range(6):
        if i % 2 == 0:
            stream, eng = CutStream(rng.randrange(full_text.count("\n")), rng.random()), None
        else:
            stream, eng = io.StringIO(), DyingEngine(coupling_engine(), rng.randint(1, calls))
        with pytest.raises(Interrupted):
            make(eng).run(
                [1, 2, 3],
                seed=7,
                context=RunContext(trace=TraceWriter(stream)),
            )
        result, text, _ = resume_from(tmp_path, stream.getvalue(), make)
        assert result.state == full.state and nodes(text) == nodes(full_text), f"point {i}"
