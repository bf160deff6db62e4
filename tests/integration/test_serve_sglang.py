"""``presto-sgl serve --engine sglang`` against a real SGLang server, through the ``openai`` client.

Chat and completions with n chains on the shared server (PRESTO_SGL_SGLANG_URL): the
chat template is applied on ids (the prompt ids equal the tokenizer's own template ids),
every response is what a float32 forward of the model scores, text is the decode of the
kept ids; logprobs and a prompt scored in one pass; a client that hangs up; the README's
example. A backend killed mid-request is tested in parts: serve waits out an engine's restart
and answers a backend gone for good with 503 (test_serve.py, on the scripted stand-in), and
the engine survives a real server's SIGKILL and restart with every chain exact
(test_sglang_load.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from pathlib import Path

import jsonschema
import openai
import pytest

from tests.support.forward import TOL, assert_scores_match, reference
from tests.support.serving import assert_prompt_scored, client, health, serve_cli, wait_for

pytestmark = pytest.mark.sglang

SERVE = ("--engine", "sglang", "--max-new-tokens", "16", "--block-size", "8", "--steps", "3", "--budget", "6")
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2 + 3?"}]


def _model_name(url):
    return client(url).models.list().data[0].id


def _assert_scored(hf_model, prompt_ids, choice):
    """The chain's whole response scores, under a float32 forward, as the chain says."""
    presto = choice.model_extra["presto"]
    ids = presto["response_ids"]
    _, logp = reference(hf_model, prompt_ids, ids, 1.0)
    assert abs(sum(logp) - presto["log_p0"]) < TOL * len(ids)
    assert choice.token_ids == (ids[: presto["eos_index"]] if presto["eos_index"] is not None else ids)


def test_chat_and_completions_with_n_chains_on_a_real_server(server_url, hf_model):
    from transformers import AutoTokenizer

    with serve_cli(*SERVE, "--url", server_url) as (url, _):
        model = _model_name(url)
        c = client(url)
        r = c.chat.completions.create(
            model=model, messages=MESSAGES, n=2, seed=3, extra_body={"return_token_ids": True}
        )
        tok = AutoTokenizer.from_pretrained(hf_model.name_or_path)
        want = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
        want = list(want["input_ids"] if hasattr(want, "keys") else want)
        assert len(r.choices) == 2
        for ch in r.choices:
            assert ch.prompt_token_ids == want, "the chat template must be applied on ids, as the tokenizer does"
            _assert_scored(hf_model, want, ch)
            assert ch.message.role == "assistant" and ch.message.content == tok.decode(ch.token_ids)
            assert ch.finish_reason == ("stop" if ch.model_extra["presto"]["eos_index"] is not None else "length")
            assert ch.model_extra["presto"]["metrics"]["transitions"] == 6
        assert r.usage.prompt_tokens == len(want)
        text = c.completions.create(
            model=model,
            prompt="The capital of France is",
            max_tokens=8,
            extra_body={"block_size": 4, "steps": 2, "return_token_ids": True},
        )
        ch = text.choices[0]
        assert ch.prompt_token_ids == tok.encode("The capital of France is", add_special_tokens=False)
        _assert_scored(hf_model, ch.prompt_token_ids, ch)
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(model=model, messages=MESSAGES, max_completion_tokens=0)
        assert err.value.body["param"] == "max_completion_tokens"


def test_logprobs_and_a_prompt_scored_in_one_pass_on_a_real_server(server_url, hf_model):
    """Chat ``logprobs`` are the answer tokens' log p0; ``echo`` with ``logprobs`` (what lm-eval's
    loglikelihood requests send) scores the prompt in one pass as a float32 forward does, with
    the forward's greedy next token."""
    with serve_cli(*SERVE, "--url", server_url) as (url, _):
        model = _model_name(url)
        r = client(url).chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=12, logprobs=True, extra_body={"return_token_ids": True}
        )
        ch = r.choices[0]
        assert len(ch.token_ids) <= 12 and r.model_extra["presto"]["config"]["max_new_tokens"] == 16
        assert_scores_match(hf_model, ch.prompt_token_ids, ch.token_ids, [e.logprob for e in ch.logprobs.content])
        assert_prompt_scored(url, model, hf_model, list(ch.prompt_token_ids))


def test_a_client_that_hangs_up_cancels_its_chains_on_the_server(server_url):
    with serve_cli(*SERVE, "--url", server_url) as (url, _):
        model = _model_name(url)

        with pytest.raises(openai.APITimeoutError):  # the client hangs up after 3 s of a minutes-long request
            client(url, timeout_s=3.0).chat.completions.create(
                model=model, messages=MESSAGES, n=2, max_tokens=64, extra_body={"steps": 50, "rule": "sequential"}
            )
        assert wait_for(lambda: health(url)["chains"]["running"] == 0, timeout_s=30), "a chain outlived its client"
        calls = health(url)["backend_calls"]
        time.sleep(2)
        snap = health(url)
        assert snap["backend_calls"] == calls and snap["chains"]["cancelled"] == 2 and snap["chains"]["completed"] == 0


def test_the_readme_client_example_runs_as_written(server_url):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("**Behind an OpenAI-compatible endpoint**") :]
    command = re.search(r"presto-sgl serve (.*?)\s+# on port 8300", section).group(1)
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    flags = command.replace("http://127.0.0.1:30000", server_url).split()
    namespace: dict = {}
    with serve_cli(*flags) as (url, _):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code.replace("http://127.0.0.1:8300", url), namespace)
        served = _model_name(url)
    assert out.getvalue().strip(), "the example prints the answers and the transitions per call"
    assert namespace["model"] == served  # read from /v1/models: a hub id or a folder's name
    r, structured = namespace["r"], namespace["structured"]
    assert r.choices[0].model_extra["presto"]["metrics"]["transitions_per_call"] > 1.0  # PreSTO step
    answer = structured.choices[0]
    assert answer.finish_reason == "stop", answer  # ended at EOS: complete JSON of the schema
    jsonschema.validate(json.loads(answer.message.content), namespace["person"])
