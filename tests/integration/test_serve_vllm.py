"""``presto-sgl serve --engine vllm`` against a real vLLM server (PRESTO_SGL_VLLM_URL).

vLLM honours per-request seeds, so the engine is seeded: each served chain must be, token
for token, the chain the library draws on the same server with the same keys, and score
as a float32 forward says.
"""

from __future__ import annotations

import re

import pytest

from tests.support.forward import TOL, reference
from tests.support.serving import assert_prompt_scored, client, serve_cli

pytestmark = pytest.mark.vllm

MESSAGES = [{"role": "user", "content": "Name a prime number."}]


def test_served_chains_are_the_librarys_chains_on_the_same_server(server_url, engine, hf_model):
    from presto_sgl.config import sampling_configs
    from presto_sgl.samplers import Sampler

    flags = ("--engine", "vllm", "--url", server_url, "--max-new-tokens", "16", "--block-size", "8", "--steps", "3")
    with serve_cli(*flags) as (url, _):
        c = client(url)
        r = c.chat.completions.create(
            model=c.models.list().data[0].id,
            messages=MESSAGES,
            n=2,
            seed=4,
            extra_body={"budget": 6, "return_token_ids": True},
        )
        digits = c.chat.completions.create(  # vLLM's grammar, resumed at each kept prefix by the plugin
            model=c.models.list().data[0].id, messages=MESSAGES, seed=4, extra_body={"regex": "[0-9]+"}
        )
    assert re.fullmatch("[0-9]+", digits.choices[0].message.content)
    assert r.model_extra["presto"]["config"]["ending"] == "eos"  # serve's default: the responses that end
    config, presto = sampling_configs("step", max_new_tokens=16, block_size=8, steps=3, budget=6, ending="eos")
    sampler = Sampler(engine, config, presto)
    prompt = engine.chat_prompt(MESSAGES[0]["content"])
    for ch in r.choices:
        assert ch.prompt_token_ids == list(prompt)
        want = sampler.run(prompt, seed=4, prompt_id=ch.index)
        ids = ch.model_extra["presto"]["response_ids"]
        assert ids == list(want.state.tokens)
        _, logp = reference(hf_model, prompt, ids, 1.0)
        assert abs(sum(logp) - ch.model_extra["presto"]["log_p0"]) < TOL * len(ids)
    assert r.choices[0].model_extra["presto"]["response_ids"] != r.choices[1].model_extra["presto"]["response_ids"]


def test_a_prompt_scored_in_one_pass_on_a_real_vllm_server(server_url, hf_model):
    """``echo`` with ``logprobs`` (lm-eval's loglikelihood request) on vLLM: log p0 of every prompt
    token from raw prompt log-probs, as a float32 forward says, and the forward's greedy next token."""
    import httpx

    with serve_cli("--engine", "vllm", "--url", server_url) as (url, _):
        model = client(url).models.list().data[0].id
        ids = httpx.post(
            url + "/tokenize", json={"prompt": "The capital of France is", "add_special_tokens": False}, timeout=60
        ).json()["tokens"]
        assert_prompt_scored(url, model, hf_model, ids)
