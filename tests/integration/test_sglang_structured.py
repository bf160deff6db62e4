"""Structured power sampling on a real ``python -m sglang.launch_server`` (SmolLM2-135M, CPU,
float32) with presto-sgl's plugin: SGLang's own grammar (xgrammar) resumed at the kept prefix
by the plugin, log q after the mask, log p0 before it, in the same pass; responses validated
by ``jsonschema``. Skipped without PRESTO_SGL_SGLANG_URL (a failure under PRESTO_SGL_REQUIRE_SGLANG=1)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from presto_sgl import PowerConfig, Sampler, sampling_configs
from presto_sgl.config import Target
from presto_sgl.constraints import Constraint
from presto_sgl.engines.base import Request
from tests.support.forward import TOL
from tests.support.structured import assert_resumed_masked, masked_forward

pytestmark = pytest.mark.sglang

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
QUESTION = "Give a JSON object with a person's name and age."


def constrained(rule: str, kernel: str = "powermh"):
    cfg, presto = sampling_configs(
        rule, method=kernel, ending="eos", alpha=4.0, max_new_tokens=48, block_size=16, steps=4
    )
    t = cfg.target
    return PowerConfig(Target(t.alpha, 48, 16, "eos", constraint=Constraint(json_schema=PERSON)), cfg.kernel), presto


def valid(engine, tokens) -> bool:
    stop = engine.text.stop_ids
    text = engine.text.decode([t for t in tokens if t not in stop])
    try:
        jsonschema.validate(json.loads(text), PERSON)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


@pytest.fixture(scope="module")
def engine(server_url):
    from presto_sgl.engines.sglang.http import SGLangEngine

    eng = SGLangEngine(server_url)
    if eng.mode != "one-pass":
        pytest.fail("the SGLang server runs without presto-sgl's plugin")
    return eng


def test_resumed_masked_draws_equal_a_masked_full_forward(engine, hf_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    prompt = tuple(engine.chat_prompt(QUESTION))
    c, stop = Constraint(json_schema=PERSON), engine.text.stop_ids
    (first,) = engine.generate([Request(prompt, 48, 1.0, None, stop=stop, constraint=c)])
    assert valid(engine, first.tokens) or len(first.tokens) == 48
    k = 5  # resumed inside the object: a restarted grammar would allow only "{" here
    temps = engine.capabilities.score_temperatures  # MultiTryMH's: masked too
    reqs = [
        Request(prompt + first.tokens[:k], 40, tau, None, stop=stop, constraint=c, resume=k, score_temperatures=temps)
        for tau in (1.0, 0.5)
    ]
    for req, comp in zip(reqs, engine.generate(reqs)):
        lq, lp, at = masked_forward(hf_model, tok, c, req.prefix, k, comp.tokens, req.temperature, stop, temps)
        assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < TOL / req.temperature
        assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < TOL
        for t, want, got in zip(temps, zip(*at), zip(*comp.logq_at)):
            assert max(abs(a - b) for a, b in zip(want, got)) < TOL / t
        assert comp.tokens[-1] not in stop or valid(engine, first.tokens[:k] + comp.tokens)


def test_an_ebnf_grammar_resumed_on_the_server(engine, hf_model):
    """SGLang's ``ebnf`` field, resumed mid-answer: masked log q as a masked fp32 forward's."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    c = Constraint(ebnf='root ::= ("Yes" | "No") ", because " [a-z ]+ "."')
    prompt = tuple(engine.chat_prompt("Is the sky blue? Answer Yes or No and say why."))
    assert_resumed_masked(engine, hf_model, tok, c, prompt, r"(Yes|No), because [a-z ]+\.", lengths=(24, 32))


def test_a_structural_tag_resumed_on_the_server(engine, hf_model):
    """SGLang's ``structural_tag`` (its ``format`` form: a tool call, a tagged JSON object),
    resumed inside the tag: masked log q as a masked fp32 forward's."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    call = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    c = Constraint(
        structural_tag={
            "format": {
                "type": "tag",
                "begin": "<tool>",
                "content": {"type": "json_schema", "json_schema": call},
                "end": "</tool>",
            }
        }
    )
    prompt = tuple(engine.chat_prompt("Call the weather tool for Paris."))
    assert_resumed_masked(engine, hf_model, tok, c, prompt, r"<tool>\s*\{[\s\S]*\}\s*</tool>", lengths=(24, 32))


def test_structured_power_sampling_on_the_server(engine):
    """Sequential PowerMH and the step rule under a JSON schema: every response validates; PreSTO
    needs fewer calls for the same K transitions."""
    prompt = tuple(engine.chat_prompt(QUESTION))
    results = {rule: Sampler(engine, *constrained(rule)).run(prompt, seed=1) for rule in ("sequential", "step")}
    for r in results.values():
        assert r.metrics.transitions == 12 and valid(engine, r.state.tokens), engine.text.decode(r.state.tokens)
    assert results["step"].metrics.model_calls < results["sequential"].metrics.model_calls


def test_multitry_under_a_constraint_on_the_server(engine, hf_model):
    """MultiTryMH's temperature mixture under a JSON schema, by the step rule: the chain's masked
    log q at every try temperature is a masked fp32 forward's over the whole response, the
    response validates, and the K transitions took fewer calls than K (sequential's count)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    prompt = tuple(engine.chat_prompt(QUESTION))
    c, stop = Constraint(json_schema=PERSON), engine.text.stop_ids
    sampler = Sampler(engine, *constrained("step", "multitry"))
    r, temps = sampler.run(prompt, seed=2), sampler.kernel.score_temperatures
    st = r.state
    assert r.metrics.transitions == 12 and valid(engine, st.tokens), engine.text.decode(st.tokens)
    assert temps == (0.25, 0.5, 1.0) and r.metrics.model_calls < 12
    _, lp, at = masked_forward(hf_model, tok, c, st.prompt, 0, st.tokens, 1.0, stop, temps)
    assert max(abs(a - b) for a, b in zip(lp, st.logp)) < TOL
    for t, want, got in zip(temps, zip(*at), zip(*st.logq_at)):
        assert max(abs(a - b) for a, b in zip(want, got)) < TOL / t
