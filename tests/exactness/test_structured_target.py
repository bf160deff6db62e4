"""Structured power sampling (docs/design.md §2.2) is exact for every kernel and rule.

The target under a constraint C is pi_C(x) ∝ p0(x)^alpha over the responses C allows (a
complete string ended by the stop token, or a viable prefix cut at the horizon); proposals
come from q_tau masked by C and renormalized, resumed after the kept prefix. The laws here
are written from that definition with independent validators (``re``, ``json`` +
``jsonschema``: tests/support/structured.py), never with the grammar library the engines use
(xgrammar), over two languages on an enumerable reference LM:

* ``regex``: ``(ab|c)+`` over ``#abc`` (``#`` the stop token): forced tokens ("a" must be
  followed by "b"), and a stop allowed only after a complete string; two blocks of 2;
* ``json``: JSON arrays of integers (``{"type": "array", "items": {"type": "integer"}}``)
  over ``#[]1,``: one block of 4.

Checked: the engine's mask is the definition's at every reachable prefix; each kernel's
constrained matrix leaves pi_C invariant; chains of every kernel x rule, seeded and unseeded,
follow the exact K-step law (chi-square at 0.001) and return only responses in the language;
a chain whose ratio uses the unmasked log q fails the same test; every PreSTO rule visits the
sequential chain's states under the constraint.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from presto_sgl import PowerConfig, PrestoConfig
from presto_sgl.constraints import Constraint
from presto_sgl.engines.base import Request
from presto_sgl.engines.reference import ReferenceLM
from tests.conftest import UNSEEDED_RNG
from tests.support import exact
from tests.support.cases import KERNELS, RULES, KernelCase
from tests.support.coupling import assert_same_states, run_states
from tests.support.enumerated import SAMPLERS, SIGNIFICANCE, chi_square_pvalue
from tests.support.structured import Language, MaskedLM, json_language, reference_engine, regex_language

pytestmark = pytest.mark.exactness

PROMPT = (1, 2)
ALPHA = 2.0
CHAINS = 2000
SCHEMA = {"type": "array", "items": {"type": "integer"}}
LANGUAGES = {
    "regex": (regex_language("(ab|c)+", "#abc", 0), Constraint(regex="(ab|c)+"), (4, 2, 2)),
    "json": (json_language(SCHEMA, "#[]1,", 0), Constraint(json_schema=SCHEMA), (4, 4, 3)),
}
"""name: (the language by its validator, the constraint the library gets, schedule (T, B, K))."""
EBNF = ("regex", Constraint(ebnf='root ::= ("ab" | "c")+'))
"""The regex language as an EBNF grammar: xgrammar's third front end, checked against the same
validator (its mask, its invariance and one law case; the law does not depend on the front end)."""
UNSEEDED = ["sequential-path", "bfs", "predictive", "step", "step-cost"]
"""Unseeded sequential runs with path keys only: with step keys it is the same chain law (seeded
sequential-step runs here; test_ending_target.py runs both keyings unconstrained)."""


def lm(language: Language) -> ReferenceLM:
    return ReferenceLM(len(language.alphabet), sharpness=1.0, seed=1)


def config(
    kernel_case: KernelCase, sampler_name: str, name: str, constraint: Constraint | None = None
) -> tuple[PowerConfig, PrestoConfig]:
    _, given, (n, b, k) = LANGUAGES[name]
    constraint = constraint or given
    rule, budget = SAMPLERS[sampler_name]
    cfg, presto = rule.configs(
        budget, **kernel_case.options(alpha=ALPHA, ending="eos", max_new_tokens=n, block_size=b, steps=k, tries=3)
    )
    return replace(cfg, target=replace(cfg.target, constraint=constraint)), presto


@functools.cache
def exact_law(kernel_case: KernelCase, name: str) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """The exact law of the final state (and the states it is over) from the definition."""
    language = LANGUAGES[name][0]
    cfg, _ = config(kernel_case, "sequential-step", name)
    model, kernel, stop = MaskedLM(lm(language), len(PROMPT), language), kernel_case.make(cfg), frozenset({0})
    T, B, K = cfg.target.max_new_tokens, cfg.target.block, cfg.kernel.steps
    law = exact.ending_chain_law(
        model, PROMPT, T, B, K, cfg.temperature, stop, lambda H: kernel_case.ending(model, PROMPT, H, stop, kernel)
    )
    return law, exact.reachable(model, PROMPT, exact.continuations(model.vocab_size, T, stop))


@pytest.mark.parametrize(
    "name,constraint", [(n, LANGUAGES[n][1]) for n in LANGUAGES] + [EBNF], ids=["regex", "json", "ebnf"]
)
def test_the_engine_masks_as_the_definition(name, constraint):
    """At every response prefix q can reach, the reference engine's mask (xgrammar's, resumed
    at the prefix) is the validator's; its draws' log q is the masked, renormalized q_tau."""
    language, _, (n, _, _) = LANGUAGES[name]
    model = lm(language)
    engine = reference_engine(model, language)
    masked = MaskedLM(model, len(PROMPT), language)
    prefixes = {
        s[:c] for s in exact.reachable(masked, PROMPT, exact.continuations(4, n, frozenset({0}))) for c in range(len(s))
    }
    assert len(prefixes) > 5
    for resp in sorted(prefixes):
        req = Request(PROMPT + resp, 1, 0.5, 7, stop=(0,), constraint=constraint, resume=len(resp))
        mask = engine.grammars.start(req)
        assert mask is not None
        assert (mask.allowed() == language.allowed(resp)).all(), (language.decode(resp), mask.allowed())
        (comp,) = engine.generate([req])
        assert comp.logq[0] == pytest.approx(masked.distribution(PROMPT + resp, 0.5)[1][comp.tokens[0]], abs=1e-12)
        assert comp.logp[0] == pytest.approx(model.distribution(PROMPT + resp)[0][comp.tokens[0]], abs=1e-12)


def test_a_prefix_outside_the_language_is_refused():
    language, constraint, _ = LANGUAGES["regex"]
    engine = reference_engine(lm(language), language)
    bad = (2,)  # "b" cannot start (ab|c)+
    with pytest.raises(Exception, match="not allowed by the constraint"):
        engine.generate([Request(PROMPT + bad, 2, 1.0, 1, stop=(0,), constraint=constraint, resume=1)])


@pytest.mark.parametrize("name", LANGUAGES)
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_constrained_kernels_leave_the_target_invariant(kernel_case, name):
    language = LANGUAGES[name][0]
    cfg, _ = config(kernel_case, "sequential-step", name)
    model, stop = MaskedLM(lm(language), len(PROMPT), language), frozenset({0})
    H = cfg.target.max_new_tokens
    pi = exact.ending_target(model, PROMPT, H, stop, ALPHA)
    seqs = exact.reachable(model, PROMPT, exact.continuations(model.vocab_size, H, stop))
    assert all(language.accepts(s, H) for s in seqs) and 0.01 < pi[[len(s) == H for s in seqs]].sum() < 0.99
    P = kernel_case.ending(model, PROMPT, H, stop, kernel_case.make(cfg))
    assert np.allclose(P.sum(axis=1), 1.0, atol=1e-12) and P.min() >= 0
    assert np.abs(pi @ P - pi).max() < 1e-12
    flow = pi[:, None] * P
    assert np.abs(flow - flow.T).max() < 1e-12


SENTINEL = ("regex", "sequential-step", True)
"""The law case tier 1 runs too (per kernel); the rest are marked ``law`` (tier 2)."""


def law_cases():
    for kernel in KERNELS:
        for name in LANGUAGES:
            for sampler, seeded in [("sequential-step", True)] + [(s, False) for s in UNSEEDED]:
                marks = () if (name, sampler, seeded) == SENTINEL else (pytest.mark.law,)
                tag = "seeded" if seeded else "unseeded"
                yield pytest.param(kernel, name, sampler, seeded, id=f"{kernel}-{name}-{sampler}-{tag}", marks=marks)


def sample(kernel_case, sampler_name, name, seeded, engine=None, constraint=None) -> Counter:
    language = LANGUAGES[name][0]
    cfg, presto = config(kernel_case, sampler_name, name, constraint)
    engine = engine or reference_engine(lm(language), language, seeded, UNSEEDED_RNG)
    rule, _ = SAMPLERS[sampler_name]
    sampler = rule.sampler(engine, cfg, presto, kernel_case.make(cfg))
    return Counter(sampler.run(PROMPT, seed=1000 + i).state.tokens for i in range(CHAINS))


@pytest.mark.parametrize("kernel_case,name,sampler_name,seeded", law_cases())
def test_constrained_chains_follow_the_exact_law(kernel_case, name, sampler_name, seeded):
    language = LANGUAGES[name][0]
    counts = sample(kernel_case, sampler_name, name, seeded)
    H = LANGUAGES[name][2][0]
    outside = [language.decode(s) for s in counts if not language.accepts(s, H)]
    assert not outside, f"responses outside the language: {outside}"
    law, states = exact_law(kernel_case, name)
    p, tv = chi_square_pvalue(counts, law, states, CHAINS)
    assert p > SIGNIFICANCE, f"chi-square p={p:.2e} (TV={tv:.3f}) rejects the exact law under {language.name}"


@pytest.mark.law
def test_a_chain_under_the_ebnf_grammar_follows_the_regex_languages_law():
    kernel_case, (name, constraint) = KERNELS[0], EBNF
    language = LANGUAGES[name][0]
    counts = sample(kernel_case, "step", name, False, constraint=constraint)
    assert all(language.accepts(s, LANGUAGES[name][2][0]) for s in counts)
    law, states = exact_law(kernel_case, name)
    p, tv = chi_square_pvalue(counts, law, states, CHAINS)
    assert p > SIGNIFICANCE, f"chi-square p={p:.2e} (TV={tv:.3f}) rejects the exact law under the EBNF grammar"


class UnmaskedLogQ:
    """The sabotage: draws from the masked q, but reports the *unmasked* log q_tau, which the
    chain's ratio then uses."""

    def __init__(self, engine) -> None:
        self.engine, self.capabilities, self.text = engine, engine.capabilities, engine.text

    def generate(self, requests):
        out = []
        for r, c in zip(requests, self.engine.generate(requests)):
            ctx, lq = list(r.prefix), []
            for t in c.tokens:
                lq.append(float(self.engine.lm.distribution(ctx, r.temperature)[1][t]))
                ctx.append(t)
            out.append(dataclasses.replace(c, logq=tuple(lq)))
        return out


@pytest.mark.law
@pytest.mark.parametrize("sampler_name", ["sequential-step", "step"])
def test_the_unmasked_log_q_in_the_ratio_fails_the_chi_square(sampler_name):
    kernel_case, name = KERNELS[0], "regex"
    language = LANGUAGES[name][0]
    engine = UnmaskedLogQ(reference_engine(lm(language), language))
    counts = sample(kernel_case, sampler_name, name, True, engine)
    law, states = exact_law(kernel_case, name)
    p, tv = chi_square_pvalue(counts, law, states, CHAINS)
    assert p < SIGNIFICANCE, f"the unmasked log q was not detected: p={p:.2e}, TV={tv:.3f}"


PRESTO_RULES = ["bfs", "predictive", "bfs-cost", "predictive-cost", "step", "step-cost"]


@pytest.mark.parametrize("rule_name", PRESTO_RULES)
@pytest.mark.parametrize("kernel_case", KERNELS, ids=str)
def test_presto_visits_the_sequential_states_under_a_constraint(kernel_case, rule_name):
    """Seeded chains of 16 tokens in blocks of 8 (K = 6) under the regex: every PreSTO rule's
    transitions are the sequential chain's, state for state (log-probs included)."""
    language, constraint, _ = LANGUAGES["regex"]
    engine = reference_engine(ReferenceLM(4, sharpness=2.0, seed=3), language)
    rule = RULES[rule_name]
    seq_rule = RULES["sequential-path" if rule.keying == "path" else "sequential-step"]
    runs = []
    for r in (seq_rule, rule):
        cfg, presto = r.configs(
            4, **kernel_case.options(alpha=4.0, ending="eos", max_new_tokens=16, block_size=8, steps=6, tries=3)
        )
        cfg = replace(cfg, target=replace(cfg.target, constraint=constraint))
        runs.append(run_states(r.sampler(engine, cfg, presto, kernel_case.make(cfg)), PROMPT, 5))
    (seq, seq_result), (pre, pre_result) = runs
    assert len(seq) == len(pre) == 12
    assert_same_states(seq, pre, 0.0)
    assert pre_result.metrics.model_calls < seq_result.metrics.model_calls
    assert language.accepts(pre_result.state.tokens, 16)
