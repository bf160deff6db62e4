"""Structured power sampling on a real ``python -m sglang.launch_server`` (SmolLM2-135M, CPU,
float32) with presto-sgl's plugin: SGLang's own grammar (xgrammar) resumed at the kept prefix
by the plugin, log q after the mask, log p0 before it, in the same pass; responses validated
by ``jsonschema``. Skipped without PRESTO_SGL_SGLANG_URL (a failure under PRESTO_SGL_REQUIRE_SGLANG=1)."""

from __future__ import annotations

import pytest

from presto_sgl import Sampler
from tests.support.structured import (
    QUESTION,
    assert_chain_masked,
    assert_resumed_masked,
    person_config,
    resumed_cases,
)

pytestmark = pytest.mark.sglang


@pytest.mark.parametrize("kind", ["ebnf", "structural_tag"])
def test_a_grammar_resumed_on_the_server(engine, hf_model, kind):
    """SGLang's ``ebnf`` and ``structural_tag`` fields, resumed mid-answer (inside the tag): masked
    log q as a masked fp32 forward's."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    c, question, pattern = resumed_cases()[kind]
    assert_resumed_masked(engine, hf_model, tok, c, tuple(engine.chat_prompt(question)), pattern, lengths=(24, 32))


def test_multitry_under_a_constraint_on_the_server(engine, hf_model):
    """MultiTryMH's temperature mixture under a JSON schema, by the step rule: the chain's masked
    log q at every try temperature is a masked fp32 forward's over the whole response, the
    response validates, and the K transitions took fewer calls than K (sequential's count). (Every
    rule's chain under a schema is the sequential one on the seeded vLLM server,
    tests/integration/test_vllm_structured.py; PowerMH's under the switch here,
    tests/integration/test_power_scope.py.)"""
    sampler = Sampler(engine, *person_config("step", "multitry"))
    r, temps = sampler.run(tuple(engine.chat_prompt(QUESTION)), seed=2), sampler.kernel.score_temperatures
    assert temps == (0.25, 0.5, 1.0) and r.metrics.transitions == 12 and r.metrics.model_calls < 12
    assert_chain_masked(engine, hf_model, r, temps)


def test_a_draw_the_server_did_not_mask_is_refused(engine, monkeypatch):
    """A server that samples a constrained request without its grammar (simulated: the client leaves
    the grammar out of the request) returns digits-only answers almost never; the engine checks every
    constrained response against the grammar here and raises, naming the forbidden token, instead
    of handing the chain an answer outside the constraint (issue 56's empty answer was one)."""
    from presto_sgl.constraints import Constraint
    from presto_sgl.engines.base import Request
    from presto_sgl.errors import EngineError

    prompt = tuple(engine.chat_prompt("Write a story about a cat."))
    req = Request(prompt, 16, 1.0, None, stop=engine.text.stop_ids, constraint=Constraint(regex="[0-9]{3}"))
    assert all(t in "0123456789" for t in engine.text.decode(engine.generate([req])[0].tokens[:-1]))
    monkeypatch.setattr(type(engine), "_constrained", staticmethod(lambda r, custom: {}))
    with pytest.raises(EngineError, match=r"token \d+ \(id \d+\) the constraint .* forbids there"):
        engine.generate([req])
