"""``presto-sgl serve``'s OpenAI semantics on the seeded reference engine, checked against the
library's own chain and the reference LM's exact distributions: ``max_tokens`` as a cap,
``temperature``, ``logprobs`` of sampled answers, ``echo`` (sampled, and scored in one pass
as harnesses' loglikelihood requests are), streaming (usage on request, keepalive comments),
``/tokenize``, ``/detokenize``, ``/tokenizer_info``, ``/metrics``, ``--api-key``, body limits."""

from __future__ import annotations

import json

import httpx
import numpy as np
import openai
import pytest

from presto_sgl.cli.main import main
from tests.integration.test_serve import LONG, PROMPT, library_chain, reference
from tests.support.gated import GatedEngine
from tests.support.serving import client, make_service, serving


@pytest.fixture(scope="module")
def url():
    with serving(make_service(reference(), "reference", concurrency=2, queue_size=8)) as u:
        yield u


def post(url: str, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60, **kw)


def test_max_tokens_caps_a_chain_rounded_up_to_whole_blocks(url):
    """max_tokens 13, block 8: the chain is the library's T = 16 chain; the answer its first 13 tokens."""
    r = client(url).completions.create(
        model="reference",
        prompt=PROMPT,
        max_tokens=13,
        extra_body={"block_size": 8, "steps": 2, "seed": 3, "return_token_ids": True},
    )
    ch = r.choices[0]
    want = library_chain(PROMPT, 3, 0, max_new_tokens=16, block_size=8, steps=2)
    assert ch.model_extra["presto"]["response_ids"] == list(want.state.tokens)
    assert ch.token_ids == list(want.state.tokens[:13]) and ch.finish_reason == "length"
    assert r.model_extra["presto"]["config"]["max_new_tokens"] == 16 and r.usage.completion_tokens == 13


def test_temperature_sets_alpha_and_logprobs_are_the_chains_log_p0(url):
    c = client(url)
    r = c.completions.create(
        model="reference",
        prompt=PROMPT,
        max_tokens=8,
        temperature=0.5,
        logprobs=0,
        extra_body={"block_size": 8, "steps": 2, "seed": 5, "return_token_ids": True},
    )
    assert r.model_extra["presto"]["config"]["alpha"] == 2.0
    want = library_chain(PROMPT, 5, 0, max_new_tokens=8, block_size=8, steps=2, alpha=2.0)
    lp = r.choices[0].logprobs
    assert r.choices[0].token_ids == list(want.state.tokens)
    assert lp.token_logprobs == pytest.approx(list(want.state.logp), abs=1e-12)
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset == list(range(8))
    lm = reference().lm  # log p0 is the model's: check one token against the reference LM itself
    assert lp.token_logprobs[0] == pytest.approx(float(lm.distribution(PROMPT)[0][want.state.tokens[0]]))


def test_echo_with_logprobs_scores_the_prompt_in_one_pass_as_lm_eval_reads_it(url):
    """lm-eval's loglikelihood request (echo, logprobs 1, max_tokens 1, temperature 0):
    token_logprobs[ctxlen:-1] sum to log p0(continuation | context), is_greedy from top_logprobs."""
    lm = reference().lm
    context, continuation = [1, 2, 3, 4, 5], [6, 7, 8]
    body = {
        "model": "reference",
        "prompt": [context + continuation],
        "echo": True,
        "logprobs": 1,
        "max_tokens": 1,
        "temperature": 0,
        "seed": 1234,
    }
    r = post(url, "/v1/completions", body).json()
    ch = r["choices"][0]
    assert r["presto"]["scored"] is True and r["presto"]["power_sampling"] is False
    lps = ch["logprobs"]["token_logprobs"]
    assert len(lps) == len(context + continuation) + 1 and lps[0] is None
    want = lm.score(context, continuation)[0]
    assert sum(lps[len(context) : -1]) == pytest.approx(want, abs=1e-9)
    tops = ch["logprobs"]["top_logprobs"]
    for t in range(1, 9):  # each top dict holds the position's argmax (and the given token)
        row = lm.distribution((context + continuation)[:t])[0]
        assert max(tops[t].values()) == pytest.approx(float(row.max()))
    after = lm.distribution(context + continuation)[0]
    greedy = int(np.argmax(after))
    assert ch["logprobs"]["tokens"][-1] == reference().text.decode([greedy])
    assert lps[-1] == pytest.approx(float(after[greedy]))
    assert ch["text"] == reference().text.decode(context + continuation + [greedy])
    assert r["usage"] == {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
    k3 = post(url, "/v1/completions", {**body, "logprobs": 3, "max_tokens": 0}).json()["choices"][0]["logprobs"]
    assert len(k3["token_logprobs"]) == 8 and all(len(d) >= 3 for d in k3["top_logprobs"][1:])


def test_echo_without_logprobs_prepends_the_prompt_to_a_sampled_answer(url):
    r = client(url).completions.create(
        model="reference", prompt="abcd", max_tokens=8, echo=True, extra_body={"block_size": 8, "steps": 2, "seed": 2}
    )
    plain = client(url).completions.create(
        model="reference", prompt="abcd", max_tokens=8, extra_body={"block_size": 8, "steps": 2, "seed": 2}
    )
    assert r.choices[0].text == "abcd" + plain.choices[0].text


def test_stream_sends_keepalive_comments_while_chains_run():
    engine = GatedEngine()  # the chain waits at its first call until the stream has sent three comments
    service = make_service(engine, "reference", concurrency=1, queue_size=0)
    with serving(service, keepalive_s=0.2) as u, engine:
        body = {
            "model": "reference",
            "prompt": PROMPT,
            "stream": True,
            "max_tokens": 16,
            "block_size": 16,
            "steps": 6,
            "rule": "sequential",
        }
        lines = []
        with httpx.stream("POST", u + "/v1/completions", json=body, timeout=300) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                lines.append(line)
                if sum(x.startswith(":") for x in lines) == 3:
                    engine.open()
        comments = [x for x in lines if x.startswith(":")]
        data = [x for x in lines if x.startswith("data: ")]
        assert len(comments) >= 3, lines[:5]  # the first at once, then every 0.2 s while the chain ran
        assert data[-1] == "data: [DONE]" and json.loads(data[0][6:])["choices"][0]["finish_reason"] == "length"


def test_a_stream_that_fails_ends_with_an_error_event():
    service = make_service(reference(), "reference", concurrency=1, queue_size=0)
    with serving(service, request_timeout_s=0.5, keepalive_s=0.1) as u:
        body = {"model": "reference", "prompt": PROMPT, "stream": True, **LONG["extra_body"], "max_tokens": 64}
        with httpx.stream("POST", u + "/v1/completions", json=body, timeout=60) as resp:
            data = [x for x in resp.iter_lines() if x.startswith("data: ")]
        error = json.loads(data[0][6:])["error"]
        assert error["code"] == "timeout" and error["type"] == "timeout" and data[-1] == "data: [DONE]"


def test_tokenize_detokenize_and_tokenizer_info_in_vllms_shapes(url):
    r = post(url, "/tokenize", {"prompt": "abcd", "add_special_tokens": False}).json()
    assert r["tokens"] == reference().text.encode("abcd") and r["count"] == 4
    assert post(url, "/detokenize", {"tokens": r["tokens"]}).json() == {"prompt": "abcd"}
    info = httpx.get(url + "/tokenizer_info").json()
    assert {"eos_token", "bos_token", "pad_token", "chat_template", "model_max_length"} <= set(info)
    assert info["vocab_size"] == 32
    for path, body, param in (
        ("/tokenize", {"prompt": 3}, "prompt"),
        ("/detokenize", {"tokens": [99]}, "tokens"),
        ("/tokenize", {"prompt": "a;b"}, "prompt"),
    ):
        bad = post(url, path, body)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param


def test_metrics_count_requests_and_the_chains_transitions(url):
    before = httpx.get(url + "/metrics").text
    r = client(url).completions.create(
        model="reference", prompt=PROMPT, max_tokens=8, n=2, extra_body={"block_size": 8, "steps": 3}
    )
    text = httpx.get(url + "/metrics").text

    def value(body: str, name: str) -> float:
        line = next((x for x in body.splitlines() if x.startswith(name + " ")), None)
        return float(line.split()[-1]) if line else 0.0

    calls = sum(ch.model_extra["presto"]["metrics"]["model_calls"] for ch in r.choices)
    assert value(text, "presto_sgl_transitions_total") - value(before, "presto_sgl_transitions_total") == 6
    assert value(text, "presto_sgl_model_calls_total") - value(before, "presto_sgl_model_calls_total") == calls
    assert "# TYPE presto_sgl_chains_running gauge" in text and "presto_sgl_queue_depth 0" in text
    assert 'presto_sgl_requests_total{endpoint="/v1/completions",status="200"}' in text


def test_an_api_key_guards_the_api_but_not_health():
    with serving(make_service(reference(), "reference"), api_key="s3cret") as u:
        with pytest.raises(openai.AuthenticationError) as err:
            client(u).completions.create(model="reference", prompt=PROMPT, max_tokens=8)
        assert err.value.body["code"] == "invalid_api_key"
        assert httpx.post(u + "/tokenize", json={"prompt": "ab"}).status_code == 401
        ok = openai.OpenAI(base_url=u + "/v1", api_key="s3cret", max_retries=0).completions.create(
            model="reference", prompt=PROMPT, max_tokens=8, extra_body={"block_size": 8, "steps": 1}
        )
        assert len(ok.choices[0].text) == 8
        assert httpx.get(u + "/health").status_code == 200 and httpx.get(u + "/metrics").status_code == 200


def test_bodies_over_the_limit_are_413():
    with serving(make_service(reference(), "reference"), max_body_bytes=1000) as u:
        big = post(u, "/v1/completions", {"model": "reference", "prompt": [1] * 2000})
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"


def test_version(url, capsys):
    from presto_sgl import __version__

    assert main(["--version"]) == 0 and capsys.readouterr().out == f"presto-sgl {__version__}\n"
    assert httpx.get(url + "/version").json() == {"version": __version__}
