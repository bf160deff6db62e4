"""``presto-sgl serve`` through the real ``openai`` client, on the reference engine (seeded:
every answer is checked token for token against the library's own chain) and on the
scripted SGLang stand-in (backend restarts and failures). The real SGLang backend is
tested in test_serve_sglang.py.
"""

from __future__ import annotations

import math
import threading
import time

import httpx
import openai
import pytest

from presto_sgl.config import sampling_configs
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.engines.sglang.http import SGLangEngine
from presto_sgl.samplers import Sampler
from tests.support.gated import GatedEngine
from tests.support.serving import client, health, make_service, serve_cli, serving, wait_for
from tests.support.sglang_standin import StandIn

PROMPT = [1, 2, 3, 4]
LONG = {"max_tokens": 64, "extra_body": {"block_size": 16, "steps": 50000, "rule": "sequential"}}
"""A request that runs for about a minute on the reference engine (200,000 model calls)."""
LONG_CALLS = 200_000
"""The model calls of a LONG chain run to its end (4 blocks of 50,000 steps, one call each)."""
DEADLINE_S = 60.0
"""How long a test waits for what must happen soon (a loaded machine may be many times slower)."""


def reference() -> ReferenceEngine:
    return ReferenceEngine(ReferenceLM(32, seed=0))


def library_chain(prompt, seed, prompt_id, rule="step", **power):
    """The response the library's own sampler draws for this chain (reference engine, seeded)."""
    config, presto = sampling_configs(rule, **power)
    return Sampler(reference(), config, presto).run(prompt, seed=seed, prompt_id=prompt_id)


@pytest.fixture(scope="module")
def ref_url():
    with serving(make_service(reference(), "reference", concurrency=4, queue_size=16)) as url:
        yield url


@pytest.mark.parametrize("rule", ["sequential", "bfs", "step"])
def test_completions_with_n_chains_equal_the_librarys_chains(ref_url, rule):
    c = client(ref_url)
    r = c.completions.create(
        model="reference",
        prompt=PROMPT,
        max_tokens=16,
        n=3,
        extra_body={"block_size": 8, "steps": 4, "rule": rule, "seed": 11, "return_token_ids": True},
    )
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    responses = []
    for ch in r.choices:
        want = library_chain(PROMPT, 11, ch.index, rule, max_new_tokens=16, block_size=8, steps=4)
        assert ch.model_extra["presto"]["response_ids"] == list(want.state.tokens)
        assert ch.token_ids == list(want.state.tokens)  # the reference LM has no stop token: nothing is cut
        assert ch.prompt_token_ids == PROMPT and ch.finish_reason == "length"
        assert ch.text == reference().decode(want.state.tokens)
        m = ch.model_extra["presto"]["metrics"]
        assert m["transitions"] == 8 and m["model_calls"] == want.metrics.model_calls
        assert ch.model_extra["presto"]["log_p0"] == pytest.approx(want.state.log_likelihood())
        responses.append(tuple(want.state.tokens))
    assert len(set(responses)) == 3, "the n chains must be independent (own keys), not copies"
    assert r.usage.prompt_tokens == len(PROMPT) and r.usage.completion_tokens == 48
    assert r.model_extra["presto"]["seed"] == 11 and r.model_extra["presto"]["config"]["rule"] == rule


def test_a_list_of_prompts_keys_chain_j_of_prompt_i_as_i_times_n_plus_j(ref_url):
    prompts = [[1, 2, 3], [5, 6]]
    r = client(ref_url).completions.create(
        model="reference",
        prompt=prompts,
        max_tokens=8,
        n=2,
        extra_body={"block_size": 8, "steps": 2, "seed": 3, "return_token_ids": True},
    )
    assert len(r.choices) == 4
    for ch in r.choices:
        assert ch.prompt_token_ids == prompts[ch.index // 2]
        want = library_chain(prompts[ch.index // 2], 3, ch.index, max_new_tokens=8, block_size=8, steps=2)
        assert ch.token_ids == list(want.state.tokens)
    assert r.usage.prompt_tokens == 5


def test_text_prompts_stop_strings_streaming_and_fresh_seeds(ref_url):
    c = client(ref_url)
    body = {"block_size": 8, "steps": 2, "seed": 4}
    full = c.completions.create(model="reference", prompt="abcd", max_tokens=16, extra_body=body).choices[0]
    assert full.finish_reason == "length" and len(full.text) == 16
    stop = full.text[5:7]
    cut = c.completions.create(model="reference", prompt="abcd", max_tokens=16, stop=[stop], extra_body=body).choices[0]
    assert cut.text == full.text[: full.text.index(stop)] and cut.finish_reason == "stop"
    chunks = list(
        c.completions.create(
            model="reference",
            prompt="abcd",
            max_tokens=16,
            stream=True,
            extra_body=body,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].text == full.text and chunks[-1].usage.completion_tokens == 16
    plain = list(c.completions.create(model="reference", prompt="abcd", max_tokens=16, stream=True, extra_body=body))
    assert len(plain) == 1 and plain[0].usage is None and plain[0].model_extra["presto"]["seed"] == 4
    seeds = {
        c.completions.create(model="reference", prompt="abcd", max_tokens=8, extra_body={"block_size": 8}).model_extra[
            "presto"
        ]["seed"]
        for _ in range(3)
    }
    assert len(seeds) == 3, "a request without a seed gets a fresh one, reported in presto.seed"


BAD = [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"extra_body": {"alpha": -1}}, "alpha"),
    ({"extra_body": {"rule": "dfs"}}, "rule"),
    ({"extra_body": {"sampler": "beam"}}, "sampler"),
    ({"extra_body": {"method": "beam"}}, "method"),
    ({"extra_body": {"budget": 0}}, "budget"),
    ({"extra_body": {"steps": -1}}, "steps"),
    ({"extra_body": {"tries": 0, "method": "multitry"}}, "tries"),
    ({"extra_body": {"cost_aware": True, "rule": "sequential"}}, "cost_aware"),
    ({"n": 0}, "n"),
    ({"n": 17}, "n"),
    ({"seed": -2}, "seed"),
    ({"logprobs": 2}, "logprobs"),
    ({"echo": True, "logprobs": 0, "max_tokens": 5}, "max_tokens"),  # scoring: 0 or 1
    ({"stop": ["a", ""]}, "stop"),
    ({"temperature": -1}, "temperature"),
    ({"temperature": 0.5, "extra_body": {"alpha": 4.0}}, "temperature"),
    ({"top_p": 0.9}, "top_p"),
    ({"extra_body": {"blocksize": 8}}, "blocksize"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 99]}, "prompt"),
    ({"prompt": "hello; world"}, "prompt"),  # ";" is outside the reference vocabulary
]


@pytest.mark.parametrize("kwargs, param", BAD, ids=[p for _, p in BAD])
def test_bad_parameters_are_400_naming_the_field(ref_url, kwargs, param):
    kwargs = {"model": "reference", "prompt": PROMPT, "max_tokens": 16} | kwargs
    with pytest.raises(openai.BadRequestError) as err:
        client(ref_url).completions.create(**kwargs)
    error = err.value.body
    assert err.value.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["param"] == param and f"`{param}`" in error["message"], error


def test_other_client_errors_are_shaped_as_the_openai_api(ref_url):
    with pytest.raises(openai.NotFoundError) as err:
        client(ref_url).completions.create(model="gpt-4o", prompt=PROMPT, max_tokens=16)
    assert err.value.body["code"] == "model_not_found" and err.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as err:  # no tokenizer: no chat template
        client(ref_url).chat.completions.create(model="reference", messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["param"] == "messages"
    bad = httpx.post(ref_url + "/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    models = client(ref_url).models.list()
    assert [m.id for m in models.data] == ["reference"]
    assert health(ref_url)["status"] == "ok"


def _long_request_in_background(url, timeout_s, request=LONG):
    """A ``request`` (LONG) whose client gives up after ``timeout_s`` (closing its connection)."""
    outcome = {}

    def go():
        try:
            client(url, timeout_s=timeout_s).completions.create(model="reference", prompt=PROMPT, **request)
            outcome["status"] = 200
        except openai.APITimeoutError:
            outcome["status"] = "client timeout"
        except openai.APIStatusError as exc:
            outcome["status"] = exc.status_code

    thread = threading.Thread(target=go)
    thread.start()
    return thread, outcome


def test_a_client_that_disconnects_leaves_no_chain_running():
    engine = GatedEngine()
    service = make_service(engine, "reference", concurrency=1, queue_size=0)
    with serving(service) as url, engine:
        # The chain's first model call waits at the gate until its client has given up: the chain
        # holds the one slot until then, and cannot end before the client leaves.
        thread, outcome = _long_request_in_background(url, timeout_s=1.0)
        assert engine.calling.wait(DEADLINE_S) and health(url)["chains"]["running"] == 1
        with pytest.raises(openai.RateLimitError) as err:  # the one slot is taken and no chain may wait
            client(url).completions.create(model="reference", prompt=PROMPT, max_tokens=16)
        assert err.value.body["type"] == "rate_limit_exceeded" and err.value.response.headers["retry-after"] == "1"
        thread.join(DEADLINE_S)
        assert outcome["status"] == "client timeout"
        engine.open()  # the chain goes on, until its next model call sees the request gone
        assert wait_for(lambda: health(url)["chains"]["running"] == 0, timeout_s=DEADLINE_S), (
            "the chain outlived its client"
        )
        calls = service.engine.calls
        assert calls < LONG_CALLS, "the chain ran to its end"
        time.sleep(0.5)
        assert service.engine.calls == calls, "no model call after the chain was cancelled"
        snap = health(url)["chains"]
        assert snap["cancelled"] == 1 and snap["completed"] == 0 and snap["refused"] == 1
        r = client(url).completions.create(
            model="reference", prompt=PROMPT, max_tokens=16, extra_body={"block_size": 8}
        )
        assert len(r.choices[0].text) == 16


def test_the_request_timeout_cancels_running_and_waiting_chains():
    engine = GatedEngine()  # the running chain waits at the gate: only the timeout can end the request
    service = make_service(engine, "reference", concurrency=1, queue_size=4)
    with serving(service, request_timeout_s=1.0) as url, engine:
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as err:  # n = 2 on one slot: one chain runs, one waits
            client(url).completions.create(model="reference", prompt=PROMPT, n=2, **LONG)
        assert err.value.status_code == 504 and err.value.body["code"] == "timeout"
        assert time.monotonic() - t0 < DEADLINE_S / 2  # without the timeout: no answer for minutes
        engine.open()

        def idle():
            chains = health(url)["chains"]
            return chains["running"] == 0 and chains["queued"] == 0

        assert wait_for(idle, timeout_s=DEADLINE_S)
        assert health(url)["chains"]["cancelled"] == 2 and service.engine.calls < LONG_CALLS


def test_a_bounded_load_completes_or_refuses_every_request_cleanly():
    """48 requests from 16 client threads against 4 slots + 8 waiting: each is answered in
    full (and exactly) or refused with 429; nothing else, and nothing left running."""
    service = make_service(reference(), "reference", concurrency=4, queue_size=8)
    outcomes: list[tuple[int, int, object]] = []
    lock = threading.Lock()
    with serving(service) as url:

        def worker(w):
            c = client(url)
            for i in range(3):
                seed = w * 3 + i
                try:
                    r = c.completions.create(
                        model="reference",
                        prompt=PROMPT,
                        max_tokens=16,
                        seed=seed,
                        extra_body={"block_size": 8, "steps": 20, "return_token_ids": True},
                    )
                    result = (200, seed, tuple(r.choices[0].token_ids))
                except openai.RateLimitError as exc:
                    result = (429, seed, exc.body["type"])
                with lock:
                    outcomes.append(result)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        snap = health(url)["chains"]
    assert len(outcomes) == 48
    done = [o for o in outcomes if o[0] == 200]
    assert all(o[2] == "rate_limit_exceeded" for o in outcomes if o[0] == 429)
    assert done, "some requests must be served"
    for _, seed, tokens in done[:8]:
        assert tokens == library_chain(PROMPT, seed, 0, max_new_tokens=16, block_size=8, steps=20).state.tokens
    assert snap["completed"] == len(done) and snap["refused"] == 48 - len(done)
    assert snap["running"] == 0 and snap["queued"] == 0 and snap["failed"] == 0


# -- the backend: a scripted SGLang stand-in that goes away ---------------------------------
@pytest.fixture
def stand_in(tmp_path):
    srv = StandIn(tmp_path, one_pass=True)
    yield srv
    srv.server.shutdown()


def _standin_service(srv, restart_timeout_s):
    return make_service(
        SGLangEngine(srv.url, restart_timeout_s=restart_timeout_s), "standin", max_new_tokens=8, block_size=4, steps=3
    )


def test_a_backend_restart_mid_request_is_waited_out(stand_in):
    service = _standin_service(stand_in, restart_timeout_s=30)
    with serving(service) as url:
        stand_in.drop_next = 1.0  # the backend goes away on the request's first call, back 1 s later
        r = client(url).completions.create(model="standin", prompt=[1, 2, 3], extra_body={"return_token_ids": True})
        assert r.choices[0].model_extra["presto"]["metrics"]["transitions"] == 6
        assert (
            service.engine.inner.stats.reconnects == 1 and len(r.choices[0].model_extra["presto"]["response_ids"]) == 8
        )


def test_a_backend_gone_for_good_is_503_and_a_failing_one_502(stand_in, tmp_path):
    service = _standin_service(stand_in, restart_timeout_s=0.5)
    with serving(service) as url:
        stand_in.drop_next = math.inf
        with pytest.raises(openai.APIStatusError) as err:
            client(url).completions.create(model="standin", prompt=[1, 2, 3])
        assert err.value.status_code == 503 and err.value.body["code"] == "backend_unavailable"
        assert stand_in.url in err.value.body["message"]
        assert health(url)["status"] == "backend_unavailable"
    failing = StandIn(tmp_path)
    try:
        service = _standin_service(failing, restart_timeout_s=0.5)
        failing.fail_status = 500  # from now on every /generate is an HTTP 500
        with serving(service) as url:
            with pytest.raises(openai.APIStatusError) as err:
                client(url).completions.create(model="standin", prompt=[1, 2, 3])
            assert err.value.status_code == 502 and err.value.body["code"] == "backend_error"
            assert "HTTP 500" in err.value.body["message"]
    finally:
        failing.server.shutdown()


def test_the_cli_serves_with_its_flags_as_defaults():
    args = ["--engine", "reference", "--max-new-tokens", "8", "--block-size", "4", "--steps", "2", "--seed", "9"]
    with serve_cli(*args) as (url, _):
        r = client(url).completions.create(model="reference", prompt=PROMPT, extra_body={"return_token_ids": True})
        want = library_chain(PROMPT, 9, 0, max_new_tokens=8, block_size=4, steps=2)
        assert r.choices[0].token_ids == list(want.state.tokens)
        assert r.model_extra["presto"]["config"]["steps"] == 2


@pytest.mark.slow
def test_the_default_embedded_engine_serves_the_librarys_chain():
    """``--engine embedded`` (the default) on the project's tiny model: a text prompt through
    its tokenizer, the answer token for token the library's chain on the same engine."""
    from presto_sgl import models

    args = ["--model", "tiny-adder", "--max-new-tokens", "12", "--block-size", "12", "--steps", "4", "--seed", "2"]
    with serve_cli(*args) as (url, _):
        r = client(url).completions.create(
            model="tiny-adder", prompt="Q:47+385=", extra_body={"return_token_ids": True}
        )
    engine = models.embedded_engine("tiny-adder")
    config, presto = sampling_configs("step", max_new_tokens=12, block_size=12, steps=4)
    prompt = engine.encode("Q:47+385=")
    want = Sampler(engine, config, presto).run(prompt, seed=2, prompt_id=0)
    ch = r.choices[0]
    assert ch.prompt_token_ids == prompt and ch.model_extra["presto"]["response_ids"] == list(want.state.tokens)
    assert ch.text == engine.decode(ch.token_ids)


def test_shutdown_answers_requests_past_the_grace_period_with_503():
    # Ten LONG chains' worth of steps (10+ minutes): without the grace period the server would
    # wait for it, far past every deadline here.
    longer = LONG | {"extra_body": LONG["extra_body"] | {"steps": 500000}}
    with serve_cli("--engine", "reference", "--shutdown-grace", "1") as (url, proc):
        thread, outcome = _long_request_in_background(url, timeout_s=300, request=longer)
        assert wait_for(lambda: health(url)["chains"]["running"] == 1, timeout_s=DEADLINE_S)
        t0 = time.monotonic()
        proc.terminate()  # SIGTERM, as a service manager stops it
        proc.wait(DEADLINE_S)
        thread.join(DEADLINE_S)
        assert outcome["status"] == 503 and time.monotonic() - t0 < DEADLINE_S


JSON_ALPHABET = '#{}"a:1,'
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_structured_requests_sample_in_the_language():
    """``response_format`` (json_schema, json_object) and SGLang's ``regex`` / ``json_schema`` /
    ``min_tokens`` fields restrict the chains' target: every answer validates (``jsonschema``,
    ``re``), the chain is the library's constrained chain, and a backend that cannot end or
    constrain its draws is a 400 naming the field."""
    import json
    import re

    import jsonschema

    from presto_sgl.config import PowerConfig, Target
    from presto_sgl.constraints import Constraint

    engine = ReferenceEngine(ReferenceLM(8, seed=2), stop_ids=(0,), alphabet=JSON_ALPHABET)
    power = {"block_size": 8, "steps": 4, "seed": 3, "return_token_ids": True}
    with serving(make_service(engine, "reference", concurrency=2, queue_size=8)) as url:
        c = client(url)
        fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
        for body in ({"response_format": fmt}, {"json_schema": SCHEMA}, {"json_schema": json.dumps(SCHEMA)}):
            r = c.completions.create(model="reference", prompt=[1, 2], max_tokens=16, n=3, extra_body=power | body)
            for ch in r.choices:
                jsonschema.validate(json.loads(ch.text), SCHEMA)
                assert ch.finish_reason == "stop"
            assert r.model_extra["presto"]["config"]["constraint"] == {
                "json_schema": json.dumps(SCHEMA, separators=(",", ":"))
            }
        cfg, presto = sampling_configs("step", max_new_tokens=16, block_size=8, steps=4, ending="eos")
        cfg = PowerConfig(Target(cfg.target.alpha, 16, 8, "eos", constraint=Constraint(json_schema=SCHEMA)), cfg.kernel)
        want = Sampler(engine, cfg, presto).run((1, 2), seed=3, prompt_id=2).state.tokens
        assert r.choices[2].model_extra["presto"]["response_ids"] == list(want)
        r = c.completions.create(
            model="reference",
            prompt=[1, 2],
            max_tokens=16,
            extra_body=power | {"response_format": {"type": "json_object"}},
        )
        assert isinstance(json.loads(r.choices[0].text), dict)
        r = c.completions.create(
            model="reference", prompt=[1, 2], max_tokens=16, extra_body=power | {"regex": "1+", "min_tokens": 3}
        )
        assert re.fullmatch("1{3,}", r.choices[0].text), r.choices[0].text
        r = c.completions.create(
            model="reference", prompt=[1, 2], max_tokens=16, extra_body=power | {"ebnf": 'root ::= "{" "1"* "}"'}
        )
        assert re.fullmatch(r"\{1*\}", r.choices[0].text), r.choices[0].text
        for extra, param in (
            ({"regex": "1+", "json_schema": SCHEMA}, "regex"),
            ({"regex": "1+", "response_format": fmt}, "response_format"),
            ({"json_schema": "{nope"}, "json_schema"),
            ({"regex": "(1"}, "regex"),
            ({"json_schema": {"type": 5}}, "json_schema"),
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}}, "response_format"),
            ({"response_format": {"type": "json_schema"}}, "response_format"),
            ({"ebnf": "root ::= ("}, "ebnf"),
            ({"ebnf": 'root ::= "1"', "regex": "1"}, "regex"),
            ({"min_tokens": -1}, "min_tokens"),
            ({"regex": "1+", "ending": "fixed"}, "ending"),
        ):
            with pytest.raises(openai.BadRequestError) as err:
                c.completions.create(model="reference", prompt=[1, 2], max_tokens=16, extra_body=power | extra)
            assert err.value.body["param"] == param, (extra, err.value.body)
    with serving(make_service(reference(), "reference")) as url:  # no stop token: it cannot end where C allows
        with pytest.raises(openai.BadRequestError) as err:
            client(url).completions.create(model="reference", prompt=PROMPT, max_tokens=16, extra_body={"regex": "a+"})
        assert err.value.body["param"] == "regex" and "stop token" in err.value.body["message"]
