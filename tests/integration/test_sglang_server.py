"""Integration with a real ``python -m sglang.launch_server`` (SmolLM2-135M, CPU, float32).

Set PRESTO_SGL_SGLANG_URL to a running server (``.ci/run`` starts one with
``scripts/sglang_server.sh start --dtype float32``); without it these tests are skipped,
unless PRESTO_SGL_REQUIRE_SGLANG=1 (CI), where a missing server is a failure. The router
test needs PRESTO_SGL_ROUTER_URL too (``scripts/sglang_router.sh start``). A restart of the
server under a running chain is tested in ``test_sglang_load.py`` (SIGKILL, chains in flight)
and, for the graceful stop, on vLLM (``test_vllm_server.py``): both engines share the restart
handling of :class:`presto_sgl.engines.server.ServerEngine`.
"""

from __future__ import annotations

import math
import os

import pytest

from presto_sgl import PrestoConfig, Sampler
from tests.support.forward import (
    assert_extras_match,
    assert_matches_forward,
    assert_scored_exactly,
    assert_scores_match,
)

pytestmark = pytest.mark.sglang


@pytest.mark.parametrize("mode", ["two-pass", "one-pass"])
def test_server_logprobs_match_a_full_forward(server_url, hf_model, mode):
    from presto_sgl.engines.sglang.http import SGLangEngine

    eng = SGLangEngine(server_url)
    if mode == "one-pass" and eng.mode != "one-pass":
        pytest.skip("the server does not load the presto_raw_logprob plugin")
    for comp in assert_matches_forward(SGLangEngine(server_url, mode=mode), hf_model):
        assert all(math.isfinite(x) for x in comp.logp)


def test_text_round_trip_changes_tokens_but_the_engine_keeps_ids(server_url):
    """Decoding then re-encoding changes token ids; the engine never round-trips text."""
    from presto_sgl.engines.base import Request
    from presto_sgl.engines.sglang.http import SGLangEngine

    eng = SGLangEngine(server_url, mode="two-pass")
    tok = eng.tokenizer
    ids = tok.encode(" hel", add_special_tokens=False) + tok.encode("lo", add_special_tokens=False)
    assert tok.encode(tok.decode(ids), add_special_tokens=False) != ids  # the round trip merges tokens
    (comp,) = eng.generate([Request(tuple(ids), 4, 1.0)])
    assert len(comp.tokens) == 4 and comp.cached_tokens <= len(ids)


@pytest.mark.parametrize("rule", ["bfs", "step"])
def test_power_sampling_on_the_server(server_url, rule):
    from presto_sgl import KernelConfig, PowerConfig, Target
    from presto_sgl.engines.sglang.http import SGLangEngine

    eng = SGLangEngine(server_url)
    keying = PrestoConfig(rule).keying
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=16, block_size=16), KernelConfig(steps=6))
    prompt = eng.chat_prompt("Name a prime number.")
    seq = Sampler(eng, cfg, PrestoConfig("sequential", keying=keying)).run(prompt, seed=1)
    pre = Sampler(eng, cfg, PrestoConfig(rule, budget=6)).run(prompt, seed=1)
    assert seq.metrics.transitions == pre.metrics.transitions == 6
    assert pre.metrics.model_calls < seq.metrics.model_calls == 6
    assert pre.metrics.cached_tokens > 0
    assert len(pre.state.tokens) == 16


@pytest.mark.parametrize("sampler", ["entropycut", "multitry"])
def test_paper_samplers_on_the_server(server_url, hf_model, sampler):
    """EntropyCut and MultiTryMH on a one-pass server: entropy and log q at every score
    temperature come from the decode pass and match a fresh fp32 forward; sequential and
    the step rule each finish K transitions, PreSTO in fewer calls. A two-pass server
    (stock SGLang) has neither and is refused before any call."""
    from presto_sgl import CapabilityError, sampling_configs
    from presto_sgl.engines.base import Request
    from presto_sgl.engines.sglang.http import SGLangEngine

    eng = SGLangEngine(server_url)
    if eng.mode != "one-pass":
        pytest.skip("the server does not load the presto_raw_logprob plugin")
    temps = (0.25, 0.5, 1.0)
    assert eng.capabilities.entropy and eng.capabilities.scores_at(temps)
    prompt = tuple(eng.chat_prompt("Name a prime number."))
    (comp,) = eng.generate([Request(prompt, 10, 0.5, None, return_entropy=True, score_temperatures=temps)])
    assert_extras_match(hf_model, prompt, comp.tokens, comp.logq_at, temps, comp.entropy)
    results = {}
    for rule in ("sequential", "step"):
        cfg, presto = sampling_configs(
            rule, budget=4, alpha=4.0, max_new_tokens=12, block_size=12, steps=4, method=sampler
        )
        results[rule] = Sampler(eng, cfg, presto).run(prompt, seed=1)
    for r in results.values():
        st = r.state
        assert r.metrics.transitions == 4 and len(st.tokens) == 12
        assert_scores_match(hf_model, st.prompt, st.tokens, st.logp)  # (MultiTryMH's log q: per draw's temperature)
        assert_extras_match(hf_model, st.prompt, st.tokens, st.logq_at, temps, st.entropy)
    assert results["step"].metrics.model_calls < results["sequential"].metrics.model_calls == 4
    with pytest.raises(CapabilityError):
        Sampler(SGLangEngine(server_url, mode="two-pass"), cfg, presto)


def test_eos_target_on_the_server(server_url, hf_model):
    """ending='eos' on a real SGLang server (:func:`tests.support.eos.check_eos_target`)."""
    from presto_sgl.engines.sglang.http import SGLangEngine
    from tests.support.eos import check_eos_target

    eng = SGLangEngine(server_url)
    check_eos_target(eng, hf_model, entropy=eng.mode == "one-pass")


ROUTER_URL = os.environ.get("PRESTO_SGL_ROUTER_URL")


@pytest.fixture(scope="module")
def router_url(server_url):
    if not ROUTER_URL:
        if os.environ.get("PRESTO_SGL_REQUIRE_SGLANG") == "1":
            pytest.fail("PRESTO_SGL_REQUIRE_SGLANG=1 but PRESTO_SGL_ROUTER_URL is not set")
        pytest.skip("no SGLang router (set PRESTO_SGL_ROUTER_URL; bash scripts/sglang_router.sh start)")
    return ROUTER_URL


def test_sampling_through_the_router(router_url, hf_model):
    """sglang-router takes one sampling_params per body: requests go grouped, concurrently."""
    from presto_sgl import KernelConfig, PowerConfig, Target
    from presto_sgl.engines.sglang.http import SGLangEngine
    from presto_sgl.scheduling.runner import run_prompts

    eng = SGLangEngine(router_url)
    assert eng.server_loads() and eng.server_info()["model_path"] == eng.model_path  # from the worker
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=8, block_size=8), KernelConfig(steps=4))
    prompts = [eng.chat_prompt(q) for q in ("Name a prime number.", "What is 6 times 7?", "Say hi.")]
    seq = Sampler(eng, cfg, PrestoConfig("sequential")).run(prompts[0], seed=1)
    presto = Sampler(eng, cfg, PrestoConfig("step", budget=4))
    with eng.monitor() as mon:
        results = run_prompts(presto.run, prompts, seed=1, workers=3)
    assert seq.metrics.transitions == 4 and seq.metrics.model_calls == 4
    assert [r.metrics.transitions for r in results] == [4, 4, 4]
    assert all(r.metrics.model_calls < 4 for r in results)
    for r in (seq, *results):
        assert_scored_exactly(hf_model, r.state, cfg.temperature)
    summary = mon.summary()
    assert summary.samples > 0 and summary.kv_tokens_peak > 0 and summary.prefix_hit_rate > 0


def test_batched_attention_matches_torch_native(server_url, spare_sglang_url):
    """The session's spare fp32 server with --batched-attention (one masked SDPA per layer for the
    whole batch) against the shared torch_native server: the same greedy tokens, per-token
    log p0 within 1e-4 (20 times tighter than the forward checks' TOL: the spare also prefills in
    chunks, without a radix cache, and re-prefills what it retracts, each a different float32
    summation order), for a ragged batch that runs both extend and decode."""
    from presto_sgl import wire
    from presto_sgl.engines.server import http_json
    from presto_sgl.engines.sglang.http import SGLangEngine

    shared = SGLangEngine(server_url)
    if shared.server_info().get("dtype") != "float32":
        pytest.skip("the shared server is not float32 (scripts/sglang_server.sh start --dtype float32)")
    tok = shared.tokenizer
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in ("Name a prime number.", "What is 6 times 7?", "Say hi.", "Write one sentence about the sea.")
    ]
    ids = [tok.encode(p, add_special_tokens=False) for p in prompts]
    ids.append(ids[0][:-5])  # a prefix of another request
    body = {
        "input_ids": ids,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": 16,
            "ignore_eos": True,
            "custom_params": {wire.FIELDS_KEY: wire.ask(False)},  # raw log p0 (the plugin answers who asks)
        },
        "return_logprob": True,
    }
    batched = http_json("POST", spare_sglang_url + "/generate", body, 600)
    native = http_json("POST", server_url + "/generate", body, 600)
    for a, b in zip(batched, native, strict=True):
        assert a["output_ids"] == b["output_ids"]
        pa, pb = a["meta_info"]["raw_logprob"], b["meta_info"]["raw_logprob"]
        assert len(pa) == 16 and max(abs(x - y) for x, y in zip(pa, pb)) < 1e-4
