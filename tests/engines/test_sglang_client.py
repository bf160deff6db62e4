"""The SGLang HTTP engine's protocol handling against a scripted stand-in server.

The stand-in speaks SGLang's native /generate shapes over a reference LM (decode with
output_token_logprobs = log q_tau; scoring with max_new_tokens 0 and input_token_logprobs
whose first entry is null; optional one-pass raw_logprob; /v1/loads). It checks request
building, two-pass and one-pass parsing, redraws of aborted responses only, error messages, a
restart mid-call (the connection closes, the port is dead for a second), the load monitor,
and router-style bodies. The real server is tested in test_sglang_server.py (``sglang``).
"""

from __future__ import annotations

import json
import math
import time

import pytest

from presto_sgl import EngineError, KernelConfig, PowerConfig, PrestoConfig, Sampler, Target, wire
from presto_sgl.engines.base import Request
from presto_sgl.engines.sglang.http import NEUTRAL, SGLangEngine
from tests.support.sglang_standin import StandIn


@pytest.fixture
def stand_in(tmp_path):
    servers = []

    def make(**kw):
        s = StandIn(tmp_path, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.server.shutdown()


@pytest.mark.parametrize("one_pass", [False, True])
def test_two_pass_and_one_pass_give_exact_scores(stand_in, one_pass):
    srv = stand_in(one_pass=one_pass)
    eng = SGLangEngine(srv.url)
    assert eng.mode == ("one-pass" if one_pass else "two-pass")
    assert eng.capabilities.vocab_size == 16 and eng.capabilities.context_length == 64
    assert eng.capabilities.entropy == one_pass and not eng.capabilities.seeded
    reqs = [Request((1, 2, 3), 5, 0.25), Request((1, 2, 3, 4, 5, 6), 2, 0.5)]
    comps = eng.generate(reqs)
    for r, c in zip(reqs, comps):
        lp, lq = srv.lm.score(r.prefix, c.tokens, r.temperature)
        assert sum(c.logp) == pytest.approx(lp, abs=1e-9) and sum(c.logq) == pytest.approx(lq, abs=1e-9)
    decode = srv.bodies[-2] if not one_pass else srv.bodies[-1]
    assert decode["input_ids"] == [[1, 2, 3], [1, 2, 3, 4, 5, 6]]
    asks = {"custom_params": {wire.FIELDS_KEY: "|"}} if one_pass else {}  # log p0 only: PowerMH asks no more
    assert decode["sampling_params"][0] == {**NEUTRAL, "temperature": 0.25, "max_new_tokens": 5, **asks}
    assert NEUTRAL["ignore_eos"] and NEUTRAL["top_k"] == -1 and NEUTRAL["repetition_penalty"] == 1.0
    if not one_pass:
        score = srv.bodies[-1]
        assert score["logprob_start_len"] == [2, 5]
        assert score["input_ids"][0] == [1, 2, 3, *comps[0].tokens]


def test_stop_tokens_come_from_the_servers_generation_config(stand_in, tmp_path, monkeypatch):
    monkeypatch.setattr(SGLangEngine, "tokenizer", None)  # the stand-in has no tokenizer files
    srv = stand_in()
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "eos_token_id": None}))
    assert SGLangEngine(srv.url).stop_token_ids == ()  # neither file names an EOS
    (tmp_path / "config.json").write_text(json.dumps({**config, "eos_token_id": 4}))
    assert SGLangEngine(srv.url).stop_token_ids == (4,)  # no generation_config.json: config.json's
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 2]}))
    assert SGLangEngine(srv.url).stop_token_ids == (2, 9)


def test_only_a_reported_abort_is_redrawn(stand_in):
    """finish_reason decides: 'abort' is drawn again (a bounded number of times); a stop, a short
    'length' answer, a null log-prob or missing one-pass fields are errors, never silent redraws."""
    srv = stand_in()
    eng = SGLangEngine(srv.url, max_retries=2)
    srv.finish = ["abort"]
    (c,) = eng.generate([Request((1, 2), 4, 1.0)])
    assert len(c.tokens) == 4 and eng.stats.retries == 1 and not srv.finish
    srv.score_finish = ["abort"]  # the scoring pass aborted: the pair is drawn again
    (c,) = eng.generate([Request((1, 2), 4, 1.0)])
    assert len(c.tokens) == 4 and eng.stats.retries == 2 and not srv.score_finish
    srv.finish = ["abort"] * 10
    with pytest.raises(EngineError, match="incomplete results"):
        eng.generate([Request((1, 2), 4, 1.0)])
    for kind, match in (("stop", "finish_reason="), ("short", "it must be whole"), ("nan", "must be <= 0 and not NaN")):
        srv.finish = [kind]
        retries = eng.stats.retries
        with pytest.raises(EngineError, match=match):
            eng.generate([Request((1, 2), 4, 1.0)])
        assert eng.stats.retries == retries, kind
    one = stand_in(one_pass=True)
    eng = SGLangEngine(one.url)
    one.finish = ["noraw"]
    with pytest.raises(EngineError, match="raw log-probs"):
        eng.generate([Request((1, 2), 4, 1.0)])
    assert eng.stats.retries == 0


def test_http_errors_and_unreachable_servers_name_the_url(stand_in):
    srv = stand_in()
    eng = SGLangEngine(srv.url)
    srv.fail_status = 503
    with pytest.raises(EngineError, match=r"HTTP 503.*KV pool exhausted"):
        eng.generate([Request((1,), 2, 1.0)])
    with pytest.raises(EngineError, match=r"http://127.0.0.1:9 is unreachable"):
        SGLangEngine("http://127.0.0.1:9", timeout_s=2)


def test_bad_engine_arguments():
    with pytest.raises(ValueError, match="`mode`"):
        SGLangEngine(mode="three-pass")
    with pytest.raises(ValueError, match="`timeout_s`"):
        SGLangEngine(timeout_s=0)


@pytest.mark.parametrize("rule", ["bfs", "step"])
def test_samplers_run_on_the_http_engine(stand_in, rule):
    """End to end through HTTP (unseeded, like SGLang on CPU): metrics add up, no errors."""
    eng = SGLangEngine(stand_in().url)
    keying = PrestoConfig(rule).keying
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=16, block_size=8), KernelConfig(steps=5))
    seq = Sampler(eng, cfg, PrestoConfig("sequential", keying=keying)).run([1, 2, 3], seed=0)
    pre = Sampler(eng, cfg, PrestoConfig(rule, budget=6)).run([1, 2, 3], seed=0)
    assert seq.metrics.transitions == pre.metrics.transitions == 10
    assert pre.metrics.model_calls < seq.metrics.model_calls
    assert pre.metrics.cached_tokens > 0


def test_many_prompts_in_flight_keep_every_chain_exact(stand_in, tmp_path):
    """The runner returns results in prompt order, equal to one-by-one runs (seeded reference
    engine, one worker: in-process engines are not thread-safe); the HTTP engine serves four
    chains at once, each with its own trace whose metrics match the result."""
    from presto_sgl.chain.trace import metrics_from_trace, read_trace
    from presto_sgl.engines.reference import ReferenceEngine
    from presto_sgl.scheduling.runner import run_prompts

    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=16, block_size=8), KernelConfig(steps=5))
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [2, 2]]
    sampler = Sampler(ReferenceEngine(), cfg, PrestoConfig("step", budget=4))
    one_by_one = [sampler.run(p, seed=3, prompt_id=i).state for i, p in enumerate(prompts)]
    done = []
    results = run_prompts(sampler.run, prompts, seed=3, workers=1, on_done=lambda i, r: done.append(i))
    assert [r.state for r in results] == one_by_one and sorted(done) == [0, 1, 2, 3]

    http = Sampler(SGLangEngine(stand_in().url), cfg, PrestoConfig("step", budget=4))
    results = run_prompts(http.run, prompts, seed=3, workers=4, trace_dir=tmp_path / "traces")
    assert all(r.metrics.transitions == 10 for r in results)
    for i, r in enumerate(results):
        with open(tmp_path / "traces" / f"prompt-{i}.jsonl") as f:
            assert metrics_from_trace(read_trace(f)) == [r.metrics]
    with pytest.raises(ValueError, match="`workers`"):
        run_prompts(http.run, prompts, seed=3, workers=0)


def _assert_exact_scores(lm, state, tau):
    """Every token's log q_tau and log p0 in the state match a fresh scoring of the final tokens."""
    for t in range(state.length):
        lp, lq = lm.score(state.context(t), state.tokens[t : t + 1], tau)
        assert state.logp[t] == pytest.approx(lp, abs=1e-9) and state.logq[t] == pytest.approx(lq, abs=1e-9)


@pytest.mark.parametrize("one_pass", [False, True])
def test_a_server_restart_mid_call_is_waited_out_and_redrawn(stand_in, one_pass):
    srv = stand_in(one_pass=one_pass)
    eng = SGLangEngine(srv.url, restart_timeout_s=30)
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=8, block_size=4), KernelConfig(steps=4))
    sampler = Sampler(eng, cfg, PrestoConfig("step", budget=3))
    calls = []
    real_generate = eng.generate

    def generate(requests):  # the server goes away during the fourth call and is back 1 s later
        calls.append(len(requests))
        if len(calls) == 4:
            srv.drop_next = 1.0
        return real_generate(requests)

    eng.generate = generate
    result = sampler.run([1, 2, 3], seed=0)
    assert eng.stats.reconnects == 1 and eng.stats.retries >= 1
    assert result.metrics.transitions == 8 and result.state.length == 8
    _assert_exact_scores(srv.lm, result.state, cfg.temperature)


def test_a_server_that_does_not_come_back_fails_naming_the_url(stand_in):
    srv = stand_in()
    eng = SGLangEngine(srv.url, restart_timeout_s=0.5)
    srv.drop_next = math.inf
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=rf"{srv.url} went away during a call .*restart_timeout_s=0.5 s"):
        eng.generate([Request((1, 2), 4, 1.0)])
    # it gave up after restart_timeout_s, not the default's 300 s (the margin: a loaded machine)
    assert eng.stats.reconnects == 1 and time.monotonic() - t0 < 60
    with pytest.raises(ValueError, match="`restart_timeout_s`"):
        SGLangEngine(srv.url, restart_timeout_s=-1)


def test_the_monitor_samples_kv_use_and_prefix_hits(stand_in):
    srv = stand_in()
    eng = SGLangEngine(srv.url)
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=8, block_size=8), KernelConfig(steps=4))
    srv.polls_per_post = 2  # from now on each call is answered once the monitor has seen it twice
    with eng.monitor(interval_s=0.01) as mon:
        result = Sampler(eng, cfg, PrestoConfig("step", budget=4)).run([1, 2, 3], seed=0)
    s = mon.summary()
    assert s.samples > 5 and s.missed == 0 and s.kv_capacity == 1000
    assert s.kv_tokens_peak >= 10 and s.kv_tokens_peak >= s.kv_tokens_mean > 0
    assert s.kv_usage_peak == s.kv_tokens_peak / 1000 and s.running_requests_max >= 1
    assert s.server_cache_hit_rate == 0.5 and s.reconnects == 0
    m = result.metrics
    assert (s.prompt_tokens, s.cached_tokens) == (m.prefill_tokens, m.cached_tokens) and s.cached_tokens > 0
    assert s.prefix_hit_rate == s.cached_tokens / s.prompt_tokens == m.cache_hit_rate
    with pytest.raises(ValueError, match="`interval_s`"):
        eng.monitor(interval_s=0)


def test_a_router_url_works_with_shared_sampling_params(stand_in):
    """Like sglang-router: lists of sampling_params are rejected, so requests go per distinct
    (params, logprob_start_len), concurrently; model info and loads come from the fallbacks."""
    worker = stand_in()
    router = stand_in(worker=worker)
    eng = SGLangEngine(router.url)
    assert eng.model_path == router.model_path and eng.mode == "two-pass"
    reqs = [Request((1, 2, 3), 5, 0.25), Request((1, 2, 3), 5, 0.25), Request((1, 2), 2, 0.5)]
    n = len(router.bodies)
    comps = eng.generate(reqs)
    for r, c in zip(reqs, comps):
        lp, lq = router.lm.score(r.prefix, c.tokens, r.temperature)
        assert sum(c.logp) == pytest.approx(lp, abs=1e-9) and sum(c.logq) == pytest.approx(lq, abs=1e-9)
    bodies = router.bodies[n:]
    assert all(isinstance(b["sampling_params"], dict) for b in bodies)
    decode = sorted(
        (len(b["input_ids"]), b["sampling_params"]["max_new_tokens"]) for b in bodies if "logprob_start_len" not in b
    )
    assert decode == [(1, 2), (2, 5)]  # the two equal requests share a body
    assert eng.server_loads()[0]["max_total_num_tokens"] == 1000  # the worker's /v1/loads
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=8, block_size=4), KernelConfig(steps=3))
    assert Sampler(eng, cfg, PrestoConfig("step", budget=4)).run([1, 2, 3], seed=0).metrics.transitions == 6
    worker.go_away(1.0)  # the router answers HTTP 500 until its worker is back
    assert len(eng.generate(reqs)) == 3 and eng.stats.reconnects == 1 and not worker.down


@pytest.mark.parametrize("one_pass", [False, True])
def test_a_body_lost_behind_a_router_is_redrawn_alone(stand_in, one_pass):
    """Of a call's concurrent bodies through a router, only the one whose connection was lost
    is sent again once the server is healthy; the answers that came back are kept, so no
    request is drawn twice."""
    worker = stand_in()
    router = stand_in(worker=worker, one_pass=one_pass)
    eng = SGLangEngine(router.url)
    assert eng.mode == ("one-pass" if one_pass else "two-pass")
    reqs = [Request((1, 2, 3), n, 0.5) for n in (2, 3, 4)]
    n = len(router.bodies)
    router.drop_body = lambda b: b["sampling_params"]["max_new_tokens"] == 3
    comps = eng.generate(reqs)
    assert [len(c.tokens) for c in comps] == [2, 3, 4] and eng.stats.reconnects == 1
    for r, c in zip(reqs, comps):
        lp, lq = router.lm.score(r.prefix, c.tokens, r.temperature)
        assert sum(c.logp) == pytest.approx(lp, abs=1e-9) and sum(c.logq) == pytest.approx(lq, abs=1e-9)
    decodes = [
        b["sampling_params"]["max_new_tokens"] for b in router.bodies[n:] if b["sampling_params"]["max_new_tokens"]
    ]
    assert sorted(decodes) == [2, 3, 3, 4]  # the lost one twice, the others once


def test_each_chain_sends_its_calls_under_one_routing_key(stand_in):
    """Every /generate of a chain carries X-SMG-Routing-Key '<run seed>/<prompt id>' (which
    sglang-router's manual policy follows, keeping the chain's KV prefixes on one worker);
    requests of different routes never share a body."""
    from presto_sgl.scheduling.runner import run_prompts

    worker = stand_in()
    router = stand_in(worker=worker)
    eng = SGLangEngine(router.url)
    n = len(router.bodies)
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=8, block_size=4), KernelConfig(steps=3))
    prompts = [[1, 2, 3], [4, 5]]
    run_prompts(Sampler(eng, cfg, PrestoConfig("step", budget=4)).run, prompts, seed=3, workers=2)
    sent = list(zip(router.bodies[n:], router.routes[n:]))
    assert len(sent) > 8
    for body, route in sent:
        chains = {0 if ids[:3] == prompts[0] else 1 for ids in body["input_ids"]}
        assert len(chains) == 1 and route == f"3/{chains.pop()}"
    n = len(router.bodies)
    eng.generate([Request((1, 2), 2, 0.5, route="a"), Request((1, 2), 2, 0.5, route="b"), Request((1, 2), 2, 0.5)])
    decode = [r for b, r in zip(router.bodies[n:], router.routes[n:]) if "logprob_start_len" not in b]
    assert sorted(map(str, decode)) == ["None", "a", "b"]  # three bodies (the same params)
    single = stand_in(one_pass=True)
    eng = SGLangEngine(single.url)
    n = len(single.bodies)
    eng.generate([Request((1, 2), 2, 0.5, route="a"), Request((1, 3), 3, 0.5, route="a")])
    assert single.routes[n:] == ["a"] and len(single.bodies[n]["input_ids"]) == 2  # one body, one route


def test_cli_trace_has_a_server_record(stand_in, tmp_path, monkeypatch):
    from presto_sgl import cli
    from presto_sgl.chain.trace import read_trace

    monkeypatch.setattr(SGLangEngine, "tokenizer", None)  # the stand-in has no tokenizer files
    srv = stand_in(delay_s=0.02)
    trace = tmp_path / "t.jsonl"
    argv = [
        "sample",
        "--engine",
        "sglang",
        "--url",
        srv.url,
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "8",
        "--block-size",
        "8",
        "--steps",
        "3",
        "--trace",
        str(trace),
    ]
    assert cli.main(argv) == 0
    records = read_trace(trace.read_text().splitlines())
    (server,) = [r for r in records if r["type"] == "server"]
    assert server["url"] == srv.url and server["samples"] >= 1 and server["kv_capacity"] == 1000
    assert 0 < server["prefix_hit_rate"] < 1 and server["reconnects"] == 0


@pytest.mark.parametrize(
    ("server", "refusal"),
    [("stale", "older presto-sgl plugin"), ("speculative", "speculative decoding")],
)
def test_a_plugin_that_cannot_serve_one_request_exactly_is_refused_when_the_engine_is_built(stand_in, server, refusal):
    """An older plugin (fields for every request, at the server's temperatures) and a server whose
    decode steps bypass the sampler (speculative decoding: fields for the first token only) are
    refused by name before any chain runs, in every mode that would read them."""
    srv = stand_in(one_pass=server)
    with pytest.raises(EngineError, match=refusal):
        SGLangEngine(srv.url)
