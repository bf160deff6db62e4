"""Integration with a real ``python -m sglang.launch_server`` (SmolLM2-135M, CPU, float32).

Set PRESTO_SGL_SGLANG_URL to a running server (``.ci/run`` starts one with
``scripts/sglang_server.sh start --dtype float32``); without it these tests are skipped,
unless PRESTO_SGL_REQUIRE_SGLANG=1 (CI), where a missing server is a failure.
"""

from __future__ import annotations

import math
import os

import pytest

pytestmark = pytest.mark.sglang

URL = os.environ.get("PRESTO_SGL_SGLANG_URL")
TOL = 2e-3  # fp32 server vs fp32 transformers forward, per token (different kernels)


@pytest.fixture(scope="module")
def server_url():
    if not URL:
        if os.environ.get("PRESTO_SGL_REQUIRE_SGLANG") == "1":
            pytest.fail("PRESTO_SGL_REQUIRE_SGLANG=1 but PRESTO_SGL_SGLANG_URL is not set")
        pytest.skip("no SGLang server (set PRESTO_SGL_SGLANG_URL)")
    return URL


@pytest.fixture(scope="module")
def hf_model(server_url):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from presto_sgl.engines.sglang_http import SGLangEngine

    path = SGLangEngine(server_url, mode="two-pass").model_path
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def reference(model, prefix, tokens, tau):
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([list(prefix) + list(tokens)])).logits[0].float()
    rows = logits[len(prefix) - 1 : len(prefix) - 1 + len(tokens)]
    idx = torch.tensor(list(tokens))[:, None]
    logq = torch.log_softmax(rows / tau, -1).gather(1, idx)[:, 0].tolist()
    logp = torch.log_softmax(rows, -1).gather(1, idx)[:, 0].tolist()
    return logq, logp


@pytest.mark.parametrize("mode", ["two-pass", "one-pass"])
def test_server_logprobs_match_a_full_forward(server_url, hf_model, mode):
    from presto_sgl.engines.base import Request
    from presto_sgl.engines.sglang_http import SGLangEngine

    eng = SGLangEngine(server_url)
    if mode == "one-pass" and eng.mode != "one-pass":
        pytest.skip("the server does not load the presto_raw_logprob plugin")
    eng = SGLangEngine(server_url, mode=mode)
    prompt = tuple(eng.chat_prompt("What is 17 + 25?"))
    reqs = [Request(prompt, 12, 0.25), Request(prompt[:-3], 8, 1.0), Request(prompt, 6, 0.5)]
    for req, comp in zip(reqs, eng.generate(reqs)):
        assert len(comp.tokens) == req.max_new_tokens
        lq, lp = reference(hf_model, req.prefix, comp.tokens, req.temperature)
        assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < TOL / req.temperature
        assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < TOL
        assert all(math.isfinite(x) for x in comp.logp)


def test_text_round_trip_changes_tokens_but_the_engine_keeps_ids(server_url):
    """Decoding then re-encoding changes token ids; the engine never round-trips text."""
    from presto_sgl.engines.base import Request
    from presto_sgl.engines.sglang_http import SGLangEngine

    eng = SGLangEngine(server_url, mode="two-pass")
    tok = eng.tokenizer
    ids = tok.encode(" hel", add_special_tokens=False) + tok.encode("lo", add_special_tokens=False)
    assert tok.encode(tok.decode(ids), add_special_tokens=False) != ids  # the round trip merges tokens
    (comp,) = eng.generate([Request(tuple(ids), 4, 1.0)])
    assert len(comp.tokens) == 4 and comp.cached_tokens <= len(ids)


@pytest.mark.parametrize("rule", ["bfs", "step"])
def test_power_sampling_on_the_server(server_url, rule):
    from presto_sgl import PowerConfig, PowerMH, PrestoConfig, PrestoPowerMH
    from presto_sgl.engines.sglang_http import SGLangEngine

    eng = SGLangEngine(server_url)
    keying = PrestoConfig(rule).keying
    cfg = PowerConfig(alpha=4.0, max_new_tokens=16, block_size=16, steps=6, keying=keying)
    prompt = eng.chat_prompt("Name a prime number.")
    seq = PowerMH(eng, cfg).run(prompt, seed=1)
    pre = PrestoPowerMH(eng, cfg, PrestoConfig(rule, budget=6)).run(prompt, seed=1)
    assert seq.metrics.transitions == pre.metrics.transitions == 6
    assert pre.metrics.model_calls < seq.metrics.model_calls == 6
    assert pre.metrics.cached_tokens > 0
    assert len(pre.state.tokens) == 16
